"""The controller's reconcile pass against an in-memory API: writes only differences, merges taints under
resourceVersion preconditions (409 → re-read), records Events, and keeps its state while the API is down."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from webhook.cluster.snapshot import Snapshot, snapshot_from_nodes
from webhook.config import Config, Controller
from webhook.controller.controller import Controller as HealthController
from webhook.kube.apiserver import ApiError

from ..unit.helpers import gpu_node

OWN = {"key": "vramgate.io/gpu-unhealthy", "effect": "NoSchedule"}
DEDICATED = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}


class MemoryApi:
    """Nodes with resourceVersions, JSON merge patch with a resourceVersion precondition, Events."""

    def __init__(self, *nodes: dict[str, Any]) -> None:
        self.rv = 0
        self.nodes: dict[str, dict[str, Any]] = {}
        for n in nodes:
            self._store(copy.deepcopy(n))
        self.patches: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.down = False
        self.calls = 0
        self.before_patch: Any = None  # a concurrent writer, run once before the next patch lands

    def _store(self, node: dict[str, Any]) -> None:
        self.rv += 1
        node["metadata"]["resourceVersion"] = str(self.rv)
        self.nodes[node["metadata"]["name"]] = node

    def _check(self) -> None:
        self.calls += 1
        if self.down:
            raise ApiError(0, "connection refused")

    def get(self, path: str, query: dict[str, str] | None = None) -> Any:
        self._check()
        name = path.rsplit("/", 1)[1]
        if name not in self.nodes:
            raise ApiError(404, "not found")
        return copy.deepcopy(self.nodes[name])

    def request(self, method: str, path: str, body: Any = None, **_: Any) -> Any:
        self._check()
        if method == "POST" and path == "/api/v1/namespaces/default/events":
            self.events.append(body)
            return body
        assert method == "PATCH"
        if self.before_patch is not None:
            writer, self.before_patch = self.before_patch, None
            writer(self)
        name = path.rsplit("/", 1)[1]
        node = copy.deepcopy(self.nodes[name])
        if body["metadata"].get("resourceVersion") not in (None, node["metadata"]["resourceVersion"]):
            raise ApiError(409, "the object has been modified")
        self.patches.append(body)
        labels = node["metadata"].setdefault("labels", {})
        for k, v in (body["metadata"].get("labels") or {}).items():
            if v is None:
                labels.pop(k, None)
            else:
                labels[k] = v
        if "spec" in body:
            node.setdefault("spec", {})["taints"] = body["spec"]["taints"]
        self._store(node)
        return node

    def set_status(self, name: str, **kw: Any) -> None:
        node = self.nodes[name]
        fresh = gpu_node(name, **kw)
        node["status"] = fresh["status"]
        self._store(node)


class Inventory:
    """The inventory as the controller sees it: a snapshot taken from the API's nodes on demand."""

    def __init__(self, api: MemoryApi, config: Config) -> None:
        self.api, self.config = api, config
        self.snap = Snapshot()
        self.sync()

    def sync(self) -> None:
        self.snap = snapshot_from_nodes(copy.deepcopy(list(self.api.nodes.values())), self.config)

    def snapshot(self) -> Snapshot:
        return self.snap

    def staleness(self) -> float | None:
        return None

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def setup(*nodes: dict[str, Any], up: float = 0.0, down: float = 0.0) -> tuple[HealthController, MemoryApi,
                                                                                 Inventory, Clock]:
    config = Config(controller=Controller(unhealthy_after_seconds=up, healthy_after_seconds=down))
    api = MemoryApi(*nodes)
    inv = Inventory(api, config)
    clock = Clock()
    ctl = HealthController(config, api_client=None, inventory=inv, clock=clock, identity="test-1")
    ctl.api = api  # type: ignore[assignment]
    return ctl, api, inv, clock


def reconcile(ctl: HealthController, inv: Inventory, clock: Clock, lead: bool = True) -> None:
    if lead:
        ctl.elector._leading, ctl.elector.renewed_at = True, clock.now
    asyncio.run(ctl.reconcile())
    inv.sync()


def test_writes_labels_once_then_nothing() -> None:
    ctl, api, inv, clock = setup(gpu_node("a", labels={"team": "ml"}, taints=[DEDICATED]))
    reconcile(ctl, inv, clock)
    assert api.patches == [{"metadata": {"resourceVersion": "1", "labels": {
        "vramgate.io/gpu-memory-mib": "81920", "vramgate.io/gpu-health": "healthy"}}}]
    calls = api.calls
    clock.now += 1
    reconcile(ctl, inv, clock)
    assert api.calls == calls  # the snapshot already shows the labels: no call at all
    assert api.nodes["a"]["metadata"]["labels"]["team"] == "ml" and api.nodes["a"]["spec"]["taints"] == [DEDICATED]
    assert api.events == []


def test_taint_added_and_removed_with_events() -> None:
    ctl, api, inv, clock = setup(gpu_node("a"))
    reconcile(ctl, inv, clock)
    api.set_status("a", allocatable=1)
    inv.sync()
    clock.now += 1
    reconcile(ctl, inv, clock)
    node = api.nodes["a"]
    assert node["spec"]["taints"] == [OWN] and node["metadata"]["labels"]["vramgate.io/gpu-health"] == "unhealthy"
    assert [(e["reason"], e["involvedObject"]["name"], e["reportingInstance"]) for e in api.events] == [
        ("GPUUnhealthy", "a", "test-1")]
    api.set_status("a")
    inv.sync()
    clock.now += 1
    reconcile(ctl, inv, clock)
    assert api.nodes["a"]["spec"]["taints"] == [] and [e["reason"] for e in api.events][-1] == "GPUHealthy"
    assert ctl.metrics.registry.get_sample_value("vramgate_controller_taints_total", {"action": "added"}) == 1
    assert ctl.metrics.registry.get_sample_value("vramgate_controller_taints_total", {"action": "removed"}) == 1


def test_conflict_rereads_and_keeps_a_concurrent_taint() -> None:
    ctl, api, inv, clock = setup(gpu_node("a", allocatable=0))

    def someone_else(api: MemoryApi) -> None:  # adds a taint between our read and our write
        api.nodes["a"]["spec"]["taints"] = [DEDICATED]
        api._store(api.nodes["a"])

    api.before_patch = someone_else
    reconcile(ctl, inv, clock)
    assert api.nodes["a"]["spec"]["taints"] == [DEDICATED, OWN]
    assert len(api.patches) == 1 and api.patches[0]["metadata"]["resourceVersion"] == "2"


def test_api_down_keeps_state_and_backs_off() -> None:
    ctl, api, inv, clock = setup(gpu_node("a"))
    reconcile(ctl, inv, clock)
    api.set_status("a", allocatable=0)
    inv.sync()
    api.down = True
    clock.now += 1
    reconcile(ctl, inv, clock)  # no exception: the decision stands, the write waits
    assert ctl.last_decision is not None and ctl.last_decision.nodes["a"].health == "unhealthy"
    calls = api.calls
    clock.now += 0.5
    reconcile(ctl, inv, clock)
    assert api.calls == calls  # backing off: not even a try
    api.down = False
    clock.now += 2
    reconcile(ctl, inv, clock)
    assert api.nodes["a"]["spec"]["taints"] == [OWN]
    assert [e["reason"] for e in api.events] == ["GPUUnhealthy"]  # the transition's Event was kept for later


def test_follower_writes_nothing() -> None:
    ctl, api, inv, clock = setup(gpu_node("a", allocatable=0))
    reconcile(ctl, inv, clock, lead=False)
    assert api.calls == 0 and api.patches == []


def test_run_controller_with_a_fixed_inventory_returns_at_once() -> None:
    from webhook.cluster.snapshot import StaticInventory
    from webhook.serve.server import run_controller
    from webhook.serve.state import AppState

    config = Config()
    asyncio.run(asyncio.wait_for(run_controller(AppState(config, StaticInventory([], config))), timeout=5))


class LiveInventory:
    """The inventory as the server keeps it (InventoryState: node objects kept while unchanged, nodes_revision),
    fed the API's nodes as watch events."""

    def __init__(self, api: MemoryApi, config: Config) -> None:
        from webhook.kube.nodecache import InventoryState

        self.api = api
        self.state = InventoryState(config)
        self.state.relist("Node", copy.deepcopy(list(api.nodes.values())), str(api.rv))
        self.state.relist("Pod", [], str(api.rv))
        self.state.relist("Namespace", [], str(api.rv))

    def sync(self) -> None:
        for node in self.api.nodes.values():
            self.state.apply("Node", {"type": "MODIFIED", "object": copy.deepcopy(node)})

    def snapshot(self) -> Snapshot:
        return self.state.snapshot()


def test_a_steady_reconcile_skips_the_pass_until_a_node_changes_and_time_still_acts() -> None:
    config = Config(controller=Controller(unhealthy_after_seconds=10.0, healthy_after_seconds=0.0))
    api = MemoryApi(gpu_node("a"), gpu_node("b"))
    inv = LiveInventory(api, config)
    clock = Clock()
    ctl = HealthController(config, api_client=None, inventory=inv, clock=clock, identity="test-1")  # type: ignore[arg-type]
    ctl.api = api  # type: ignore[assignment]
    observed = []
    observe = ctl.tracker.observe
    ctl.tracker.observe = lambda nodes, now: observed.append(now) or observe(nodes, now)  # type: ignore[method-assign]

    def tick(seconds: float = 1.0) -> None:
        clock.now += seconds
        reconcile(ctl, inv, clock)  # type: ignore[arg-type]

    tick()  # writes the labels
    assert len(api.patches) == 2 and len(observed) == 1
    tick()  # the labels are in: every node found as decided
    assert len(observed) == 2
    first = ctl.last_decision
    calls = api.calls
    for _ in range(3):
        tick()
    assert len(observed) == 2 and ctl.last_decision is first and api.calls == calls and ctl.reconciles == 5
    # A pod taking GPUs changes free GPUs, not the nodes: still nothing to decide.
    pod = {"metadata": {"name": "p", "namespace": "ml", "uid": "u", "resourceVersion": "900"},
           "spec": {"nodeName": "a", "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
           "status": {"phase": "Running"}}
    inv.state.apply("Pod", {"type": "ADDED", "object": pod})
    tick()
    assert len(observed) == 2
    # Its GPUs taken out: the node changes, and its hysteresis runs on time alone (the node object stays the same).
    api.set_status("a", allocatable=0)
    inv.sync()
    tick()
    assert len(observed) == 3 and ctl.last_decision.nodes["a"].pending == "unhealthy"  # type: ignore[union-attr]
    tick(5.0)
    assert len(observed) == 4 and api.nodes["a"]["spec"]["taints"] == []
    tick(6.0)
    assert api.nodes["a"]["spec"]["taints"] == [OWN]
    assert [e["reason"] for e in api.events] == ["GPUUnhealthy"]
    inv.sync()
    tick()
    tick()
    settled = len(observed)
    tick()
    assert len(observed) == settled and ctl.last_decision.nodes["a"].health == "unhealthy"  # type: ignore[union-attr]
