"""InventoryState against recorded list+watch sequences: free GPUs, re-lists, out-of-order events."""

from __future__ import annotations

from typing import Any

from webhook.kube.nodecache import InventoryState, event_batches

from ..unit.helpers import gpu_node
from .cluster import CFG, bookmark, bound_pod, event, gone, namespace, with_rv


def node(name: str, rv: int, **kw: Any) -> dict[str, Any]:
    return with_rv(gpu_node(name, **kw), rv)


def synced_state(nodes: list[dict[str, Any]], pods: list[dict[str, Any]] | None = None,
                 namespaces: list[dict[str, Any]] | None = None, rv: str = "100") -> InventoryState:
    state = InventoryState(CFG)
    state.relist("Node", nodes, rv)
    state.relist("Pod", pods or [], rv)
    state.relist("Namespace", namespaces or [], rv)
    return state


def test_synced_only_after_all_three_lists() -> None:
    state = InventoryState(CFG)
    assert not state.snapshot().synced
    state.relist("Node", [node("a", 10)], "10")
    state.relist("Pod", [], "11")
    assert not state.synced and not state.snapshot().synced
    state.relist("Namespace", [namespace("ml", "warn", rv=3), namespace("dev", rv=4)], "12")
    snap = state.snapshot()
    assert snap.synced and snap.enforcement == {"ml": "warn"}
    assert [state.resource_version(k) for k in ("Node", "Pod", "Namespace")] == ["10", "11", "12"]


def test_free_gpus_follow_pods_exactly() -> None:
    state = synced_state([node("a", 10), node("b", 11, gpus=4)],
                         [bound_pod("p1", "a", 2, rv=20), bound_pod("cpu", "a", 0, rv=21)])
    assert state.snapshot().free == {"a": 6, "b": 4}
    # A pending pod holds nothing; binding it (nodeName set) takes its GPUs.
    pending = bound_pod("p2", "b", 3, rv=30)
    del pending["spec"]["nodeName"]
    assert state.apply("Pod", event("ADDED", pending)) == "unchanged"
    assert state.snapshot().free["b"] == 4
    state.apply("Pod", event("MODIFIED", bound_pod("p2", "b", 3, rv=31)))
    assert state.snapshot().free == {"a": 6, "b": 1}
    # Updates that change nothing GPU-related leave the counts alone (no double counting).
    state.apply("Pod", event("MODIFIED", bound_pod("p2", "b", 3, rv=32)))
    assert state.snapshot().free["b"] == 1 and state.used("b") == 3
    # Succeeded frees the GPUs; the later DELETE of the same pod frees nothing more.
    state.apply("Pod", event("MODIFIED", bound_pod("p2", "b", 3, rv=33, phase="Succeeded")))
    assert state.snapshot().free["b"] == 4
    state.apply("Pod", event("DELETED", bound_pod("p2", "b", 3, rv=34, phase="Succeeded")))
    assert state.snapshot().free["b"] == 4 and state.used("b") == 0
    # A delete frees a running pod's GPUs; Failed counts as terminal too.
    state.apply("Pod", event("DELETED", bound_pod("p1", "a", 2, rv=35)))
    state.apply("Pod", event("ADDED", bound_pod("p3", "a", 8, rv=36)))
    assert state.snapshot().free["a"] == 0
    state.apply("Pod", event("MODIFIED", bound_pod("p3", "a", 8, rv=37, phase="Failed")))
    assert state.snapshot().free["a"] == 8


def test_pods_on_a_node_not_seen_yet_count_once_it_arrives() -> None:
    state = synced_state([], [bound_pod("p", "late", 3, rv=20)])
    state.apply("Node", event("ADDED", node("late", 40)))
    assert state.snapshot().free == {"late": 5}


def test_out_of_order_node_updates_do_not_roll_back() -> None:
    state = synced_state([node("a", 10)], rv="10")
    state.apply("Node", event("MODIFIED", node("a", 20, allocatable=6)))
    before = state.snapshot()
    assert state.apply("Node", event("MODIFIED", node("a", 15, allocatable=8))) == "stale"
    assert state.apply("Node", event("MODIFIED", node("a", 20, allocatable=8))) == "stale"  # same version
    after = state.snapshot()
    assert after is before and after.nodes["a"].allocatable == 6
    assert state.resource_version("Node") == "20"  # the resume point never moves back either
    # A node deleted at 30 stays deleted when an older update straggles in.
    state.apply("Node", event("DELETED", node("a", 30)))
    assert state.apply("Node", event("MODIFIED", node("a", 25))) == "stale"
    assert "a" not in state.snapshot().nodes
    # Re-created later (a higher resourceVersion): accepted.
    assert state.apply("Node", event("ADDED", node("a", 50, gpus=4))) == "applied"
    assert state.snapshot().nodes["a"].capacity == 4


def test_out_of_order_pod_events_do_not_resurrect_or_double_count() -> None:
    state = synced_state([node("a", 10)])
    state.apply("Pod", event("ADDED", bound_pod("p", "a", 4, rv=20)))
    state.apply("Pod", event("DELETED", bound_pod("p", "a", 4, rv=22)))
    assert state.apply("Pod", event("MODIFIED", bound_pod("p", "a", 4, rv=21))) == "stale"
    assert state.snapshot().free["a"] == 8
    state.apply("Pod", event("ADDED", bound_pod("q", "a", 2, rv=30)))
    state.apply("Pod", event("MODIFIED", bound_pod("q", "a", 2, rv=32, phase="Succeeded")))
    assert state.apply("Pod", event("MODIFIED", bound_pod("q", "a", 2, rv=31))) == "stale"
    assert state.snapshot().free["a"] == 8


def test_non_numeric_resource_versions_are_applied_in_arrival_order() -> None:
    state = synced_state([node("a", 10)])
    odd = gpu_node("a", allocatable=3)
    odd["metadata"]["resourceVersion"] = "opaque-token"
    assert state.apply("Node", event("MODIFIED", odd)) == "applied"
    assert state.snapshot().nodes["a"].allocatable == 3


def test_410_gone_then_relist_replaces_the_world() -> None:
    """Recorded: list at 100, a few events, 410 Gone; the re-list shows what changed meanwhile."""
    state = synced_state([node("a", 10), node("b", 11), node("c", 12)],
                         [bound_pod("p1", "a", 4, rv=50), bound_pod("p2", "b", 8, rv=51)],
                         [namespace("ml", "warn", rv=5)])
    assert state.apply("Pod", event("ADDED", bound_pod("p3", "c", 1, rv=101))) == "applied"
    assert state.snapshot().free == {"a": 4, "b": 0, "c": 7}
    assert state.apply("Pod", gone()) == "gone"
    assert state.snapshot().free == {"a": 4, "b": 0, "c": 7}  # 410 changes nothing by itself
    # While the watch was down: node b left, d joined, p1 finished (terminal pods are not listed),
    # p3 was deleted, p4 started on d, and namespace ml lost its label.
    state.relist("Node", [node("a", 10), node("c", 12), node("d", 140, gpus=4)], "150")
    state.relist("Pod", [bound_pod("p2", "b", 8, rv=51), bound_pod("p4", "d", 1, rv=145)], "150")
    state.relist("Namespace", [namespace("ml", rv=120)], "150")
    snap = state.snapshot()
    assert set(snap.nodes) == {"a", "c", "d"}
    assert snap.free == {"a": 8, "c": 8, "d": 3}
    assert state.used("b") == 8  # p2 still holds its GPUs on b; b is just not a node any more
    assert snap.enforcement == {}
    assert state.resource_version("Pod") == "150"


def test_relist_keeps_what_is_newer_than_the_list() -> None:
    state = synced_state([node("a", 10)])
    state.apply("Node", event("MODIFIED", node("a", 200, allocatable=5)))
    state.apply("Node", event("ADDED", node("z", 210)))
    state.relist("Node", [node("a", 10)], "150")  # an older list (a lagging API server)
    snap = state.snapshot()
    assert snap.nodes["a"].allocatable == 5 and "z" in snap.nodes


def test_bookmarks_move_the_resume_point_only() -> None:
    state = synced_state([node("a", 10)])
    before = state.snapshot()
    assert state.apply("Node", bookmark("Node", 500)) == "unchanged"
    assert state.resource_version("Node") == "500" and state.snapshot() is before


def test_snapshots_are_immutable_and_node_capability_is_computed_per_node_event() -> None:
    state = synced_state([node("a", 10), node("b", 11)])
    first = state.snapshot()
    capability = first.nodes["a"]
    state.apply("Pod", event("ADDED", bound_pod("p", "a", 8, rv=20)))
    second = state.snapshot()
    assert second is not first and second.revision == first.revision + 1
    assert first.free["a"] == 8 and second.free["a"] == 0  # the old snapshot did not change
    assert second.nodes["a"] is capability  # a pod event does not recompute the node
    assert second.classes["a"] != second.classes["b"]  # same capability, different free GPUs
    assert first.classes["a"] == first.classes["b"]
    assert second.versions == {"a": "10", "b": "11"}


def test_pod_churn_keeps_the_sorted_node_lists_and_a_node_change_rebuilds_them() -> None:
    state = synced_state([node("a", 10), node("b", 11, gpus=4)])
    first = state.snapshot()
    order = first.by_vram
    state.apply("Pod", event("ADDED", bound_pod("p", "a", 8, rv=20)))
    second = state.snapshot()
    assert second is not first and second.by_vram is order  # the first review after it does not re-sort
    assert second.free_gpus("a") == 0 and first.free_gpus("a") == 8
    state.apply("Node", event("MODIFIED", node("b", 30, gpus=4, mem=40960)))
    third = state.snapshot()
    assert third.by_vram is not order and [n.name for n in third.by_vram] == ["a", "b"]
    assert third.nodes["b"].vram_mib < second.nodes["b"].vram_mib
    state.apply("Node", event("DELETED", node("a", 31)))
    assert [n.name for n in state.snapshot().by_vram] == ["b"]


def test_namespace_enforcement_labels() -> None:
    state = synced_state([], [], [namespace("ml", "warn", rv=1)])
    state.apply("Namespace", event("ADDED", namespace("lab", "off", rv=2)))
    state.apply("Namespace", event("MODIFIED", namespace("ml", "enforce", rv=3)))
    assert state.snapshot().enforcement == {"ml": "enforce", "lab": "off"}
    state.apply("Namespace", event("DELETED", namespace("lab", "off", rv=4)))
    assert state.apply("Namespace", event("MODIFIED", namespace("lab", "warn", rv=3))) == "stale"
    assert state.snapshot().enforcement == {"ml": "enforce"}


def test_error_events_and_junk_change_nothing() -> None:
    state = synced_state([node("a", 10)])
    before = state.snapshot()
    assert state.apply("Node", {"type": "ERROR", "object": {"code": 500, "message": "etcd down"}}) == "error"
    junks: list[Any] = [None, [], {"type": "ADDED"}, {"type": "ADDED", "object": {"metadata": {}}},
                        {"type": "WHAT", "object": {}}]
    for junk in junks:
        assert state.apply("Node", junk) == "unchanged"
    assert state.snapshot() is before


def test_event_batches_reassemble_lines_split_across_chunks() -> None:
    chunks = [b'{"type":"ADDED","object":{"a":1}}\n{"type":"MOD', b'IFIED","object":{"a":2}}\n', b"\n",
              b'{"type":"DELETED","object":{}}']
    batches = list(event_batches(chunks))
    assert [[e["type"] for e in b] for b in batches] == [["ADDED"], ["MODIFIED"], ["DELETED"]]


def test_an_update_that_changes_nothing_read_keeps_the_node_object() -> None:
    state = synced_state([node("a", 10), node("b", 11)])
    first = state.snapshot().nodes["a"]
    heartbeat = node("a", 40)
    heartbeat["metadata"]["annotations"] = {"node.alpha.kubernetes.io/ttl": "0"}
    heartbeat["status"]["conditions"] = [{"type": "Ready", "status": "True",
                                          "lastHeartbeatTime": "2026-12-01T20:00:00Z"}]
    revision = state.snapshot().nodes_revision
    order = state.snapshot().by_vram
    assert state.apply("Node", event("MODIFIED", heartbeat)) == "applied"
    snap = state.snapshot()
    assert snap.nodes["a"] is first and snap.versions["a"] == "40"  # same capability object, newer version
    assert snap.nodes_revision == revision and snap.by_vram is order
    # A label is not part of the capability, but selectors read it: a new object, new sorted lists.
    state.apply("Node", event("MODIFIED", node("a", 41, labels={"team": "x"})))
    snap = state.snapshot()
    assert snap.nodes["a"] is not first and snap.nodes["a"].labels["team"] == "x"
    assert snap.nodes_revision == revision + 1 and snap.by_vram is not order
    assert next(n for n in snap.by_vram if n.name == "a").labels["team"] == "x"
    state.apply("Node", event("MODIFIED", node("a", 42, gpus=4)))
    assert state.snapshot().nodes["a"].capacity == 4
