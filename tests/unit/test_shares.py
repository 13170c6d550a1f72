"""GPU shares stated to HAMi, Volcano vGPU and KAI-Scheduler are judged against the model the pod runs (issue 41)."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.cluster.snapshot import snapshot_from_nodes
from webhook.config import Config
from webhook.decide.mutation import mutation
from webhook.decide.shares import share_of
from webhook.decide.verdict import SHARE_TOO_SMALL, judge
from webhook.kinds import pod_view
from webhook.models.catalog import builtin_catalog

from .helpers import gpu_node

CONFIG = Config()
CATALOG = builtin_catalog()
L4 = snapshot_from_nodes([gpu_node("l4-0", gpus=4, mem=23034, product="NVIDIA-L4")], CONFIG, revision=1)
H100 = snapshot_from_nodes([gpu_node("h100-0", gpus=8, mem=81559, product="NVIDIA-H100-80GB-HBM3")], CONFIG,
                           revision=1)
LLAMA8 = ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "8192"]
LLAMA70 = ["vllm", "serve", "meta-llama/Llama-3.1-70B-Instruct", "--max-model-len", "8192"]


def pod(limits: dict[str, Any] | None = None, annotations: dict[str, str] | None = None,
        command: list[str] = LLAMA8) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "engine", "image": "vllm/vllm-openai:v0.11.0", "command": command}
    if limits is not None:
        c["resources"] = {"limits": limits}
    meta: dict[str, Any] = {"name": "p", "namespace": "ml"}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": [c]}}


def share(obj: dict[str, Any]) -> Any:
    view = pod_view(obj, None)
    assert view is not None
    return share_of(view, CONFIG)


def test_each_systems_share_is_read() -> None:
    hami = share(pod({"nvidia.com/gpu": 2, "nvidia.com/gpumem": 8000}))
    assert (hami.system, hami.gpus, hami.mib, hami.enforced) == ("HAMi", 2, 8000, True)
    pct = share(pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 25}))
    assert (pct.system, pct.fraction, pct.said()) == ("HAMi", 0.25, "nvidia.com/gpumem-percentage 25 %")
    vol = share(pod({"volcano.sh/vgpu-number": 2, "volcano.sh/vgpu-memory": 10240}))
    assert (vol.system, vol.gpus, vol.mib) == ("Volcano vGPU", 2, 10240)
    kai = share(pod(annotations={"gpu-fraction": "0.5"}))
    assert (kai.system, kai.fraction, kai.enforced, kai.container) == ("KAI", 0.5, False, "engine")
    assert share(pod(annotations={"gpu-memory": "2000"})).mib == 2000
    # kube-apiserver stores resource amounts in canonical form: the 8000 a user wrote reaches the webhook as "8k"
    # (found by tests/e2e/test_shares.py: before, "'8k' is not valid" denied a working HAMi pod).
    assert share(pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8k"})).mib == 8000
    assert share(pod({"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "20k"})).mib == 20000
    # Whole GPUs: nothing stated to judge.
    assert share(pod({"nvidia.com/gpu": 1})) is None
    assert share(pod({"volcano.sh/vgpu-number": 1})) is None
    assert share(pod({"nvidia.com/gpu": 1}, annotations={"gpu-fraction": "0.5"})) is None


@pytest.mark.parametrize("obj,why", [
    (pod(annotations={"gpu-fraction": "1.5"}), "above 0 and at most 1"),
    (pod(annotations={"gpu-fraction": "half"}), "above 0 and at most 1"),
    (pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 0}), "1 to 100"),
    (pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem": "-5"}), "whole number of MiB"),
    (pod({"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": "10Gi"}), "whole number of MiB"),
])
def test_a_value_the_system_refuses_is_a_declaration_error(obj: dict[str, Any], why: str) -> None:
    j = judge(obj, L4, CONFIG, CATALOG)
    assert not j.allowed and j.code == "declaration" and why in j.message


def test_an_enforced_share_below_the_model_is_denied_with_the_size_that_holds_it() -> None:
    # 8000 MiB for an 8B model in bf16 (15 GiB of weights): HAMi-core caps the device there, vLLM cannot load it.
    j = judge(pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 8000}), L4, CONFIG, CATALOG)
    assert not j.allowed and j.code == SHARE_TOO_SMALL
    assert "asks HAMi for nvidia.com/gpumem 8000 MiB of each GPU" in j.message
    assert "Try: nvidia.com/gpumem: 23034" in j.message  # the band's high end is past an L4: the whole L4
    on_h100 = judge(pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 8000}), H100, CONFIG, CATALOG)
    suggested = int(on_h100.message.split("Try: nvidia.com/gpumem: ")[1].split(" ")[0])
    # The suggestion, asked, is admitted.
    again = judge(pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem": suggested}), H100, CONFIG, CATALOG)
    assert again.allowed and again.demand is not None and again.demand.per_gpu_mib == suggested
    volcano = judge(pod({"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": 10240}), L4, CONFIG, CATALOG)
    assert not volcano.allowed and volcano.code == SHARE_TOO_SMALL and "Volcano vGPU caps" in volcano.message


def test_an_enforced_share_that_holds_the_model_is_placed_by_the_share() -> None:
    j = judge(pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 20000}), L4, CONFIG, CATALOG)
    assert j.allowed and j.demand is not None and j.demand.per_gpu_mib == 20000
    assert j.demand.share is not None and j.demand.spec is not None
    assert j.demand.spec.name == "llama-3.1-8b-instruct"
    # A share no GPU can grant: the field to lower, not "more GPUs".
    too_big = judge(pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 30000}), L4, CONFIG, CATALOG)
    assert not too_big.allowed and "nvidia.com/gpumem: 23034 at most (the largest GPU)" in too_big.message


def test_a_percentage_is_of_the_gpu_the_pod_gets() -> None:
    obj = pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 50})
    on_h100 = judge(obj, H100, CONFIG, CATALOG)
    assert on_h100.allowed  # half of an 80 GB GPU, 0.9 of that, holds an 8B model
    on_l4 = judge(obj, L4, CONFIG, CATALOG)
    assert not on_l4.allowed and "Try: nvidia.com/gpumem-percentage: 85 (asked" in on_l4.message


def test_kai_is_never_denied_for_its_share_but_warned_with_the_knob_to_match() -> None:
    # KAI does not cap device memory: vLLM sees the whole L4 and starts; its neighbours pay.
    j = judge(pod(annotations={"gpu-fraction": "0.5"}), L4, CONFIG, CATALOG)
    assert j.allowed and j.demand is not None and j.demand.share is not None
    assert any("KAI does not cap device memory, so it takes memory" in w for w in j.warnings)
    assert any("set --gpu-memory-utilization 0.5" in w for w in j.warnings)
    fits = judge(pod(annotations={"gpu-fraction": "0.5"}), H100, CONFIG, CATALOG)
    assert fits.allowed and not any("takes memory" in w for w in fits.warnings)
    assert any("set --gpu-memory-utilization 0.5" in w for w in fits.warnings)
    said = pod(annotations={"gpu-fraction": "0.5"}, command=[*LLAMA8, "--gpu-memory-utilization", "0.45"])
    assert not any("set --gpu-memory-utilization" in w for w in judge(said, H100, CONFIG, CATALOG).warnings)
    # A model no whole GPU holds is rejected as any pod is: the share was never the problem.
    big = judge(pod(annotations={"gpu-fraction": "0.5"}, command=LLAMA70), L4, CONFIG, CATALOG)
    assert not big.allowed and big.code == "VRAMTooSmall"


def test_a_kai_pod_is_steered_by_its_models_need_and_its_containers_are_left_alone() -> None:
    obj = pod(annotations={"gpu-fraction": "0.5"})
    j = judge(obj, H100, CONFIG, CATALOG)
    ops, _ = mutation(obj, j, CONFIG)
    paths = {op["path"] for op in ops}
    assert "/spec/affinity" in paths
    # No GPU resource is added (KAI's reservation pod holds the device) and no CUDA env for a GPU it does not ask.
    assert not any(p.startswith("/spec/containers/0") for p in paths)
