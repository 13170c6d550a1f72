"""Autofit as pure functions: every eligible fix kind, every refusal, and when it runs at all."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonpatch
import orjson
import pytest
import yaml

from webhook.advise.autofit import (
    A_APPLIED,
    A_AUTOFIT,
    Outcome,
    already_applied,
    autofit,
    engine_flags_changed,
    fp8_kv_capable,
    ineligible,
    wanted,
)
from webhook.advise.explain import as_dict, explain, render
from webhook.advise.fixes import rejudger
from webhook.cli.main import main
from webhook.cluster.snapshot import snapshot_from_nodes
from webhook.config import Admission, Autofit, Config
from webhook.decide.placement import Change
from webhook.decide.verdict import judge
from webhook.models.catalog import builtin_catalog

from .helpers import container, deployment, gpu_node

CAT = builtin_catalog()
CFG = Config()
VLLM = "vllm/vllm-openai:v0.10.1"
L4 = gpu_node("l4", gpus=1, mem=23034, product="NVIDIA-L4")
L4X2 = gpu_node("l4x2", gpus=2, mem=23034, product="NVIDIA-L4")
H100 = gpu_node("h100", gpus=1, mem=81559, product="NVIDIA-H100-80GB-HBM3")
A100 = gpu_node("a100", gpus=1, mem=81920, product="NVIDIA-A100-SXM4-80GB")
A100_40 = gpu_node("a100-40", gpus=1, mem=40960, product="NVIDIA-A100-SXM4-40GB")


def vllm(*args: str, gpus: int = 1, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return deployment(container(gpus=gpus, image=VLLM, args=list(args)), annotations=annotations)


def fitted(obj: dict[str, Any], *nodes: dict[str, Any], config: Config = CFG) -> tuple[Outcome | None, Any]:
    snap = snapshot_from_nodes(list(nodes), config)
    judgement = judge(obj, snap, config, CAT)
    return autofit(obj, judgement, snap, config, rejudger(snap, config, CAT, None)), snap


def applied(obj: dict[str, Any], *nodes: dict[str, Any], config: Config = CFG) -> tuple[Outcome, dict[str, Any]]:
    """The outcome must be an applied fix whose result is admitted on the same nodes, as written."""
    out, snap = fitted(obj, *nodes, config=config)
    assert out is not None and out.applied, out
    result = jsonpatch.apply_patch(obj, out.patch)
    assert judge(result, snap, config, CAT).allowed
    trail = orjson.loads(result["metadata"]["annotations"][A_APPLIED])
    assert trail["change"] == out.reason and trail["patch"] == out.fix.patch  # type: ignore[union-attr]
    assert trail["reason"].startswith("deployment/d: needs")
    return out, result


def args_of(obj: dict[str, Any]) -> list[str]:
    return list(obj["spec"]["template"]["spec"]["containers"][0]["args"])


def test_a_too_long_context_is_shortened() -> None:
    out, result = applied(vllm("--model", "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "131072"), L4)
    assert out.fix is not None and out.fix.changes == (Change("context", 37888),)
    assert args_of(result)[-2:] == ["--max-model-len", "37888"]


def test_fp8_kv_cache_where_every_gpu_converts_fp8() -> None:
    obj = vllm("--model", "Qwen/Qwen2.5-32B-Instruct", "--max-model-len", "65536", "--gpu-memory-utilization", "0.95")
    out, result = applied(obj, H100)
    assert out.fix is not None and out.fix.changes == (Change("kv_dtype", "fp8"),)
    assert "--kv-cache-dtype" in args_of(result)
    # With an Ampere node in the cluster the KV cache stays as it is: the context is shortened instead.
    out, result = applied(obj, H100, A100_40)
    assert out.fix is not None and out.fix.changes[0].what == "context"
    assert "--kv-cache-dtype" not in args_of(result)


def test_tensor_parallel_over_gpus_the_pod_already_requests() -> None:
    out, result = applied(vllm("--model", "Qwen/Qwen3-14B", "--max-model-len", "8192", gpus=2), L4X2)
    assert out.fix is not None and out.fix.changes == (Change("gpus", 2),)
    assert args_of(result)[-2:] == ["--tensor-parallel-size", "2"]
    limits = result["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == 2


def test_utilization_raised_up_to_the_ceiling() -> None:
    obj = vllm("--model", "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "8192",
               "--gpu-memory-utilization", "0.6")
    out, result = applied(obj, L4)
    # Priced on the L4 with vLLM's defaults for a GPU under 70 GiB (256 sequences, 2048 batched tokens).
    assert out.fix is not None and out.fix.changes == (Change("utilization", "0.74"),)
    assert args_of(result)[-1] == "0.74"
    # Under a ceiling below what it needs, no eligible fix is left (only a lower precision would fit).
    low = Config(admission=Admission(autofit=Autofit(max_gpu_memory_utilization=0.7)))
    out, _ = fitted(obj, L4, config=low)
    assert out is not None and not out.applied and "precision change" in out.reason


def test_fewer_sequences_in_the_start_up_profile() -> None:
    # The dummy sampler's rows (2048 × vocab × 38 B at the sort) are what does not fit.
    obj = vllm("--model", "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "20480", "--max-num-seqs", "2048")
    out, result = applied(obj, L4)
    assert out.fix is not None and out.fix.changes == (Change("max_seqs", 64),)
    args = args_of(result)
    assert args[args.index("--max-num-seqs") + 1] == "64"


def test_a_declared_batch_is_eligible_like_the_sequences() -> None:
    assert ineligible(Change("batch", 2), judge(vllm("--model", "qwen3-8b"), snapshot_from_nodes([L4], CFG), CFG,
                                                CAT), []) is None


@pytest.mark.parametrize("obj, nodes, why", [
    # Only a lower precision would fit: another checkpoint or quantization changes the weights.
    (vllm("--model", "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "8192", "--max-num-batched-tokens",
          "65536", "--max-num-seqs", "1024"), [L4], "a precision change alters the model or its weights"),
    # Two GPUs would fit; the pod asks for one.
    (vllm("--model", "Qwen/Qwen3-14B", "--max-model-len", "8192"), [L4X2], "2 GPUs is more than the 1 the pod"),
    # Nothing fits at all.
    (vllm("--model", "meta-llama/Llama-3.1-70B-Instruct"), [A100], "no fix makes it fit"),
])
def test_refused_when_only_the_model_or_more_gpus_would_fit(obj: dict[str, Any], nodes: list[dict[str, Any]],
                                                            why: str) -> None:
    out, _ = fitted(obj, *nodes)
    assert out is not None and not out.applied and out.patch == [] and out.result == "refused"
    assert why in out.reason


def test_fp8_kv_refused_on_gpus_without_fp8() -> None:
    snap = snapshot_from_nodes([A100, H100], CFG)
    j = judge(vllm("--model", "qwen3-8b"), snap, CFG, CAT)
    nodes = list(snap.by_vram)
    assert "compute capability 8.9" in (ineligible(Change("kv_dtype", "fp8"), j, nodes) or "")
    assert ineligible(Change("kv_dtype", "fp8"), j, [n for n in nodes if n.name == "h100"]) is None
    assert ineligible(Change("finetune", "qlora"), j, nodes) == "a finetune change alters the model or its weights"


def test_fp8_capability_from_gfd_labels_or_the_product() -> None:
    snap = snapshot_from_nodes([
        gpu_node("cc90", product="Some-New-GPU", labels={"nvidia.com/gpu.compute.major": "9",
                                                          "nvidia.com/gpu.compute.minor": "0"}),
        gpu_node("cc86", product="NVIDIA-L40S", labels={"nvidia.com/gpu.compute.major": "8",
                                                         "nvidia.com/gpu.compute.minor": "6"}),
        gpu_node("l40s", product="NVIDIA-L40S"), gpu_node("t4", product="Tesla-T4"),
        gpu_node("rtx4090", product="NVIDIA-GeForce-RTX-4090"), gpu_node("a10g", product="NVIDIA-A10G"),
    ], CFG)
    capable = {n.name: fp8_kv_capable(n) for n in snap.by_vram}
    # The labels win over the name (cc86 is named like an L40S).
    assert capable == {"cc90": True, "cc86": False, "l40s": True, "t4": False, "rtx4090": True, "a10g": False}


def test_a_fitting_workload_is_never_changed() -> None:
    out, _ = fitted(vllm("--model", "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "8192"), L4)
    assert out is None


def test_a_rejection_not_about_vram_gets_no_fix() -> None:
    obj = vllm("--model", "meta-llama/Llama-3.1-8B-Instruct", annotations={"vramgate.io/context-length": "lots"})
    out, _ = fitted(obj, L4)
    assert out is not None and not out.applied and "not for VRAM" in out.reason


def test_opt_in_by_annotation_on_the_object_or_its_template_or_by_namespace() -> None:
    plain = vllm("--model", "qwen3-8b")
    assert not wanted(plain, None) and not wanted(plain, "enforce")
    assert wanted(plain, "autofit")
    on_template = vllm("--model", "qwen3-8b", annotations={A_AUTOFIT: "true"})
    assert wanted(on_template, None)
    on_object = vllm("--model", "qwen3-8b")
    on_object["metadata"]["annotations"] = {A_AUTOFIT: "True"}
    assert wanted(on_object, None)
    off = vllm("--model", "qwen3-8b", annotations={A_AUTOFIT: "false"})
    assert not wanted(off, None)


def test_the_trail_marks_an_object_as_already_fitted() -> None:
    _, result = applied(vllm("--model", "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "131072"), L4)
    assert already_applied(result)
    assert not already_applied(vllm("--model", "qwen3-8b"))


def test_engine_flags_changed_only_when_command_args_or_env_change() -> None:
    old = vllm("--model", "qwen3-8b", "--max-model-len", "8192")
    same = vllm("--model", "qwen3-8b", "--max-model-len", "8192")
    same["spec"]["replicas"] = 3
    same["metadata"]["labels"] = {"team": "a"}
    assert not engine_flags_changed(same, old)
    assert engine_flags_changed(vllm("--model", "qwen3-8b", "--max-model-len", "16384"), old)
    env = vllm("--model", "qwen3-8b", "--max-model-len", "8192")
    env["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "VLLM_USE_V1", "value": "1"}]
    assert engine_flags_changed(env, old)
    assert engine_flags_changed(old, None)


def _files(tmp_path: Path, args: list[str]) -> tuple[Path, Path]:
    manifest = tmp_path / "chat.yaml"
    manifest.write_text(yaml.safe_dump(vllm(*args, annotations={A_AUTOFIT: "true"}), sort_keys=False))
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(yaml.safe_dump(L4))
    return manifest, nodes


def test_check_autofit_prints_the_diff_and_changes_no_file(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    manifest, nodes = _files(tmp_path, ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "131072"])
    before = manifest.read_text()
    assert main(["check", "-f", str(manifest), "--nodes", str(nodes), "--autofit"]) == 0
    out, err = capsys.readouterr()
    assert "-        - '131072'\n+        - '37888'\n" in out and "+    vramgate.io/autofit-applied:" in out
    assert "deployment/d: autofit: --max-model-len 37888" in err
    assert manifest.read_text() == before


def test_check_autofit_exits_1_when_no_fix_is_eligible(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest, nodes = _files(tmp_path, ["--model", "Qwen/Qwen3-14B", "--max-model-len", "8192"])
    assert main(["check", "-f", str(manifest), "--nodes", str(nodes), "--autofit"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and "deployment/d: autofit refused: no eligible fix" in err
    assert main(["check", "-f", str(manifest), "--nodes", str(nodes), "--autofit", "--fix"]) == 2


def test_explain_shows_what_autofit_changed() -> None:
    _, result = applied(vllm("--model", "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "131072"), L4)
    snap = snapshot_from_nodes([L4], CFG)
    e = explain(result, snap, CFG, CAT)
    text = render(e)
    assert "  autofit: applied --max-model-len 37888" in text
    assert "    instead of rejecting: deployment/d: needs" in text
    assert as_dict(e)["autofit"]["change"].startswith("--max-model-len 37888")
    assert as_dict(explain(vllm("--model", "qwen3-8b"), snap, CFG, CAT))["autofit"] is None


def test_a_straddle_warning_states_the_measured_chance_of_starting() -> None:
    from webhook.engines import estimate
    from webhook.engines.measured import chance_to_fit

    obj = vllm("--model", "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "38912")
    snap = snapshot_from_nodes([L4], CFG)
    j = judge(obj, snap, CFG, CAT)
    assert j.allowed
    (warning,) = [w for w in j.warnings if "may not fit" in w]
    est = j.demand.estimate  # type: ignore[union-attr]
    assert est is not None
    # Priced on the GPU it straddles (vLLM's batch defaults depend on it), as admission does.
    on_l4 = estimate(est.request.but(gpu_mib=23034.0, gpu_product="NVIDIA-L4"))
    chance, logs = chance_to_fit("vllm", on_l4.per_gpu_mib, est.kv_cache_mib, 23034 * 0.9) or (-1.0, 0)
    assert 0 < chance < 0.5 and logs >= 40
    assert warning.endswith(f"; measured chance it starts: {chance:.0%} (vramgate's error on {logs} published vllm "
                            "start-up logs, docs/accuracy.md)")
    # Autofit leaves an admitted straddle alone.
    assert autofit(obj, j, snap, CFG, rejudger(snap, CFG, CAT, None)) is None
