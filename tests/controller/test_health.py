"""Classification, thresholds and hysteresis of the health controller, on an injected clock."""

from __future__ import annotations

from typing import Any

from webhook.cluster.inventory import NodeGPUs, node_gpus
from webhook.config import Config, Controller, Health
from webhook.controller.health import HealthTracker, controller_config, reclassify

from ..unit.helpers import cpu_node, gpu_node

OWN = {"key": "vramgate.io/gpu-unhealthy", "effect": "NoSchedule"}


def cfg(up: float = 30, down: float = 120, grace: float = 300, **health: Any) -> Config:
    return Config(
        controller=Controller(
            unhealthy_after_seconds=up, healthy_after_seconds=down, device_plugin_grace_seconds=grace
        ),
        health=Health(**health),
    )


def gpus(node: dict[str, Any], config: Config) -> NodeGPUs:
    return node_gpus(node, config)


class Node:
    """A node whose GPU status a test changes between observations."""

    def __init__(self, config: Config, name: str = "n1", **kw: Any) -> None:
        self.config, self.name, self.kw = config, name, kw

    def set(self, **kw: Any) -> Node:
        self.kw.update(kw)
        return self

    def gpus(self) -> NodeGPUs:
        return node_gpus(gpu_node(self.name, **self.kw), self.config)


def test_own_taint_is_no_fault_for_the_controller() -> None:
    config = Config()
    tainted = gpus(gpu_node("a", taints=[OWN]), config)
    assert tainted.health == "unhealthy" and tainted.fault == "taint vramgate.io/gpu-unhealthy:NoSchedule"
    view = reclassify(tainted, controller_config(config))
    assert (view.health, view.fault) == ("healthy", None)
    assert "vramgate.io/gpu-unhealthy" in config.health.fault_taints  # the shared config is untouched


def test_foreign_fault_taint_after_ours_still_counts() -> None:
    config = Config()
    xid = {"key": "nvidia.com/gpu-xid-error", "value": "true", "effect": "NoSchedule"}
    node = gpus(gpu_node("a", taints=[OWN, xid]), config)
    view = reclassify(node, controller_config(config))
    assert view.health == "unhealthy" and view.fault == "taint nvidia.com/gpu-xid-error:NoSchedule"


def test_fault_condition_wins_over_our_taint() -> None:
    config = Config()
    cond = {"type": "GpuMemWatch", "status": "True", "message": "ECC"}
    node = gpus(gpu_node("a", taints=[OWN], conditions=[cond]), config)
    assert reclassify(node, controller_config(config)) is node
    assert node.fault and node.fault.startswith("condition GpuMemWatch=True")


def test_thresholds_fraction_and_count() -> None:
    config = cfg(up=0, down=0)
    tracker = HealthTracker(config)
    # 2 of 8 down: 25% <= 50% → degraded; 5 of 8 → unhealthy.
    d = tracker.observe([gpus(gpu_node("a", allocatable=6), config), gpus(gpu_node("b", allocatable=3), config)], 0)
    assert (d.nodes["a"].health, d.nodes["b"].health) == ("degraded", "unhealthy")
    assert d.nodes["a"].taint is False and d.nodes["b"].taint is True
    strict = cfg(up=0, down=0, unhealthy_count=2)
    d = HealthTracker(strict).observe([gpus(gpu_node("a", allocatable=6), strict)], 0)
    assert d.nodes["a"].health == "unhealthy" and d.nodes["a"].reason == "2 of 8 GPUs unhealthy"
    lax = cfg(up=0, down=0, unhealthy_fraction=1.0)
    d = HealthTracker(lax).observe([gpus(gpu_node("a", allocatable=1), lax)], 0)
    assert d.nodes["a"].health == "degraded"


def test_healthy_node_is_labelled_at_once_without_event() -> None:
    config = cfg()
    d = HealthTracker(config).observe([gpus(gpu_node("a", mem=81920), config)], 0)
    a = d.nodes["a"]
    assert a.health == "healthy" and a.transition is None and a.taint is False
    assert a.labels == {"vramgate.io/gpu-memory-mib": "81920", "vramgate.io/gpu-health": "healthy"}


def test_memory_label_per_replica_and_only_from_gfd() -> None:
    config = cfg()
    sliced = gpus(gpu_node("a", gpus=4, mem=24576, labels={"nvidia.com/gpu.replicas": "4"}), config)
    no_gfd = gpu_node("b")
    del no_gfd["metadata"]["labels"]["nvidia.com/gpu.memory"]
    no_gfd["metadata"]["labels"]["vramgate.io/gpu-memory-mib"] = "40960"  # set by hand: ours, but left alone
    d = HealthTracker(config).observe([sliced, gpus(no_gfd, config)], 0)
    assert d.nodes["a"].labels["vramgate.io/gpu-memory-mib"] == "6144"
    assert "vramgate.io/gpu-memory-mib" not in d.nodes["b"].labels


def test_unhealthy_must_persist_before_acting() -> None:
    config = cfg(up=30, down=120)
    tracker = HealthTracker(config)
    node = Node(config)
    assert tracker.observe([node.gpus()], 0).nodes["n1"].health == "healthy"
    node.set(allocatable=2)
    d = tracker.observe([node.gpus()], 10)
    n = d.nodes["n1"]
    assert (n.health, n.observed, n.pending, n.pending_since) == ("healthy", "unhealthy", "unhealthy", 10)
    assert n.taint is False
    assert tracker.observe([node.gpus()], 39).nodes["n1"].health == "healthy"
    d = tracker.observe([node.gpus()], 40)
    n = d.nodes["n1"]
    assert n.health == "unhealthy" and n.taint is True and n.labels["vramgate.io/gpu-health"] == "unhealthy"
    assert n.transition is not None and n.transition.reason == "GPUUnhealthy"
    assert n.transition.event_type == "Warning" and "6 of 8 GPUs unhealthy" in n.transition.message
    assert d.transitions() == [n.transition]
    # The next observation in the same state is no new transition.
    assert tracker.observe([node.gpus()], 41).nodes["n1"].transition is None


def test_recovery_waits_healthy_after_and_flapping_restarts_the_wait() -> None:
    config = cfg(up=0, down=120)
    tracker = HealthTracker(config)
    node = Node(config, allocatable=0)
    assert tracker.observe([node.gpus()], 0).nodes["n1"].health == "unhealthy"
    node.set(allocatable=8)
    assert tracker.observe([node.gpus()], 100).nodes["n1"].pending == "healthy"
    node.set(allocatable=0)  # flaps back: the recovery wait is void
    assert tracker.observe([node.gpus()], 150).nodes["n1"].pending is None
    node.set(allocatable=8)
    assert tracker.observe([node.gpus()], 200).nodes["n1"].health == "unhealthy"
    assert tracker.observe([node.gpus()], 319).nodes["n1"].health == "unhealthy"
    d = tracker.observe([node.gpus()], 320)
    n = d.nodes["n1"]
    assert n.health == "healthy" and n.taint is False
    assert n.transition is not None and (n.transition.reason, n.transition.event_type) == ("GPUHealthy", "Normal")
    assert n.transition.old == "unhealthy"


def test_worse_then_better_direction_change_restarts_wait() -> None:
    config = cfg(up=30, down=60)
    tracker = HealthTracker(config)
    node = Node(config, allocatable=6)  # degraded from the start (no label): undecided until it persists
    first = tracker.observe([node.gpus()], 0).nodes["n1"]
    assert first.health is None and first.taint is None and "vramgate.io/gpu-health" not in first.labels
    d = tracker.observe([node.gpus()], 30).nodes["n1"]
    assert d.health == "degraded" and d.transition is not None and d.transition.old is None
    assert d.transition.reason == "GPUDegraded"
    # degraded → unhealthy (worse) then degraded→healthy (better): each direction waits its own time.
    node.set(allocatable=2)
    tracker.observe([node.gpus()], 40)
    node.set(allocatable=8)
    assert tracker.observe([node.gpus()], 60).nodes["n1"].pending_since == 60
    assert tracker.observe([node.gpus()], 119).nodes["n1"].health == "degraded"
    assert tracker.observe([node.gpus()], 120).nodes["n1"].health == "healthy"


def test_escalation_within_worse_direction_keeps_the_timer() -> None:
    config = cfg(up=30)
    tracker = HealthTracker(config)
    node = Node(config)
    tracker.observe([node.gpus()], 0)
    node.set(allocatable=6)
    tracker.observe([node.gpus()], 10)
    node.set(allocatable=1)
    d = tracker.observe([node.gpus()], 40).nodes["n1"]
    assert d.health == "unhealthy" and d.transition is not None and d.transition.old == "healthy"


def test_fault_condition_is_unhealthy_after_hysteresis() -> None:
    config = cfg(up=5)
    tracker = HealthTracker(config)
    cond = [{"type": "SysLogsXIDError", "status": "True", "reason": "XID79"}]
    node = Node(config)
    tracker.observe([node.gpus()], 0)
    node.set(conditions=cond)
    tracker.observe([node.gpus()], 1)
    d = tracker.observe([node.gpus()], 6).nodes["n1"]
    assert d.health == "unhealthy" and "SysLogsXIDError" in d.reason


def test_device_plugin_gets_a_grace_period() -> None:
    config = cfg(up=0, grace=300)
    tracker = HealthTracker(config)
    node = Node(config, capacity=False)
    d = tracker.observe([node.gpus()], 0).nodes["n1"]
    assert d.observed is None and d.health is None and d.taint is None and "waiting 300s" in d.observed_reason
    assert tracker.observe([node.gpus()], 299).nodes["n1"].health is None
    d = tracker.observe([node.gpus()], 300).nodes["n1"]
    assert d.health == "unhealthy" and "device plugin not running" in d.reason
    # The plugin starts: healthy again (after healthy_after), and a later outage gets a fresh grace.
    node.set(capacity=True)
    tracker.observe([node.gpus()], 301)
    assert tracker.observe([node.gpus()], 421).nodes["n1"].health == "healthy"
    node.set(capacity=False)
    assert tracker.observe([node.gpus()], 500).nodes["n1"].observed is None


def test_plugin_grace_does_not_hide_a_fault() -> None:
    config = cfg(up=0, grace=300)
    cond = [{"type": "GpuPcieWatch", "status": "True"}]
    d = HealthTracker(config).observe([Node(config, capacity=False, conditions=cond).gpus()], 0).nodes["n1"]
    assert d.health == "unhealthy"


def test_state_starts_from_the_label_or_our_taint() -> None:
    config = cfg(up=30, down=120)
    tracker = HealthTracker(config)
    labelled = gpus(gpu_node("a", labels={"vramgate.io/gpu-health": "unhealthy"}), config)
    tainted = gpus(gpu_node("b", taints=[OWN]), config)
    d = tracker.observe([labelled, tainted], 0)
    for name in ("a", "b"):
        n = d.nodes[name]
        # A new leader keeps the taint until the node has been healthy for healthy_after_seconds.
        assert (n.health, n.observed, n.taint, n.transition) == ("unhealthy", "healthy", True, None)
    d = tracker.observe([labelled, tainted], 120)
    assert d.nodes["a"].health == d.nodes["b"].health == "healthy"
    assert d.nodes["b"].taint is False


def test_zero_hysteresis_acts_at_once() -> None:
    config = cfg(up=0, down=0)
    tracker = HealthTracker(config)
    node = Node(config)
    tracker.observe([node.gpus()], 0)
    node.set(allocatable=0)
    assert tracker.observe([node.gpus()], 0.5).nodes["n1"].health == "unhealthy"
    node.set(allocatable=8)
    assert tracker.observe([node.gpus()], 1.0).nodes["n1"].health == "healthy"


def test_non_gpu_nodes_are_ignored_or_cleaned_up() -> None:
    config = cfg()
    plain = node_gpus(cpu_node("cpu"), config)
    stale = cpu_node("was-gpu")
    stale["metadata"]["labels"]["vramgate.io/gpu-health"] = "unhealthy"
    stale["spec"] = {"taints": [OWN, {"key": "other", "effect": "NoSchedule"}]}
    d = HealthTracker(config).observe([plain, node_gpus(stale, config)], 0)
    assert "cpu" not in d.nodes
    assert d.nodes["was-gpu"].labels == {"vramgate.io/gpu-health": None} and d.nodes["was-gpu"].taint is False


def test_deleted_nodes_are_forgotten_and_counts() -> None:
    config = cfg(up=0)
    tracker = HealthTracker(config)
    d = tracker.observe([gpus(gpu_node("a"), config), gpus(gpu_node("b", allocatable=0), config),
                         gpus(gpu_node("c", allocatable=7), config)], 0)
    assert d.counts() == {"healthy": 1, "degraded": 1, "unhealthy": 1}
    assert d.unhealthy() == {"b"}
    d = tracker.observe([gpus(gpu_node("a"), config)], 1)
    assert d.gone == ("b", "c")
