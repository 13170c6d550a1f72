"""vLLM's ``--max-model-len`` read as vLLM's parser reads it (issue 37): human-readable integers, ``auto`` and
``-1`` (the engine picks the largest context that fits), judged through the engine registry's grammar seam."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.cluster.snapshot import snapshot_from_nodes
from webhook.config import Config
from webhook.decide.demand import DeclarationError, read_demand
from webhook.decide.mutation import A_ESTIMATE, mutate_pod
from webhook.decide.verdict import judge
from webhook.kinds import pod_view
from webhook.models.catalog import builtin_catalog

CFG = Config()
CATALOG = builtin_catalog()


def vllm_pod(max_len: str, image: str = "vllm/vllm-openai:v0.19.0", model: str = "Qwen/Qwen3-8B") -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"name": "p", "namespace": "serving"},
            "spec": {"containers": [{"name": "vllm", "image": image,
                                     "args": [f"--model={model}", f"--max-model-len={max_len}"],
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}


def l4_nodes(n: int = 1) -> list[dict[str, Any]]:
    return [{"apiVersion": "v1", "kind": "Node",
             "metadata": {"name": f"l4-{i}", "labels": {
                 "nvidia.com/gpu.product": "NVIDIA-L4",
                 "nvidia.com/gpu.memory": "23034", "nvidia.com/gpu.count": "1"}},
             "status": {"capacity": {"nvidia.com/gpu": "1"}, "allocatable": {"nvidia.com/gpu": "1"}}}
            for i in range(n)]


def context_of(max_len: str, image: str = "vllm/vllm-openai:v0.19.0") -> tuple[int, bool]:
    view = pod_view(vllm_pod(max_len, image))
    assert view is not None
    d = read_demand(view, CFG, CATALOG)
    assert d is not None and d.estimate is not None
    return d.estimate.request.context, d.auto_context


# vLLM's human_readable_int (vllm/utils/argparse_utils.py): k/m/g = ×1000^n with decimals, K/M/G = ×1024^n.
@pytest.mark.parametrize("value, tokens", [
    ("8192", 8192), ("16k", 16000), ("16K", 16384), ("25.6k", 25600), ("1m", 1_000_000), ("1M", 1_048_576),
    (" 4096 ", 4096),
])
def test_human_readable_lengths_mean_what_vllm_reads(value: str, tokens: int) -> None:
    assert context_of(value) == (tokens, False)


@pytest.mark.parametrize("value", ["auto", "AUTO", "-1"])
def test_auto_and_minus_one_let_vllm_pick(value: str) -> None:
    tokens, auto = context_of(value)
    assert auto and tokens == 16  # priced at its least: one KV block


@pytest.mark.parametrize("value, rule", [
    ("abc", "human-readable integer"), ("1.5K", "decimals with binary suffixes"), ("0", "at least 1"),
    ("-2", "at least 1"),
])
def test_what_vllm_refuses_is_a_declaration_error_quoting_its_rule(value: str, rule: str) -> None:
    view = pod_view(vllm_pod(value))
    assert view is not None
    with pytest.raises(DeclarationError) as exc:
        read_demand(view, CFG, CATALOG)
    assert exc.value.where == "arg --max-model-len" and rule in str(exc.value) and "vllm" in str(exc.value)


def test_auto_on_an_l4_is_admitted_and_the_annotation_says_the_context_vllm_picks() -> None:
    snap = snapshot_from_nodes(l4_nodes(), CFG)
    pod = vllm_pod("auto")
    j = judge(pod, snap, CFG, CATALOG)
    assert j.allowed, j.message
    assert j.demand is not None and j.demand.picked_context is not None
    tokens, where = j.demand.picked_context
    assert where == "NVIDIA-L4" and 16384 < tokens < 40960  # Qwen3-8B bf16 on 20.2 GiB usable
    assert any("below the 40960 the model supports" in w for w in j.warnings)
    patched, _ = mutate_pod(pod, j, CFG)
    assert f"context chosen by vllm: {tokens} tokens on NVIDIA-L4" in patched["metadata"]["annotations"][A_ESTIMATE]


def test_auto_does_not_admit_what_no_gpu_can_start() -> None:
    """Qwen3-14B in bf16 (27.5 GiB of weights) cannot start on an L4 whatever context vLLM would pick."""
    j = judge(vllm_pod("auto", model="Qwen/Qwen3-14B"), snapshot_from_nodes(l4_nodes(), CFG), CFG, CATALOG)
    assert not j.allowed and "27.5 GiB (14.8B × bf16)" in j.message


def test_auto_under_4096_tokens_warns() -> None:
    # At 0.73 of an L4, Qwen3-8B's weights and activations leave KV for about 2,500 tokens.
    pod = vllm_pod("auto")
    pod["spec"]["containers"][0]["args"].append("--gpu-memory-utilization=0.73")
    j = judge(pod, snapshot_from_nodes(l4_nodes(), CFG), CFG, CATALOG)
    assert j.allowed and j.demand is not None and j.demand.picked_context is not None
    assert j.demand.picked_context[0] < 4096
    assert any("under 4096 tokens, longer prompts are refused" in w for w in j.warnings)


def test_a_release_before_auto_is_admitted_with_a_warning_not_rejected() -> None:
    """The boundary (v0.14.0) is read from release notes: an older image says so and is still judged as auto."""
    j = judge(vllm_pod("auto", image="vllm/vllm-openai:v0.10.1"), snapshot_from_nodes(l4_nodes(), CFG), CFG, CATALOG)
    assert j.allowed
    assert any("predates --max-model-len auto" in w for w in j.warnings)


def kaito_preset_pod(max_len: str = "auto") -> dict[str, Any]:
    """A pod shaped as KAITO's vLLM preset pods are: its server script, vLLM's arguments, ``--max-model-len=auto``."""
    script = ("python3 /workspace/vllm/inference_api.py --model=Qwen/Qwen3-8B --served-model-name=qwen3-8b "
              f"--max-model-len={max_len} --gpu-memory-utilization=0.9 "
              "--kaito-config-file=/mnt/config/inference_config.yaml")
    return {"kind": "Pod", "metadata": {"name": "workspace-qwen3-8b-0", "namespace": "default",
                                        "labels": {"kaito.sh/workspace": "workspace-qwen3-8b"}},
            "spec": {"containers": [{"name": "workspace-qwen3-8b",
                                     "image": "mcr.microsoft.com/aks/kaito/kaito-base:0.0.8",
                                     "command": ["/bin/sh", "-c", script],
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}


def test_a_kaito_preset_pod_is_read_as_vllm_and_auto_is_admitted_on_an_l4() -> None:
    j = judge(kaito_preset_pod(), snapshot_from_nodes(l4_nodes(), CFG), CFG, CATALOG)
    assert j.allowed, j.message
    assert j.demand is not None and j.demand.engine == "vllm" and j.demand.spec is not None
    assert j.demand.spec.name == "qwen3-8b" and j.demand.picked_context is not None
    assert dict(j.demand.sources)["context"].startswith("arg --max-model-len auto: vllm picks the largest context")
    assert dict(j.demand.sources)["model"].startswith("arg --model")


def test_a_context_set_at_run_time_is_priced_at_the_default_not_refused() -> None:
    """``--max-model-len $(MAX_LEN)`` from a ConfigMap not in view: a warning, the engine's default, no rejection."""
    view = pod_view(vllm_pod("$(MAX_LEN)"))
    assert view is not None
    d = read_demand(view, CFG, CATALOG)
    assert d is not None and d.estimate is not None
    assert d.estimate.request.context == 40960  # vLLM's default: the model's full context
    assert any("is set at run time" in w for w in d.warnings)
