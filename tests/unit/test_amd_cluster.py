"""AMD pods in a cluster (issue 38): what admission writes into them (the amd.com/gpu toleration, no CUDA env, a
VRAM affinity an AMD node can satisfy), the fixes it words (amd.com/gpu, not nvidia.com/gpu), the GPUs AMD pods
hold subtracted from their nodes, and the AMD GPU operator's fault taint and the controller's memory label."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from webhook.cluster.inventory import node_gpus
from webhook.cluster.snapshot import snapshot_from_nodes
from webhook.cluster.usage import used_per_node
from webhook.config import Config
from webhook.controller.health import HealthTracker
from webhook.decide.mutation import mutate_pod
from webhook.decide.selectors import selects
from webhook.decide.verdict import judge
from webhook.kube.nodecache import InventoryState
from webhook.models.catalog import builtin_catalog

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "amd"
CFG = Config()
ROCM_VLLM = "rocm/vllm:rocm6.3.1_vllm_0.8.5_20250521"


def _nodes(name: str) -> list[dict[str, Any]]:
    return yaml.safe_load((FIX / name).read_text())["items"]


def _mi210(name: str = "mi210-0", gpus: int = 8) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"amd.com/gpu.product-name": "AMD_Instinct_MI210",
                                                  "amd.com/gpu.vram": "64G"}},
            "status": {"capacity": {"amd.com/gpu": str(gpus)}, "allocatable": {"amd.com/gpu": str(gpus)}}}


def _pod(args: list[str], gpus: int = 1, env: list[dict[str, str]] | None = None,
         resource: str = "amd.com/gpu", node: str | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "vllm", "image": ROCM_VLLM, "args": args,
                         "resources": {"limits": {resource: gpus}}}
    if env is not None:
        c["env"] = env
    spec: dict[str, Any] = {"containers": [c]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "serving", "uid": "u1"},
            "spec": spec, "status": {"phase": "Running"}}


LLAMA_70B = ["--model", "meta-llama/Llama-3.1-70B-Instruct", "--max-model-len", "8192"]


def _admitted(pod: dict[str, Any], nodes: list[dict[str, Any]]) -> dict[str, Any]:
    snap = snapshot_from_nodes(nodes, CFG)
    j = judge(pod, snap, CFG, builtin_catalog())
    assert j.allowed, j.message
    out, _ = mutate_pod(pod, j, CFG)
    return out


def _terms(pod: dict[str, Any]) -> list[dict[str, Any]]:
    affinity = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    terms: list[dict[str, Any]] = affinity["nodeSelectorTerms"]
    return terms


def test_amd_pod_tolerates_amd_gpu_and_gets_no_cuda_env() -> None:
    hip = [{"name": "HIP_VISIBLE_DEVICES", "value": "3"}]
    out = _admitted(_pod(LLAMA_70B, env=hip), _nodes("nodes-amd.yaml"))
    keys = {t["key"]: t for t in out["spec"]["tolerations"]}
    assert keys["amd.com/gpu"] == {"key": "amd.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    assert "nvidia.com/gpu" not in keys
    # vLLM on ROCm raises when CUDA_VISIBLE_DEVICES and HIP_VISIBLE_DEVICES differ: nothing CUDA is added.
    assert out["spec"]["containers"][0]["env"] == hip
    # The host-memory floor still applies (it is not NVIDIA's).
    assert "memory" in out["spec"]["containers"][0]["resources"]["limits"]


def test_nvidia_pod_still_gets_cuda_env_and_its_toleration() -> None:
    h100 = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "h100-0", "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                                                      "nvidia.com/gpu.memory": "81559"}},
            "status": {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "8"}}}
    pod = _pod(["--model", "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "8192"],
               resource="nvidia.com/gpu")
    pod["spec"]["containers"][0]["image"] = "vllm/vllm-openai:v0.8.5"
    out = _admitted(pod, [h100])
    assert {t["key"] for t in out["spec"]["tolerations"]} >= {"nvidia.com/gpu"}
    env = {e["name"]: e["value"] for e in out["spec"]["containers"][0]["env"]}
    assert env == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "0"}


def test_amd_affinity_matches_the_amd_nodes_that_hold_it_and_no_other() -> None:
    nodes = [*_nodes("nodes-amd.yaml"), *_nodes("nodes-cpx.yaml"), _mi210()]
    out = _admitted(_pod(LLAMA_70B), nodes)
    terms = _terms(out)
    assert not any(e["key"].startswith("nvidia.com/") or "karpenter" in e["key"] or "gke" in e["key"]
                   for t in terms for e in t["matchExpressions"])

    def placed(node: dict[str, Any]) -> bool:
        return selects(out["spec"], node_gpus(node, CFG))  # the required affinity, as kube-scheduler reads it

    # The labeller's labels alone (no controller yet): MI300X (amd.com/gpu.vram 192G) and MI325X (only the beta
    # labels, 256G) hold ~141 GiB of weights; the MI210 (64G) does not, nor the CPX node (24 GB partitions).
    got = {n["metadata"]["name"]: placed(n) for n in nodes}
    assert got == {"mi300x-0": True, "mi325x-0": True, "mi300x-cpx-0": False, "mi210-0": False}
    # Once the controller has copied each node's memory as an integer, that label decides.
    tracker = HealthTracker(CFG)
    views = [node_gpus(n, CFG) for n in nodes]
    labels = tracker.observe(views, now=0.0).nodes
    assert labels["mi300x-0"].labels["vramgate.io/gpu-memory-mib"] == str(192 * 1024)
    assert labels["mi300x-cpx-0"].labels["vramgate.io/gpu-memory-mib"] == str(24 * 1024)
    for n in nodes:
        n["metadata"]["labels"].update(labels[n["metadata"]["name"]].labels)
    assert {n["metadata"]["name"]: placed(n) for n in nodes} == got
    # Mutating the mutated pod again changes nothing (reinvocation).
    j = judge(out, snapshot_from_nodes(nodes, CFG), CFG, builtin_catalog())
    again, _ = mutate_pod(copy.deepcopy(out), j, CFG)
    assert again == out


def test_fixes_name_the_amd_resource() -> None:
    # 70B in bf16 on 64 GB MI210s: two GPUs with tensor parallel hold it.
    pod = _pod(LLAMA_70B)
    j = judge(pod, snapshot_from_nodes([_mi210()], CFG), CFG, builtin_catalog())
    assert not j.allowed
    assert "AMD_Instinct_MI210" in j.message and "64 GiB" in j.message
    assert "amd.com/gpu: " in j.message and "nvidia.com/gpu" not in j.message, j.message


def test_busy_amd_gpus_are_subtracted() -> None:
    state = InventoryState(CFG)
    nodes = _nodes("nodes-amd.yaml")
    for i, n in enumerate(nodes):
        n["metadata"]["resourceVersion"] = str(10 + i)
    state.relist("Node", nodes, "20")
    busy = _pod(LLAMA_70B, gpus=3, node="mi300x-0")
    busy["metadata"]["resourceVersion"] = "21"
    state.relist("Pod", [busy], "22")
    state.relist("Namespace", [], "23")
    snap = state.snapshot()
    assert snap.free["mi300x-0"] == 5 and snap.free["mi325x-0"] == 8
    assert used_per_node([busy]) == {"mi300x-0": 3}


def test_amd_operator_remediation_taint_is_a_fault() -> None:
    node = _nodes("nodes-amd.yaml")[0]
    node["spec"] = {"taints": [{"key": "amd-gpu-unhealthy", "effect": "NoSchedule"}]}
    n = node_gpus(node, CFG)
    assert n.health == "unhealthy" and "amd-gpu-unhealthy" in n.health_reason


def test_unknown_amd_memory_names_the_labeller() -> None:
    bare = _mi210("amd-0")
    bare["metadata"]["labels"] = {}  # the device plugin alone: amd.com/gpu, no labeller
    j = judge(_pod(LLAMA_70B), snapshot_from_nodes([bare], CFG), CFG, builtin_catalog())
    said = " ".join(j.warnings)
    assert j.allowed and "not checked" in said
    assert "amd.com/gpu.vram" in said and "GPU Feature Discovery" not in said, said


def test_rocm_image_tags_name_vllms_release() -> None:
    from webhook.engines.vllm import rocm_version

    assert rocm_version("rocm/vllm:rocm6.3.1_vllm_0.8.5_20250521") == (0, 8, 5)
    assert rocm_version("rocm/vllm:rocm6.2_mi300_ubuntu20.04_py3.9_vllm_0.6.4") == (0, 6, 4)
    assert rocm_version("rocm/vllm:rocm7.14.0_cdna_ubuntu24.04_py3.14_pytorch_2.11.0_vllm_0.23.0") == (0, 23, 0)
    assert rocm_version("rocm/vllm-dev:nightly") is None and rocm_version("vllm/vllm-openai:v0.8.5") is None
    # Through a pod: the estimate is vLLM 0.8.5's, not the newest release's.
    j = judge(_pod(LLAMA_70B), snapshot_from_nodes(_nodes("nodes-amd.yaml"), CFG), CFG, builtin_catalog())
    assert j.demand is not None and j.demand.estimate is not None
    assert "vllm 0.8.5" in j.demand.summary(), j.demand.summary()


def test_hip_visible_devices_naming_more_gpus_than_asked_is_warned() -> None:
    pod = _pod(LLAMA_70B, env=[{"name": "HIP_VISIBLE_DEVICES", "value": "0,1,2,3"}])
    j = judge(pod, snapshot_from_nodes(_nodes("nodes-amd.yaml"), CFG), CFG, builtin_catalog())
    assert j.allowed
    assert any("HIP_VISIBLE_DEVICES lists 4 devices but the container requests 1 amd.com/gpu" in w
               for w in j.warnings), j.warnings


def test_fp8_on_gpus_without_fp8_compute_is_warned_never_rejected() -> None:
    fp8 = ["--model", "Qwen/Qwen3-32B-FP8", "--max-model-len", "8192"]
    on_mi210 = judge(_pod(fp8), snapshot_from_nodes([_mi210()], CFG), CFG, builtin_catalog())
    assert on_mi210.allowed
    assert any("AMD_Instinct_MI210, which has no FP8 compute" in w for w in on_mi210.warnings), on_mi210.warnings
    # MI300X has FP8 (e4m3fnuz, one byte as e4m3fn): no warning, and the same weights as on any FP8 GPU.
    on_mi300 = judge(_pod(fp8), snapshot_from_nodes(_nodes("nodes-amd.yaml"), CFG), CFG, builtin_catalog())
    assert on_mi300.allowed and not any("FP8 compute" in w for w in on_mi300.warnings), on_mi300.warnings
    assert on_mi300.demand is not None and on_mi210.demand is not None
    assert on_mi300.demand.weights_mib == on_mi210.demand.weights_mib
    # bf16 on the MI210: nothing to say.
    tp4 = _pod([*LLAMA_70B, "--tensor-parallel-size", "4"], gpus=4)
    bf16 = judge(tp4, snapshot_from_nodes([_mi210()], CFG), CFG, builtin_catalog())
    assert bf16.allowed and not any("FP8 compute" in w for w in bf16.warnings)


def test_explain_counts_the_amd_taint_as_tolerated_for_a_template() -> None:
    from webhook.advise.explain import node_outcome
    from webhook.kinds import pod_view

    node = _nodes("nodes-amd.yaml")[0]
    node["spec"] = {"taints": [{"key": "amd.com/gpu", "value": "present", "effect": "NoSchedule"}]}
    deploy = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "serving"},
              "spec": {"template": {"spec": _pod(LLAMA_70B)["spec"]}}}
    view = pod_view(deploy, "serving")
    assert view is not None
    from webhook.decide.demand import read_demand

    demand = read_demand(view, CFG, builtin_catalog())
    assert demand is not None
    out = node_outcome(demand, node_gpus(node, CFG), 8, CFG.labels.gpu_resource)
    assert "not tolerated" not in out.reason, out  # the mutation adds the amd.com/gpu toleration to its pods


def test_amd_labels_without_amd_gpu_capacity_name_the_amd_resource() -> None:
    node = _nodes("nodes-amd.yaml")[0]
    node["status"] = {"capacity": {"cpu": "192"}, "allocatable": {"cpu": "190"}}  # the device plugin is not running
    n = node_gpus(node, CFG)
    assert n.plugin_missing and n.health == "unhealthy"
    assert "no amd.com/gpu capacity" in n.health_reason and "nvidia" not in n.health_reason


def test_remediation_evicts_amd_pods_from_a_failed_amd_node() -> None:
    from webhook.controller.remediation import select_evictions

    pod = _pod(LLAMA_70B, node="mi300x-0")
    got = select_evictions([pod], {"mi300x-0"}, CFG)
    assert [(c.name, c.node) for c in got] == [("p", "mi300x-0")]
    # A device the kubelet reports Unhealthy (KEP-4680) under amd.com/gpu.
    pod["status"]["containerStatuses"] = [{"name": "vllm", "allocatedResourcesStatus": [
        {"name": "amd.com/gpu", "resources": [{"resourceID": "gpu-3", "health": "Unhealthy"}]}]}]
    got = select_evictions([pod], set(), CFG)
    assert len(got) == 1 and "amd.com/gpu gpu-3 reported Unhealthy" in got[0].reason


def _as_amd(obj: Any) -> Any:
    """The object with every nvidia.com/gpu amount asked as amd.com/gpu instead."""
    if isinstance(obj, dict):
        return {("amd.com/gpu" if k == "nvidia.com/gpu" else k): _as_amd(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_as_amd(v) for v in obj]
    return obj


def test_multi_pod_kinds_count_amd_gpus() -> None:
    from webhook.kinds import Context, roles

    kinds = Path(__file__).resolve().parents[1] / "fixtures" / "kinds"
    lws = _as_amd(yaml.safe_load((kinds / "lws-vllm.yaml").read_text()))
    assert "nvidia.com/gpu" not in str(lws)
    ctx = Context("ml", None, CFG.labels.gpu_resource, ("amd.com/gpu",))
    found = roles(lws, ctx)
    assert found is not None
    worker = next(r for r in found.roles if r.name == "worker")
    # The worker names no model: it borrows the leader's serving command, as with nvidia.com/gpu.
    text = " ".join(str(w) for c in worker.view.containers()
                    for w in [*(c.get("command") or []), *(c.get("args") or [])])
    assert "--tensor-parallel-size" in text, text
    ray = _as_amd(yaml.safe_load((kinds / "rayservice-llm.yaml").read_text()))
    found = roles(ray, ctx)
    nvidia = roles(yaml.safe_load((kinds / "rayservice-llm.yaml").read_text()), Context("ml"))
    assert found is not None and nvidia is not None
    # The same roles and groups as the NVIDIA original, and no "no group requests" warning.
    assert [(r.name, r.group_size) for r in found.roles] == [(r.name, r.group_size) for r in nvidia.roles]
    assert found.warnings == nvidia.warnings
    # Through admission: judged as AMD pods on AMD nodes.
    j = judge(lws, snapshot_from_nodes(_nodes("nodes-amd.yaml"), CFG), CFG, builtin_catalog(), namespace="ml")
    assert j.demand is not None and j.demand.vendor == "amd", j


def test_mxfp4_on_mi355x_is_priced_over_every_layout() -> None:
    # vLLM supports MX formats on gfx95x (MI350/MI355X: vllm/platforms/rocm.py supports_mx); which MoE backend and
    # padding it runs there has no published log, so the estimate's band spans every layout vramgate knows.
    from webhook.engines import mxfp4

    expected, possible = mxfp4.layouts("AMD_Instinct_MI355X", (0, 11, 1))
    assert possible == mxfp4.ALL and expected == mxfp4.MARLIN
