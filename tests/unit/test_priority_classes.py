"""PriorityClasses in the live inventory, and the mutation setting spec.priority as the Priority plugin will."""

from __future__ import annotations

from typing import Any

import jsonpatch

from webhook.cluster.snapshot import snapshot_from_nodes
from webhook.config import Config
from webhook.decide.mutation import mutation
from webhook.decide.verdict import judge
from webhook.kube.nodecache import InventoryState
from webhook.models.catalog import builtin_catalog

from .helpers import gpu_node

KINDS = ("Node", "Pod", "Namespace", "PriorityClass")


def _pc(name: str, value: int, rv: str, policy: str | None = "PreemptLowerPriority") -> dict[str, Any]:
    obj: dict[str, Any] = {"metadata": {"name": name, "resourceVersion": rv}, "value": value}
    if policy is not None:
        obj["preemptionPolicy"] = policy
    return obj


def _state() -> InventoryState:
    state = InventoryState(Config(), KINDS)  # type: ignore[arg-type]
    for kind in ("Node", "Pod", "Namespace"):
        state.relist(kind, [], "10")  # type: ignore[arg-type]
    return state


def test_priority_classes_follow_list_and_watch() -> None:
    state = _state()
    assert not state.snapshot().synced  # PriorityClass is one of this state's kinds
    state.relist("PriorityClass", [_pc("gpu-production-priority", 1000, "11"),
                                   _pc("gpu-batch-priority", 500, "12", "Never")], "12")
    snap = state.snapshot()
    assert snap.synced
    assert snap.priority_classes == {"gpu-production-priority": (1000, "PreemptLowerPriority"),
                                     "gpu-batch-priority": (500, "Never")}
    # Recreated with another value: the newer event wins; an older one is stale.
    state.apply("PriorityClass", {"type": "DELETED", "object": _pc("gpu-batch-priority", 500, "13", "Never")})
    assert "gpu-batch-priority" not in state.snapshot().priority_classes
    assert state.apply("PriorityClass", {"type": "ADDED", "object": _pc("gpu-batch-priority", 500, "12")}) == "stale"
    state.apply("PriorityClass", {"type": "ADDED", "object": _pc("gpu-batch-priority", 700, "14", None)})
    assert state.snapshot().priority_classes["gpu-batch-priority"] == (700, "PreemptLowerPriority")
    assert snap.priority_classes["gpu-batch-priority"] == (500, "Never")  # a published snapshot never changes
    # A re-list without a class drops it.
    state.relist("PriorityClass", [_pc("gpu-production-priority", 1000, "11")], "20")
    assert state.snapshot().priority_classes == {"gpu-production-priority": (1000, "PreemptLowerPriority")}


def _patched(priorities: dict[str, tuple[int, str]] | None) -> dict[str, Any]:
    cfg = Config()
    snap = snapshot_from_nodes([gpu_node("h100", mem=81559, product="NVIDIA-H100-80GB-HBM3")], cfg)
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "p", "namespace": "ml", "annotations": {"vramgate.io/vram": "20Gi"}},
           # What the Priority plugin left before webhooks ran: no class, priority 0.
           "spec": {"priority": 0, "preemptionPolicy": "PreemptLowerPriority",
                    "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    judgement = judge(pod, snap, cfg, builtin_catalog(), namespace="ml")
    assert judgement.allowed
    ops, _ = mutation(pod, judgement, cfg, priorities)
    out: dict[str, Any] = jsonpatch.apply_patch(pod, ops)
    return out["spec"]


def test_the_mutation_sets_the_priority_the_plugin_will_compute() -> None:
    spec = _patched({"gpu-production-priority": (1000, "PreemptLowerPriority")})
    assert (spec["priorityClassName"], spec["priority"], spec["preemptionPolicy"]) == (
        "gpu-production-priority", 1000, "PreemptLowerPriority")
    # A class not seen (yet): left to the plugin, which fills both when the admission chain re-runs.
    spec = _patched({})
    assert spec["priorityClassName"] == "gpu-production-priority"
    assert "priority" not in spec and "preemptionPolicy" not in spec
