"""Karpenter NodePools as the nodes they can add (issue #42, "Fits after scale-up").

Requirement semantics are Karpenter's (sigs.k8s.io/karpenter v1.15.0, pkg/scheduling/requirement.go and
requirements.go); the ``Has`` and ``HasIntersection`` cases below are entries of its own table tests
(pkg/scheduling/requirement_test.go, "Has" and "Intersect requirements"), with the values Karpenter expects.
"""

from __future__ import annotations

from typing import Any

import pytest

from webhook.cluster.cloud import builtin_table
from webhook.cluster.provisioners import (
    NODEPOOL_LABEL,
    Requirement,
    aws_labels,
    intersects,
    label_requirements,
    read_nodepool,
    read_provisioners,
    requirements,
)
from webhook.cluster.snapshot import snapshot_from_nodes
from webhook.config import Config

from .helpers import gpu_node

CFG = Config()
R = Requirement.of
EXISTS, DOES_NOT_EXIST = R("key", "Exists"), R("key", "DoesNotExist")
IN_A, IN_B, IN_AB, NOT_IN_A = R("key", "In", ["A"]), R("key", "In", ["B"]), R("key", "In", ["A", "B"]), \
    R("key", "NotIn", ["A"])
IN_1, IN_9, NOT_IN_12 = R("key", "In", ["1"]), R("key", "In", ["9"]), R("key", "NotIn", ["1", "2"])
GT_1, GT_9, LT_1, LT_9 = R("key", "Gt", ["1"]), R("key", "Gt", ["9"]), R("key", "Lt", ["1"]), R("key", "Lt", ["9"])


@pytest.mark.parametrize(("req", "value", "expected"), [
    # requirement_test.go Context("Has"): value "A", then "1" and "9"
    (EXISTS, "A", True), (DOES_NOT_EXIST, "A", False), (IN_A, "A", True), (IN_B, "A", False), (IN_AB, "A", True),
    (NOT_IN_A, "A", False), (NOT_IN_12, "A", True), (GT_1, "A", False), (LT_9, "A", False),
    (GT_1, "9", True), (GT_9, "9", False), (LT_9, "1", True), (LT_1, "1", False), (NOT_IN_12, "1", False),
])
def test_has_is_karpenters(req: Requirement, value: str, expected: bool) -> None:
    assert req.has(value) is expected


@pytest.mark.parametrize(("a", "b", "expected"), [
    (EXISTS, EXISTS, True), (EXISTS, DOES_NOT_EXIST, False), (EXISTS, IN_A, True), (EXISTS, NOT_IN_A, True),
    (DOES_NOT_EXIST, DOES_NOT_EXIST, False), (IN_A, IN_B, False), (IN_A, IN_AB, True), (IN_A, NOT_IN_A, False),
    (IN_B, NOT_IN_A, True), (IN_1, GT_1, False), (IN_9, GT_1, True), (IN_9, LT_9, False), (IN_1, LT_9, True),
    (GT_9, LT_9, False), (GT_1, LT_9, True), (GT_1, GT_9, True), (NOT_IN_12, IN_1, False),
])
def test_has_intersection_is_karpenters_and_symmetric(a: Requirement, b: Requirement, expected: bool) -> None:
    assert a.intersects(b) is expected and b.intersects(a) is expected


def test_keys_only_one_side_defines_never_exclude_and_two_exclusions_never_conflict() -> None:
    itype = label_requirements({"node.kubernetes.io/instance-type": "p5.48xlarge"})
    # Requirements.Intersects compares only the keys both define.
    assert intersects(itype, requirements([R("karpenter.sh/capacity-type", "In", ["on-demand"])]))
    assert not intersects(itype, requirements([R("node.kubernetes.io/instance-type", "In", ["p4d.24xlarge"])]))
    # The beta key is the GA one (NormalizedLabels).
    assert not intersects(itype, requirements([R("beta.kubernetes.io/instance-type", "NotIn", ["p5.48xlarge"])]))
    assert intersects(requirements([R("k", "DoesNotExist")]), requirements([R("k", "NotIn", ["x"])]))
    # Two requirements of one key are both in force (Requirements.Add intersects them).
    both = requirements([R("g", "Gt", ["2"]), R("g", "Lt", ["8"])])
    assert both["g"].has("4") and not both["g"].has("8") and not both["g"].has("2")


def test_a_bad_operator_or_bound_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown operator 'Within'"):
        R("k", "Within", ["1"])
    with pytest.raises(ValueError, match="one integer value"):
        R("k", "Gt", ["many"])
    with pytest.raises(ValueError, match="NodePool bad: requirement k Lt"):
        read_nodepool(pool("bad", [{"key": "k", "operator": "Lt", "values": []}]), "nvidia.com/gpu")
    found = read_provisioners([pool("bad", [{"key": "k", "operator": "Lt"}]), pool("ok", [])], CFG)
    assert [p.name for p in found.pools] == ["ok"] and "NodePool bad" in found.problems[0]


def test_aws_instance_types_get_the_labels_karpenters_aws_provider_sets() -> None:
    p5 = aws_labels(builtin_table().instance_types["p5.48xlarge"])
    assert p5["karpenter.k8s.aws/instance-gpu-name"] == "h100"
    assert p5["karpenter.k8s.aws/instance-gpu-count"] == "8"
    assert (p5["karpenter.k8s.aws/instance-family"], p5["karpenter.k8s.aws/instance-size"],
            p5["karpenter.k8s.aws/instance-category"], p5["karpenter.k8s.aws/instance-generation"]) == \
        ("p5", "48xlarge", "p", "5")
    assert aws_labels(builtin_table().instance_types["p6-b200.48xlarge"])["karpenter.k8s.aws/instance-family"] == \
        "p6-b200"
    assert aws_labels(builtin_table().instance_types["p4d.24xlarge"])["karpenter.k8s.aws/instance-gpu-name"] == "a100"


AWS = {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}


def pool(name: str, reqs: list[dict[str, Any]], *, limits: dict[str, str] | None = None,
         used: dict[str, str] | None = None, labels: dict[str, str] | None = None,
         nodeclass: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
            "spec": {"template": {"metadata": {"labels": labels or {}},
                                  "spec": {"nodeClassRef": nodeclass or AWS, "requirements": reqs}},
                     "limits": limits or {}},
            "status": {"resources": used or {}}}


def offers_of(*pools: dict[str, Any], nodes: list[dict[str, Any]] = ()) -> dict[str, Any]:  # type: ignore[assignment]
    snap = snapshot_from_nodes(list(nodes), CFG, dra=list(pools))
    return {o.pool.name: o for o in snap.scale_up}


def test_an_aws_pool_can_add_the_table_rows_its_requirements_allow() -> None:
    o = offers_of(
        pool("h100", [{"key": "karpenter.k8s.aws/instance-gpu-name", "operator": "In", "values": ["h100"]}]),
        pool("big", [{"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "Gt", "values": ["4"]},
                     {"key": "karpenter.k8s.aws/instance-category", "operator": "NotIn", "values": ["g"]}]),
        pool("arm", [{"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}]),
        pool("cpu", [{"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m"]}]),
    )
    assert [n.instance_type for n in o["h100"].nodes] == ["p5.4xlarge", "p5.48xlarge"]
    assert all(n.node.vram_mib == 81559 and n.node.product == "NVIDIA-H100-80GB-HBM3" for n in o["h100"].nodes)
    big = {n.instance_type for n in o["big"].nodes}
    assert "p5e.48xlarge" in big and not any(t.startswith("g") for t in big) and "p5.4xlarge" not in big
    assert {n.node.product for n in o["arm"].nodes} == {"NVIDIA-T4G"}  # g5g: Graviton with T4G
    assert not o["cpu"].nodes and not o["cpu"].unknown  # an AWS CPU pool adds no GPU and is not "unknown"


def test_limits_leave_what_the_pools_nodes_do_not_use() -> None:
    member = gpu_node("n1", gpus=8, mem=81559, product="NVIDIA-H100-80GB-HBM3")
    member["metadata"]["labels"][NODEPOOL_LABEL] = "h100"
    reqs = [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["p5.48xlarge", "p5.4xlarge"]}]
    o = offers_of(pool("h100", reqs, limits={"nvidia.com/gpu": "12"}), nodes=[member])["h100"]
    assert o.gpus_used == 8 and o.gpus_left == 4
    small, large = o.nodes
    assert o.room_for(small) and not o.room_for(large)  # filterByRemainingResources: 8 GPUs > 4 left
    # status.resources, when larger (nodes not in view yet), counts instead; a node limit binds first.
    o = offers_of(pool("h100", reqs, limits={"nvidia.com/gpu": "12", "nodes": "3"},
                       used={"nvidia.com/gpu": "12"}))["h100"]
    assert o.gpus_left == 0 and o.full and not o.room_for(small)
    assert offers_of(pool("h100", reqs, limits={"nodes": "1"}), nodes=[member])["h100"].full


def test_other_providers_are_read_from_template_labels_named_types_or_nodes_of_that_type() -> None:
    kwok = {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}
    gfd = {"nvidia.com/gpu.memory": "81559", "nvidia.com/gpu.count": "1", "nvidia.com/gpu.product": "NVIDIA-H100"}
    named = [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["gpu-l4-1x"]}]
    seen = gpu_node("l4-node", gpus=1, mem=23034, product="NVIDIA-L4")
    seen["metadata"]["labels"]["node.kubernetes.io/instance-type"] = "gpu-l4-1x"
    o = offers_of(
        pool("h100", [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["gpu-h100-1x"]}],
             labels=gfd, nodeclass=kwok),
        pool("l4", named, nodeclass=kwok, limits={"nvidia.com/gpu": "4"}),
        pool("mystery", [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["gpu-x"]}],
             nodeclass=kwok, limits={"nvidia.com/gpu": "4"}),
        pool("plain", [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c-4x"]}],
             nodeclass=kwok),
        nodes=[seen])
    (h100,) = o["h100"].nodes
    assert (h100.instance_type, h100.gpus, h100.node.vram_mib, h100.source) == \
        ("gpu-h100-1x", 1, 81559, "its template's labels")
    (l4,) = o["l4"].nodes
    assert (l4.node.vram_mib, l4.source) == (23034, "node l4-node of that type")
    assert not o["mystery"].nodes and o["mystery"].unknown == ("gpu-x",)  # a GPU pool (its limit) of unknown GPUs
    assert not o["plain"].nodes and not o["plain"].unknown  # nothing says it has GPUs


def test_offers_are_worked_out_once_per_nodepool_set_not_per_snapshot() -> None:
    pools = [pool("h100", [{"key": "karpenter.k8s.aws/instance-gpu-name", "operator": "In", "values": ["h100"]}])]
    provisioners = read_provisioners(pools, CFG)
    first = provisioners.offers([])
    cached = provisioners._candidates["h100"]
    assert provisioners.offers([]) == first and provisioners._candidates["h100"] is cached


def test_the_live_inventory_follows_nodepool_events() -> None:
    from webhook.kube.nodecache import KINDS, POOL_KIND, InventoryState

    state = InventoryState(CFG, (*KINDS, POOL_KIND))
    reqs = [{"key": "karpenter.k8s.aws/instance-gpu-name", "operator": "In", "values": ["h100"]}]
    listed = {**pool("h100", reqs, limits={"nvidia.com/gpu": "8"}), "kind": None}
    listed["metadata"]["resourceVersion"] = "5"
    state.relist(POOL_KIND, [listed], "5")
    first = state.snapshot()
    assert [p.gpu_limit for p in first.provisioners.pools] == [8]
    full = {**pool("h100", reqs, limits={"nvidia.com/gpu": "0"})}
    full["metadata"]["resourceVersion"] = "7"
    assert state.apply(POOL_KIND, {"type": "MODIFIED", "object": full}) == "applied"
    old = {**pool("h100", reqs, limits={"nvidia.com/gpu": "99"})}
    old["metadata"]["resourceVersion"] = "6"
    assert state.apply(POOL_KIND, {"type": "MODIFIED", "object": old}) == "stale"
    second = state.snapshot()
    assert [p.gpu_limit for p in second.provisioners.pools] == [0] and second.scale_up[0].full
    assert [p.gpu_limit for p in first.provisioners.pools] == [8]  # a published snapshot never changes
    gone = {"metadata": {"name": "h100", "resourceVersion": "8"}}
    assert state.apply(POOL_KIND, {"type": "DELETED", "object": gone}) == "applied"
    assert not state.snapshot().provisioners
