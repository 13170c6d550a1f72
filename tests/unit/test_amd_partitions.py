"""AMD partitions under the device plugin's mixed naming (issue 38): ``amd.com/cpx_nps4`` is judged on the nodes that
advertise that mode, at one GPU's memory over its compute partitions, as MIG slices are."""

from __future__ import annotations

from typing import Any

from webhook.cluster.inventory import node_gpus
from webhook.cluster.snapshot import snapshot_from_nodes
from webhook.config import Config
from webhook.decide.mutation import mutate_pod
from webhook.decide.verdict import judge
from webhook.models.catalog import builtin_catalog

CFG = Config()
ROCM_VLLM = "rocm/vllm:rocm6.3.1_vllm_0.8.5_20250521"


def _node(name: str, capacity: dict[str, str], product: str = "AMD_Instinct_MI300X") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"amd.com/gpu.product-name": product}},
            "status": {"capacity": dict(capacity), "allocatable": dict(capacity),
                       "conditions": [{"type": "Ready", "status": "True"}]}}


# One MI300X node split into CPX/NPS4 (8 partitions a GPU, 24 GB each), one left whole (SPX/NPS1, 192 GB each).
NODES = [_node("mi300x-cpx", {"amd.com/cpx_nps4": "64"}), _node("mi300x-spx", {"amd.com/spx_nps1": "8"})]


def _pod(model: str, resource: str, n: int = 1) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "s", "uid": "u"},
            "spec": {"containers": [{"name": "vllm", "image": ROCM_VLLM,
                                     "command": ["vllm", "serve", model, "--max-model-len", "8192"],
                                     "resources": {"limits": {resource: n}}}]}}


def test_a_mixed_naming_node_offers_its_partitions_at_their_share_of_the_gpu() -> None:
    cpx = node_gpus(NODES[0], CFG)
    assert cpx.vendor == "amd" and cpx.health == "healthy", cpx.health_reason
    (part,) = cpx.mig_profiles
    assert (part.name, part.memory_mib, part.capacity) == ("cpx_nps4", 24 * 1024, 64)
    bad = dict(NODES[0], status={"capacity": {"amd.com/cpx_nps4": "64"}, "allocatable": {"amd.com/cpx_nps4": "60"}})
    assert node_gpus(bad, CFG).health_reason == "4 of 64 partitions unhealthy"


def test_a_70b_on_a_cpx_partition_is_rejected_naming_the_partition_and_a_mode_that_holds_it() -> None:
    j = judge(_pod("meta-llama/Llama-3.1-70B-Instruct", "amd.com/cpx_nps4"), snapshot_from_nodes(NODES, CFG), CFG,
              builtin_catalog())
    assert not j.allowed
    assert "amd.com/cpx_nps4 is a 24 GiB AMD partition slice" in j.message, j.message
    assert "amd.com/spx_nps1 (192 GiB) on node mi300x-spx" in j.message, j.message
    assert "nvidia.com" not in j.message


def test_an_8b_on_a_cpx_partition_is_admitted_and_tolerates_amd_gpu() -> None:
    pod = _pod("meta-llama/Llama-3.1-8B-Instruct", "amd.com/cpx_nps4")
    j = judge(pod, snapshot_from_nodes(NODES, CFG), CFG, builtin_catalog())
    assert j.allowed and j.demand is not None and j.demand.vendor == "amd", j.message
    out, _ = mutate_pod(pod, j, CFG)
    assert {t["key"] for t in out["spec"]["tolerations"]} >= {"amd.com/gpu"}
    assert "nvidia.com/gpu" not in {t["key"] for t in out["spec"]["tolerations"]}


def test_a_partition_mode_no_node_advertises_is_named() -> None:
    j = judge(_pod("meta-llama/Llama-3.1-8B-Instruct", "amd.com/dpx_nps2"), snapshot_from_nodes(NODES, CFG), CFG,
              builtin_catalog())
    assert not j.allowed
    assert "no node offers that AMD partition profile" in j.message, j.message
    assert "amd.com/cpx_nps4" in j.message and "amd.com/spx_nps1" in j.message
