"""SGLang's mem_fraction_static by the GPU's memory, per version: values, the affinity floor, per-node judging."""

from __future__ import annotations

import pytest

from webhook.decide.mutation import node_vram_floor_mib
from webhook.decide.placement import Code, Need, fit
from webhook.engines.sglang import StaticFraction, default_mem_fraction

from ..unit.helpers import gpu_node
from .test_reading import demand, gpu, pod

H100, H200, L4, L40S, T4, B200 = 81559, 143771, 23034, 46068, 15360, 183359


@pytest.mark.parametrize("version, tp, gpu_mib, expected", [
    ((0, 4, 3), 8, H200, 0.81),  # before 0.4.6: the TP table on any GPU
    ((0, 4, 6), 4, H100, 0.85),  # 0.4.6: the table up to 80 GiB ...
    ((0, 4, 6), 4, H200, round((H200 - 13 * 1024) / H200, 3)),  # ... (gpu − 13 GiB) / gpu above
    ((0, 5, 0), 8, H100, round((H100 - (9.5 + 4) * 1024) / H100, 3)),  # 0.4.8–0.5.2: (9.5 + TP·PP/2) GiB
    ((0, 5, 0), 1, L4, round((L4 - 2.9 * 1024) / L4, 3)),  # (2.8 + TP·PP/10) GiB below 35 GiB
    ((0, 5, 0), 1, B200, round((B200 - 32 * 1024) / B200, 3)),
    # 0.5.3+: 512 + 1.5 × 8192 + 2 × 256 + 1/8 GiB = 13,440 MiB on an H100 at TP 1: 0.835 (engine-sources §2.1).
    ((0, 5, 5), 1, H100, 0.835),
    ((0, 5, 5), 8, H200, round((H200 - (512 + 8192 * 1.5 + 512 * 2 + 1024)) / H200, 3)),
    ((0, 5, 5), 1, T4, round((T4 - (512 + 2048 * 1.5 + 8 * 2 + 128)) / T4, 3)),
])
def test_fraction_follows_the_version_and_the_gpu(version: tuple[int, int, int], tp: int, gpu_mib: int,
                                                  expected: float) -> None:
    assert StaticFraction(version, tp)(gpu_mib) == pytest.approx(expected, abs=1e-9)


def test_reserves_for_dp_attention_and_speculative_decoding() -> None:
    plain = StaticFraction((0, 5, 5), 8, dp=8)
    assert StaticFraction((0, 5, 5), 8, dp=8, dp_attention=True)(H200) < plain(H200)
    assert StaticFraction((0, 5, 5), 8, speculative="EAGLE")(H200) < plain(H200)
    assert StaticFraction((0, 5, 5), 8, speculative="STANDALONE")(H200) < StaticFraction(
        (0, 5, 5), 8, speculative="EAGLE")(H200)
    assert StaticFraction((0, 5, 5), 8, speculative="NGRAM")(H200) == plain(H200)


@pytest.mark.parametrize("rule", [StaticFraction((0, 5, 5), 1), StaticFraction((0, 5, 5), 8),
                                  StaticFraction((0, 5, 0), 4), StaticFraction((0, 4, 6), 2),
                                  StaticFraction((0, 4, 3), 8)])
@pytest.mark.parametrize("need_gib", [6, 19, 40, 66, 71, 110, 150])
def test_floor_is_the_smallest_gpu_that_holds_the_need(rule: StaticFraction, need_gib: float) -> None:
    need = need_gib * 1024
    floor = rule.floor_mib(need)
    assert rule.usable_mib(floor) >= need
    assert all(rule.usable_mib(v) < need for v in range(1, floor, 97)), "a smaller GPU holds it"


def test_admission_judges_each_node_with_its_own_fraction() -> None:
    # 120 GiB per GPU at TP 8: SGLang 0.5.4 keeps ~14.5 GiB of an H200 (0.897), the TP table would say 0.81.
    rule = StaticFraction((0, 5, 4), 8)
    with_rule = Need(gpus=8, per_gpu_mib=120 * 1024, utilization=default_mem_fraction(8), util_rule=rule)
    without = Need(gpus=8, per_gpu_mib=120 * 1024, utilization=default_mem_fraction(8))
    h200 = gpu_node("h200", gpus=8, product="NVIDIA-H200", mem=H200)
    from webhook.cluster.inventory import node_gpus
    from webhook.config import Config

    node = node_gpus(h200, Config())
    assert fit(with_rule, node).fits
    assert fit(without, node).code == Code.VRAM_TOO_SMALL
    # On an H100, 0.5.4 keeps 13.4 GiB at TP 1 where the table said 12 %: 68 GiB fit 0.88 but not 0.835.
    h100 = node_gpus(gpu_node("h100", gpus=1, product="NVIDIA-H100-80GB-HBM3", mem=H100), Config())
    tight = Need(gpus=1, per_gpu_mib=68 * 1024, utilization=0.88, util_rule=StaticFraction((0, 5, 4), 1))
    verdict = fit(tight, h100)
    assert verdict.code == Code.VRAM_TOO_SMALL and "(0.835 usable)" in verdict.reason


def test_an_sglang_pod_carries_the_rule_and_its_affinity_floor_follows_it() -> None:
    d = demand(pod(gpu("lmsysorg/sglang:v0.5.4", 4, command=["python3", "-m", "sglang.launch_server"],
                       args=["--model-path", "Qwen/Qwen2.5-72B-Instruct", "--tp", "4"])))
    assert d.util_rule == StaticFraction((0, 5, 4), 4)
    assert d.utilization == 0.85  # the figure for a GPU not yet known
    assert d.min_per_gpu_mib is not None
    assert node_vram_floor_mib(d) == StaticFraction((0, 5, 4), 4).floor_mib(d.min_per_gpu_mib)
    declared = demand(pod(gpu("lmsysorg/sglang:v0.5.4", 4, command=["python3", "-m", "sglang.launch_server"],
                              args=["--model-path", "Qwen/Qwen2.5-72B-Instruct", "--tp", "4",
                                    "--mem-fraction-static", "0.8"])))
    assert declared.util_rule is None and declared.utilization == 0.8
