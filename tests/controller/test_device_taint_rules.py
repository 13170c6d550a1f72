"""Opt-in DeviceTaintRules (controller.device_taint_rules): an unhealthy node's DRA devices are tainted per
pool while vramgate's node taint is on, and the rules go when it comes off (or were left by an earlier leader)."""

from __future__ import annotations

import copy
from typing import Any

from webhook.cluster.dra import device_taint_rules, devices_by_node
from webhook.cluster.snapshot import snapshot_from_nodes
from webhook.config import Config, Controller
from webhook.controller.controller import DEVICE_TAINT_RULES
from webhook.controller.controller import Controller as HealthController
from webhook.kube.apiserver import ApiError

from ..unit.helpers import gpu_node
from .test_reconcile import Clock, MemoryApi, reconcile

SLICE = {"kind": "ResourceSlice", "metadata": {"name": "a-gpu"}, "spec": {
    "driver": "gpu.nvidia.com", "nodeName": "a", "pool": {"name": "a", "generation": 1, "resourceSliceCount": 1},
    "devices": [{"name": "gpu-0", "attributes": {"type": {"string": "gpu"}},
                 "capacity": {"memory": {"value": "80Gi"}}}]}}


class RulesApi(MemoryApi):
    """MemoryApi plus DeviceTaintRules (create, get, list, put, delete)."""

    def __init__(self, *nodes: dict[str, Any]) -> None:
        super().__init__(*nodes)
        self.rules: dict[str, dict[str, Any]] = {}

    def get(self, path: str, query: dict[str, str] | None = None) -> Any:
        if path == DEVICE_TAINT_RULES:
            return {"items": [copy.deepcopy(r) for r in self.rules.values()]}
        if path.startswith(DEVICE_TAINT_RULES + "/"):
            return copy.deepcopy(self.rules[path.rsplit("/", 1)[1]])
        return super().get(path, query)

    def request(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        if not path.startswith(DEVICE_TAINT_RULES):
            return super().request(method, path, body, **kw)
        self._check()
        if method == "POST":
            name = body["metadata"]["name"]
            if name in self.rules:
                raise ApiError(409, "exists")
            self.rules[name] = {**body, "metadata": {**body["metadata"], "resourceVersion": "1"}}
            return body
        name = path.rsplit("/", 1)[1]
        if method == "DELETE":
            if self.rules.pop(name, None) is None:
                raise ApiError(404, "not found")
            return None
        raise AssertionError(method)


class DraInventory:
    def __init__(self, api: MemoryApi, config: Config) -> None:
        self.api, self.config = api, config
        self.sync()

    def sync(self) -> None:
        self.snap = snapshot_from_nodes(copy.deepcopy(list(self.api.nodes.values())), self.config, dra=[SLICE])

    def snapshot(self) -> Any:
        return self.snap

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


def _setup(enabled: bool = True) -> tuple[HealthController, RulesApi, DraInventory, Clock]:
    config = Config(controller=Controller(unhealthy_after_seconds=0, healthy_after_seconds=0,
                                          device_taint_rules=enabled))
    api = RulesApi(gpu_node("a"))
    inv = DraInventory(api, config)
    clock = Clock()
    ctl = HealthController(config, api_client=None, inventory=inv, clock=clock, identity="test-1")
    ctl.api = api  # type: ignore[assignment]
    return ctl, api, inv, clock


def test_rule_shape() -> None:
    devices = devices_by_node([SLICE], ["gpu.nvidia.com"])["a"]
    (rule,) = device_taint_rules("a", devices, "vramgate.io/gpu-unhealthy", "0 of 8 GPUs allocatable")
    assert rule["apiVersion"] == "resource.k8s.io/v1" and rule["kind"] == "DeviceTaintRule"
    assert rule["metadata"]["name"] == "vramgate-gpu-unhealthy-a"
    assert rule["metadata"]["annotations"]["vramgate.io/node"] == "a"
    assert rule["spec"] == {"deviceSelector": {"driver": "gpu.nvidia.com", "pool": "a"},
                            "taint": {"key": "vramgate.io/gpu-unhealthy", "value": "true", "effect": "NoSchedule"}}


def test_rules_follow_the_node_taint() -> None:
    ctl, api, inv, clock = _setup()
    reconcile(ctl, inv, clock)
    assert api.rules == {}
    api.set_status("a", allocatable=0)
    inv.sync()
    clock.now += 1
    reconcile(ctl, inv, clock)
    assert list(api.rules) == ["vramgate-gpu-unhealthy-a"]
    clock.now += 1
    reconcile(ctl, inv, clock)  # unchanged: no second create
    assert len(api.rules) == 1
    api.set_status("a")
    inv.sync()
    clock.now += 1
    reconcile(ctl, inv, clock)
    assert api.rules == {}


def test_a_new_leader_removes_rules_of_healthy_nodes() -> None:
    ctl, api, inv, clock = _setup()
    (stale,) = device_taint_rules("a", inv.snap.nodes["a"].dra, "vramgate.io/gpu-unhealthy", "earlier")
    api.rules[stale["metadata"]["name"]] = stale
    reconcile(ctl, inv, clock)
    assert api.rules == {}


def test_off_by_default() -> None:
    ctl, api, inv, clock = _setup(enabled=False)
    api.set_status("a", allocatable=0)
    inv.sync()
    reconcile(ctl, inv, clock)
    assert api.rules == {} and api.nodes["a"]["spec"]["taints"]
