"""Distributed serving: shell arithmetic, LWS run-time env, DP / EP / DP attention layouts and their weights."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from webhook.cluster.snapshot import snapshot_from_nodes
from webhook.config import Config
from webhook.decide.demand import Demand, read_demand, runtime_env
from webhook.decide.verdict import judge
from webhook.engines import read_container
from webhook.engines.cmdline import UNKNOWN_VALUE, arithmetic_value, split_script
from webhook.kinds import PodView, pod_view, roles
from webhook.kube.manifests import load_nodes
from webhook.models.catalog import builtin_catalog
from webhook.models.vram import EstimateRequest, weights_per_gpu

from .helpers import container, deployment, pod

ROOT = Path(__file__).resolve().parents[2]
NODES = ROOT / "tests" / "fixtures" / "distributed" / "nodes"
CFG = Config()
CAT = builtin_catalog()
GIB = 1024**3


def demand_of(view: PodView) -> Demand:
    d = read_demand(view, CFG, CAT)
    assert d is not None and d.estimate is not None
    return d


# ---------------------------------------------------------------------------------------------------- the shell


@pytest.mark.parametrize("expr, env, want", [
    ("LWS_GROUP_SIZE * DP_SIZE_LOCAL", {"LWS_GROUP_SIZE": "2", "DP_SIZE_LOCAL": "8"}, "16"),
    ("$LWS_GROUP_SIZE*8", {"LWS_GROUP_SIZE": "4"}, "32"),
    ("${LWS_WORKER_INDEX:-0} * 8", {}, "0"),
    ("(7 + 1) / 3", {}, "2"),
    ("-7 / 2", {}, "-3"),  # the shell truncates toward zero
    ("7 % 3 + 2 ** 3", {}, "9"),
    ("2 + 3 * 4", {}, "14"),
    ("LWS_WORKER_INDEX * 8", {}, UNKNOWN_VALUE),  # set at run time: not 0, unknown
    ("1 / 0", {}, UNKNOWN_VALUE),
    ("N * 2", {"N": "abc"}, UNKNOWN_VALUE),
    ("$(date)", {}, UNKNOWN_VALUE),
])
def test_arithmetic(expr: str, env: dict[str, str], want: str) -> None:
    assert arithmetic_value(expr, env) == want


def test_arithmetic_keeps_the_flags_after_it() -> None:
    script = ("START_RANK=$(( ${LWS_WORKER_INDEX:-0} * DP_SIZE_LOCAL ))\n"
              "exec vllm serve deepseek-ai/DeepSeek-R1-0528 --data-parallel-size $(( LWS_GROUP_SIZE * DP_SIZE_LOCAL )) "
              "--data-parallel-start-rank $START_RANK --enable-expert-parallel --max-model-len 32768")
    [known] = split_script(script, {"DP_SIZE_LOCAL": "8", "LWS_GROUP_SIZE": "2"})
    assert known.words[3:5] == ("--data-parallel-size", "16") and known.words[-2:] == ("--max-model-len", "32768")
    [unknown] = split_script(script, {"DP_SIZE_LOCAL": "8"})
    assert unknown.words[4] == UNKNOWN_VALUE and unknown.words[-2:] == ("--max-model-len", "32768")


def test_lws_group_size_is_known_from_the_kind_and_from_the_pod() -> None:
    lws = PodView("LeaderWorkerSet", "ml", "x", {}, {"containers": []}, "worker", 2)
    assert runtime_env(lws) == {"LWS_GROUP_SIZE": "2", "RBG_LWP_GROUP_SIZE": "2"}
    made = pod_view(pod(container(), annotations={"leaderworkerset.sigs.k8s.io/size": "4"}))
    assert made is not None and runtime_env(made)["LWS_GROUP_SIZE"] == "4"
    plain = pod_view(pod(container()))
    assert plain is not None and runtime_env(plain) == {}


def test_the_runtime_env_reaches_kubelet_expansion_and_the_cache_keeps_them_apart() -> None:
    c = container(args=["--model", "m", "--data-parallel-size", "$(LWS_GROUP_SIZE)"])
    assert read_container(c).settings.value("dp") == "$(LWS_GROUP_SIZE)"  # type: ignore[union-attr]
    assert read_container(c, runtime_env={"LWS_GROUP_SIZE": "3"}).settings.value("dp") == "3"  # type: ignore[union-attr]


# ---------------------------------------------------------------------------------------------------- flags


@pytest.mark.parametrize("flag", ["--tp", "--tp-size", "--tensor-parallel-size", "--tensor-parallel-size=4"])
def test_sglang_spells_tensor_parallel_every_way(flag: str) -> None:
    words = ["python3", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen2.5-32B-Instruct"]
    words += [flag] if "=" in flag else [flag, "4"]
    reading = read_container({"name": "s", "image": "lmsysorg/sglang:v0.5.4", "command": words})
    assert reading.settings is not None and reading.settings.value("tp") == "4"


def test_sglang_long_forms_of_dp_ep_pp() -> None:
    words = ["python3", "-m", "sglang.launch_server", "--model-path", "m", "--data-parallel-size", "2",
             "--expert-parallel-size", "8", "--pipeline-parallel-size", "2", "--enable-dp-attention"]
    s = read_container({"name": "s", "image": "lmsysorg/sglang:v0.5.4", "command": words}).settings
    assert s is not None
    assert (s.value("dp"), s.value("ep_size"), s.value("pp"), s.flag("dp_attention")) == ("2", "8", "2", True)


# ---------------------------------------------------------------------------------------------------- pricing


def _deepseek_request(**kw: Any) -> EstimateRequest:
    spec = CAT.get("deepseek-r1")
    assert spec is not None
    return EstimateRequest(params=spec.params, precision="fp8", spec=spec, **kw)


def test_routed_experts_of_deepseek_from_its_config() -> None:
    spec = CAT.get("deepseek-r1")
    assert spec is not None
    # 58 MoE layers × 256 experts × 3 × 7168 × 2048 (config.json: first_k_dense_replace 3, moe_intermediate_size 2048).
    assert spec.routed_expert_params() == pytest.approx(58 * 256 * 3 * 7168 * 2048)
    assert spec.routed_expert_params() / spec.params == pytest.approx(0.974, abs=0.002)


def test_weights_spread_experts_over_the_ep_group_and_keep_the_rest_per_rank() -> None:
    total = 671e9  # fp8: one byte a parameter
    spec = CAT.get("deepseek-r1")
    assert spec is not None
    experts = spec.routed_expert_params()
    one_rank = weights_per_gpu(_deepseek_request(), total, spec)
    assert one_rank == pytest.approx(total)
    ep16 = weights_per_gpu(_deepseek_request(expert_split=16), total, spec)
    assert ep16 == pytest.approx(total - experts + experts / 16)
    assert 55e9 < ep16 < 60e9  # ~60 GB per GPU: what the wide-EP guides run on H200s
    tp8 = weights_per_gpu(_deepseek_request(gpus=8), total, spec)
    assert tp8 == pytest.approx(total / 8)


def test_dp_attention_splits_attention_over_fewer_gpus_than_the_rest() -> None:
    spec = CAT.get("deepseek-r1")
    assert spec is not None
    total = 671e9
    plain = weights_per_gpu(_deepseek_request(gpus=16), total, spec)
    dp_attn = weights_per_gpu(_deepseek_request(gpus=16, attention_split=1), total, spec)
    replicated = spec.attention_params() + spec.embedding_params * 2  # embeddings kept at 16 bits
    assert dp_attn == pytest.approx(plain + replicated * (1 - 1 / 16), rel=0.02)


def _lws(size: int, args: list[str], gpus: int = 8, image: str = "vllm/vllm-openai:v0.11.0",
         env: dict[str, str] | None = None) -> dict[str, Any]:
    c = container("vllm", gpus, image=image, env=env, command=["/bin/sh", "-c", " ".join(args)])
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "lws", "namespace": "ml"},
            "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": size, "workerTemplate": {"spec": {
                "containers": [c]}}}}}


def _only_role(obj: dict[str, Any]) -> PodView:
    found = roles(obj)
    assert found is not None
    return found.roles[-1].view


WIDE_EP = ["exec vllm serve deepseek-ai/DeepSeek-R1-0528 --tensor-parallel-size 1",
           "--data-parallel-size $(( LWS_GROUP_SIZE * DP_SIZE_LOCAL )) --data-parallel-size-local $DP_SIZE_LOCAL",
           "--enable-expert-parallel --max-model-len 32768"]


def test_wide_ep_deepseek_is_priced_per_rank_and_admitted_on_h200s() -> None:
    obj = _lws(2, WIDE_EP, env={"DP_SIZE_LOCAL": "8"})
    d = demand_of(_only_role(obj))
    assert d.estimate is not None
    req = d.estimate.request
    assert (req.gpus, req.expert_split, req.context) == (1, 16, 32768)
    assert 50 * GIB < d.estimate.weights_mib * 1024**2 < 60 * GIB
    assert not any("split over" in w or "one GPU" in w for w in d.warnings), d.warnings
    assert ("parallelism", "vLLM DP 16 × TP 1: routed experts expert parallel over 16 GPUs, attention replicated "
            "per DP rank") in d.sources
    snap = snapshot_from_nodes(load_nodes(NODES / "h200x8.yaml"), CFG)
    verdict = judge(obj, snap, CFG, CAT)
    assert verdict.allowed, verdict.message


def test_the_pods_lws_creates_are_priced_like_their_template() -> None:
    obj = _lws(2, WIDE_EP, env={"DP_SIZE_LOCAL": "8"})
    template = obj["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    made = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "lws-0-1", "namespace": "ml", "annotations": {"leaderworkerset.sigs.k8s.io/size": "2"},
        "labels": {"leaderworkerset.sigs.k8s.io/worker-index": "1"}}, "spec": template}
    view = pod_view(made)
    assert view is not None
    assert demand_of(view).per_gpu_mib == demand_of(_only_role(obj)).per_gpu_mib


def test_dp_without_ep_still_spreads_vllm_experts_over_dp_times_tp() -> None:
    # vllm/model_executor/layers/fused_moe/config.py: flatten_tp_across_dp whatever --enable-expert-parallel says.
    obj = _lws(2, [a.replace("--enable-expert-parallel ", "") for a in WIDE_EP], env={"DP_SIZE_LOCAL": "8"})
    d = demand_of(_only_role(obj))
    assert d.estimate is not None and d.estimate.request.expert_split == 16
    assert any("tensor parallel (no --enable-expert-parallel)" in s for _, s in d.sources)


def test_dp_of_a_dense_model_is_one_replica_per_gpu() -> None:
    args = ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--data-parallel-size", "8", "--max-model-len", "8192"]
    view = pod_view(deployment(container(gpus=8, image="vllm/vllm-openai:v0.11.0", command=args)))
    assert view is not None
    d = demand_of(view)
    assert d.estimate is not None and d.estimate.request.gpus == 1 and d.estimate.request.expert_split == 0
    assert 14 * GIB < d.estimate.weights_mib * 1024**2 < 16 * GIB  # the whole 8B model on each GPU
    assert not d.warnings, d.warnings


def test_a_data_parallel_size_computed_at_run_time_is_said_not_guessed_silently() -> None:
    args = ["exec vllm serve deepseek-ai/DeepSeek-R1-0528 --data-parallel-size $(( NODES * 8 ))",
            "--enable-expert-parallel --max-model-len 8192"]
    d = demand_of(_only_role(_lws(2, args)))
    assert d.estimate is not None and d.estimate.request.expert_split == 16
    assert any("--data-parallel-size is computed at run time; priced as 16 ranks" in w for w in d.warnings)


@pytest.mark.parametrize("args, warning", [
    (["--data-parallel-size", "16", "--data-parallel-size-local", "4"], "--data-parallel-size-local 4 × 1 GPU(s)"),
    (["--data-parallel-size", "8", "--data-parallel-size-local", "8"], "--data-parallel-size 8 × 1 GPU(s) per rank"),
])
def test_a_layout_that_does_not_match_the_gpus_is_a_warning(args: list[str], warning: str) -> None:
    command = ["exec vllm serve deepseek-ai/DeepSeek-R1-0528 --enable-expert-parallel", *args]
    d = demand_of(_only_role(_lws(2, command)))
    assert any(warning in w for w in d.warnings), d.warnings


def test_expert_parallel_on_a_dense_model_is_a_warning() -> None:
    args = ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--data-parallel-size", "2",
            "--enable-expert-parallel"]
    view = pod_view(deployment(container(gpus=2, image="vllm/vllm-openai:v0.11.0", command=args)))
    assert view is not None
    assert any("without experts" in w for w in demand_of(view).warnings)


def test_sglang_dp_attention_over_two_nodes() -> None:
    cmd = ["python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 16 --dp 16",
           "--enable-dp-attention --nnodes $(LWS_GROUP_SIZE) --context-length 32768"]
    d = demand_of(_only_role(_lws(2, cmd, image="lmsysorg/sglang:v0.5.4")))
    assert d.estimate is not None
    req = d.estimate.request
    assert (req.gpus, req.attention_split) == (16, 1)
    assert d.group_size == 2


def test_decode_context_parallel_shares_the_kv_of_a_sequence() -> None:
    base = ["vllm", "serve", "deepseek-ai/DeepSeek-R1-0528", "--tensor-parallel-size", "8", "--max-model-len",
            "131072", "--data-parallel-size", "1"]
    plain = pod_view(deployment(container(gpus=8, image="vllm/vllm-openai:v0.11.0", command=base)))
    dcp = pod_view(deployment(container(gpus=8, image="vllm/vllm-openai:v0.11.0",
                                        command=[*base, "--decode-context-parallel-size", "8"])))
    assert plain is not None and dcp is not None
    kv_plain, kv_dcp = demand_of(plain).estimate.kv_cache_mib, demand_of(dcp).estimate.kv_cache_mib  # type: ignore[union-attr]
    assert kv_dcp == pytest.approx(kv_plain / 8, rel=0.01)


def test_llm_inference_service_parallelism_becomes_vllm_flags() -> None:
    obj = {"apiVersion": "serving.kserve.io/v1alpha1", "kind": "LLMInferenceService",
           "metadata": {"name": "r1", "namespace": "ml"},
           "spec": {"model": {"uri": "hf://deepseek-ai/DeepSeek-R1-0528"}, "parallelism": {
               "data": 16, "dataLocal": 8, "expert": True, "tensor": 1},
               "template": {"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]},
               "worker": {"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}}
    found = roles(obj)
    assert found is not None and [r.view.group_size for r in found.roles] == [2, 2]
    args = found.roles[0].view.spec["containers"][0]["args"]
    assert args[:9] == ["vllm", "serve", "deepseek-ai/DeepSeek-R1-0528", "--tensor-parallel-size", "1",
                        "--data-parallel-size", "16", "--data-parallel-size-local", "8"]
    assert "--enable-expert-parallel" in args
    d = demand_of(found.roles[0].view)
    assert d.estimate is not None and d.estimate.request.expert_split == 16


def test_nimservice_multinode_is_an_lws_of_pipeline_pods_with_tensor_gpus() -> None:
    # NVIDIA/k8s-nim-operator: GetLWSSize() = parallelism.pipeline; each pod gets `tensor` GPUs and the
    # operator sets NIM_TENSOR_PARALLEL_SIZE / NIM_PIPELINE_PARALLEL_SIZE (getLWSCommonEnv).
    obj = {"apiVersion": "apps.nvidia.com/v1alpha1", "kind": "NIMService",
           "metadata": {"name": "r1", "namespace": "ml"},
           "spec": {"image": {"repository": "nvcr.io/nim/deepseek-ai/deepseek-r1", "tag": "1.7.3"},
                    "authSecret": "ngc", "replicas": 1,
                    "multiNode": {"backendType": "lws", "parallelism": {"pipeline": 2, "tensor": 8}}}}
    found = roles(obj)
    assert found is not None
    [role] = found.roles
    assert role.view.group_size == 2 and role.replicas == 2
    [c] = role.view.spec["containers"]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "8"
    d = demand_of(role.view)
    assert d.estimate is not None and (d.estimate.request.gpus, d.estimate.request.pipeline) == (16, 2)
    snap = snapshot_from_nodes(load_nodes(NODES / "h100x8.yaml"), CFG)
    verdict = judge(obj, snap, CFG, CAT)
    assert verdict.allowed, verdict.message


def test_a_quoted_json_value_over_several_lines_is_one_word() -> None:
    script = ("exec vllm serve m --kv_transfer_config '{\"kv_connector\":\"NixlConnector\",\n"
              "      \"kv_role\":\"kv_both\"}' --enable-eplb --eplb-config '{\"window_size\":\"1000\",\n"
              "      \"num_redundant_experts\":\"32\"}' --max-model-len 8192\necho \"done\"")
    first, second = split_script(script, {})
    eplb = '{"window_size":"1000",       "num_redundant_experts":"32"}'
    assert first.words[-5:] == ("--enable-eplb", "--eplb-config", eplb, "--max-model-len", "8192")
    assert second.words == ("echo", "done")


def test_eplb_redundant_experts_add_expert_slots_per_rank() -> None:
    eplb = [*WIDE_EP, "--enable-eplb", "--eplb-config", "'{\"num_redundant_experts\": \"32\"}'"]
    plain, spare = (demand_of(_only_role(_lws(2, a, env={"DP_SIZE_LOCAL": "8"}))) for a in (WIDE_EP, eplb))
    assert spare.estimate is not None and spare.estimate.request.redundant_experts == 32
    extra = (spare.estimate.weights_mib - plain.estimate.weights_mib) / 1024  # type: ignore[union-attr]
    # 2 more experts per rank (288 / 16 vs 256 / 16), ~2.4 GiB each over 58 MoE layers ("2GB per redundant expert").
    assert 4.0 < extra < 5.5


def test_a_rejection_names_the_nodes_a_spanning_layout_would_take() -> None:
    args = ["vllm", "serve", "deepseek-ai/DeepSeek-R1", "--tensor-parallel-size", "8", "--max-model-len", "32768"]
    obj = deployment(container(gpus=8, image="vllm/vllm-openai:v0.11.0", command=args))
    snap = snapshot_from_nodes(load_nodes(NODES / "a100-80x8.yaml"), CFG)
    verdict = judge(obj, snap, CFG, CAT)
    assert not verdict.allowed
    assert ("span 2 nodes of 8 × NVIDIA-A100-SXM4-80GB (DP 16 × EP: a LeaderWorkerSet of size 2, "
            "--data-parallel-size 16 --data-parallel-size-local 8 --enable-expert-parallel)") in verdict.message
