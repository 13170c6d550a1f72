"""Which pods remediation evicts, the cluster-wide rate limit, dry run, and PDB-blocked evictions."""

from __future__ import annotations

import asyncio
from typing import Any

from webhook.cluster.snapshot import StaticInventory
from webhook.config import Admission, Config, Controller, Remediation
from webhook.controller.controller import Controller as HealthController
from webhook.controller.health import Decision, NodeDecision
from webhook.controller.remediation import TokenBucket, eviction_body, select_evictions, unhealthy_devices
from webhook.kube.apiserver import ApiError

CFG = Config(namespace="vramgate", admission=Admission(excluded_namespaces=["kube-system", "infra"]))


def gpu_pod(name: str, node: str | None = "bad", *, ns: str = "ml", gpus: int = 1, phase: str = "Running",
            uid: str | None = None, **meta: Any) -> dict[str, Any]:
    res = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {"requests": {"cpu": "1"}}
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "x", "resources": res}]}
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {"name": name, "namespace": ns, "uid": uid or f"uid-{name}", **meta},
        "spec": spec,
        "status": {"phase": phase},
    }


def device_status(pod: dict[str, Any], health: str, resource: str = "nvidia.com/gpu") -> dict[str, Any]:
    pod["status"]["containerStatuses"] = [{
        "name": "c",
        "allocatedResourcesStatus": [{"name": resource, "resources": [{"resourceID": "GPU-abc", "health": health}]}],
    }]
    return pod


def names(cands: Any) -> list[str]:
    return [f"{c.namespace}/{c.name}" for c in cands]


def test_selects_gpu_pods_on_unhealthy_nodes_only() -> None:
    pods = [
        gpu_pod("a"),
        gpu_pod("cpu-only", gpus=0),
        gpu_pod("done", phase="Succeeded"),
        gpu_pod("failed", phase="Failed"),
        gpu_pod("pending", node=None, phase="Pending"),
        gpu_pod("elsewhere", node="good"),
        gpu_pod("system", ns="kube-system"),
        gpu_pod("infra", ns="infra"),
        gpu_pod("ours", ns="vramgate"),
        gpu_pod("leaving", deletionTimestamp="2024-01-01T00:00:00Z"),
        gpu_pod("ds", ownerReferences=[{"kind": "DaemonSet", "name": "dcgm", "apiVersion": "apps/v1", "uid": "x"}]),
        gpu_pod("static", annotations={"kubernetes.io/config.mirror": "abc"}),
        gpu_pod("rs", ownerReferences=[{"kind": "ReplicaSet", "name": "r", "apiVersion": "apps/v1", "uid": "y"}]),
    ]
    cands = select_evictions(pods, {"bad"}, CFG)
    assert names(cands) == ["ml/a", "ml/rs"]
    assert cands[0].reason == "node bad has unhealthy GPUs" and cands[0].uid == "uid-a"
    assert select_evictions(pods, set(), CFG) == []


def test_selects_pods_reporting_an_unhealthy_gpu_first() -> None:
    pods = [
        gpu_pod("on-bad-node"),
        device_status(gpu_pod("broken-gpu", node="good"), "Unhealthy"),
        device_status(gpu_pod("fine-gpu", node="good"), "Healthy"),
        device_status(gpu_pod("unknown", node="good"), "Unknown"),
        device_status(gpu_pod("other-resource", node="good"), "Unhealthy", resource="example.com/fpga"),
        device_status(gpu_pod("excluded", node="good", ns="kube-system"), "Unhealthy"),
    ]
    cands = select_evictions(pods, {"bad"}, CFG)
    assert names(cands) == ["ml/broken-gpu", "ml/on-bad-node"]
    assert "GPU-abc" in cands[0].reason and "allocatedResourcesStatus" in cands[0].reason
    assert unhealthy_devices(pods[1]) == ["GPU-abc"] and unhealthy_devices(pods[2]) == []


def test_token_bucket() -> None:
    bucket = TokenBucket(2.0, now=0.0)  # 2 a minute, burst 2
    assert bucket.take(0.0) and bucket.take(0.0) and not bucket.take(0.0)
    assert not bucket.take(29.0)
    assert bucket.take(30.0) and not bucket.take(30.0)
    bucket.give_back()
    assert bucket.take(30.0)
    assert bucket.take(1000.0) and bucket.take(1000.0) and not bucket.take(1000.0)  # never above burst
    slow = TokenBucket(0.5, now=0.0)  # burst at least 1
    assert slow.take(0.0) and not slow.take(60.0) and slow.take(120.0)


def test_eviction_body_has_uid_precondition() -> None:
    (cand,) = select_evictions([gpu_pod("a")], {"bad"}, CFG)
    assert eviction_body(cand) == {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "a", "namespace": "ml"},
        "deleteOptions": {"preconditions": {"uid": "uid-a"}},
    }


# ---- the controller's remediation pass, with the API replaced by a recorder ---------------------------


class RecordingApi:
    """Stands in for RawApi: serves a pod list and answers evictions (429 for pods named in ``blocked``)."""

    def __init__(self, pods: list[dict[str, Any]], blocked: set[str] | None = None) -> None:
        self.pods, self.blocked = pods, blocked or set()
        self.evictions: list[str] = []
        self.queries: list[dict[str, str] | None] = []

    def get(self, path: str, query: dict[str, str] | None = None) -> Any:
        assert path == "/api/v1/pods"
        self.queries.append(query)
        return {"items": self.pods}

    def request(self, method: str, path: str, body: Any = None, **_: Any) -> Any:
        assert method == "POST" and path.endswith("/eviction")
        name = body["metadata"]["name"]
        self.evictions.append(name)
        if name in self.blocked:
            raise ApiError(429, "Cannot evict pod as it would violate the pod's disruption budget.")
        return {}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def controller(rate: float = 2.0, dry_run: bool = False, blocked_retry: float = 30.0) -> tuple[HealthController, Clock]:
    config = CFG.model_copy(update={"controller": Controller(remediation=Remediation(
        enabled=True, dry_run=dry_run, max_evictions_per_minute=rate, blocked_retry_seconds=blocked_retry))})
    clock = Clock()
    ctl = HealthController(config, api_client=None, inventory=StaticInventory([], config), clock=clock)
    return ctl, clock


def remediate(ctl: HealthController, clock: Clock, *unhealthy: str) -> None:
    ctl.elector._leading, ctl.elector.renewed_at = True, clock.now  # act as the leader, just renewed
    asyncio.run(ctl.remediate(decision(*unhealthy), clock.now))


def decision(*unhealthy: str) -> Decision:
    return Decision(nodes={n: NodeDecision(name=n, health="unhealthy", reason="r", observed="unhealthy",
                                           observed_reason="r") for n in unhealthy})


def evictions(ctl: HealthController) -> dict[str, float]:
    return {s.labels["result"]: s.value for m in ctl.metrics.evictions.collect() for s in m.samples
            if s.name.endswith("_total")}


def test_rate_limit_holds_across_passes() -> None:
    ctl, clock = controller(rate=2.0)
    api = RecordingApi([gpu_pod(f"p{i}") for i in range(5)])
    ctl.api = api  # type: ignore[assignment]
    remediate(ctl, clock, "bad")
    assert api.evictions == ["p0", "p1"]
    assert api.queries == [{"fieldSelector": "status.phase!=Succeeded,status.phase!=Failed", "resourceVersion": "0"}]
    clock.now += 30  # one more token
    remediate(ctl, clock, "bad")
    assert api.evictions == ["p0", "p1", "p2"]
    assert evictions(ctl) == {"evicted": 3.0}


def test_dry_run_only_counts_and_does_not_repeat() -> None:
    ctl, clock = controller(rate=10.0, dry_run=True)
    api = RecordingApi([gpu_pod("a"), gpu_pod("b")])
    ctl.api = api  # type: ignore[assignment]
    remediate(ctl, clock, "bad")
    clock.now += 10
    remediate(ctl, clock, "bad")
    assert api.evictions == []
    assert evictions(ctl) == {"dry_run": 2.0}


def test_blocked_eviction_is_counted_retried_later_and_costs_no_token() -> None:
    ctl, clock = controller(rate=2.0, blocked_retry=30.0)
    api = RecordingApi([gpu_pod("a"), gpu_pod("b")], blocked={"a"})
    ctl.api = api  # type: ignore[assignment]
    remediate(ctl, clock, "bad")
    assert api.evictions == ["a", "b"]
    assert ctl.bucket.tokens == 1.0  # the blocked eviction gave its token back
    assert evictions(ctl) == {"blocked": 1.0, "evicted": 1.0}
    clock.now += 10
    remediate(ctl, clock, "bad")
    assert api.evictions == ["a", "b"]  # a waits for blocked_retry_seconds; b waits to be gone
    clock.now += 30
    api.blocked.clear()
    remediate(ctl, clock, "bad")
    assert api.evictions == ["a", "b", "a"]
    assert evictions(ctl) == {"blocked": 1.0, "evicted": 2.0}


def test_follower_never_evicts() -> None:
    ctl, clock = controller()
    api = RecordingApi([gpu_pod("a")])
    ctl.api = api  # type: ignore[assignment]
    asyncio.run(ctl.remediate(decision("bad"), clock.now))  # never won the Lease
    ctl.elector._leading, ctl.elector.renewed_at = True, clock.now - 11  # renewal older than renew_deadline
    asyncio.run(ctl.remediate(decision("bad"), clock.now))
    assert api.evictions == []
