"""The GPU health controller against a real API server: labels, taint and Events on a node whose
allocatable drops and recovers; two replicas where one acts and the other takes over when it dies;
opt-in eviction held back by a PodDisruptionBudget."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.e2e.harness import ApiError, ControlPlane
from webhook.config import Config, Controller, Remediation
from webhook.controller.controller import Controller as HealthController
from webhook.kube.client import api_client
from webhook.kube.nodecache import KubeInventory
from webhook.metrics import Metrics
from webhook.serve.server import run_controller
from webhook.serve.state import AppState

pytestmark = pytest.mark.e2e

TAINT = {"key": "vramgate.io/gpu-unhealthy", "effect": "NoSchedule"}
HEALTH = "vramgate.io/gpu-health"
MEMORY = "vramgate.io/gpu-memory-mib"
# Lease timings must be whole seconds (as in a Lease); short ones keep the takeover test short.
LEASE, RENEW, RETRY = 4, 3, 1


class Replica:
    """One controller replica as a process would run it: its own inventory watch and event loop (a thread)."""

    def __init__(self, config: Config, kubeconfig: str, identity: str) -> None:
        self.identity = identity
        self.metrics = Metrics()
        self.inventory = KubeInventory(config, kubeconfig=kubeconfig, metrics=self.metrics)
        self.controller = HealthController(
            config, api_client(kubeconfig), self.inventory, self.metrics, identity=identity
        )
        self.thread = threading.Thread(target=lambda: asyncio.run(self._main()), name=identity, daemon=True)
        self.error: BaseException | None = None

    async def _main(self) -> None:
        await self.inventory.start()
        try:
            await self.controller.run()
        except BaseException as exc:  # surfaced by the test
            self.error = exc
            raise
        finally:
            await self.inventory.stop()

    def start(self) -> Replica:
        self.thread.start()
        deadline = time.monotonic() + 10
        while self.controller._loop is None:  # run() has started: stop() can reach it
            assert time.monotonic() < deadline, "controller did not start"
            time.sleep(0.01)
        return self

    @property
    def leading(self) -> bool:
        return self.controller.is_leader

    def stop(self, release: bool = True) -> None:
        self.controller.stop(release=release)
        self.thread.join(timeout=20)
        assert not self.thread.is_alive(), f"{self.identity} did not stop"
        assert self.error is None, self.error

    def sample(self, metric: str, **labels: str) -> float:
        value = self.metrics.registry.get_sample_value(metric, labels)
        return 0.0 if value is None else value


@pytest.fixture
def lease_namespace(cluster: ControlPlane) -> Iterator[str]:
    """Where the controller keeps its Lease (vramgate's own namespace: never remediated)."""
    name = f"vg-ctl-{uuid.uuid4().hex[:8]}"
    cluster.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    cluster.request("DELETE", f"/api/v1/namespaces/{name}", ok=(200, 202, 404))


@pytest.fixture
def replicas(cluster: ControlPlane) -> Iterator[Callable[..., Replica]]:
    started: list[Replica] = []

    def start(config: Config, identity: str) -> Replica:
        r = Replica(config, str(cluster.kubeconfig), identity).start()
        started.append(r)
        return r

    yield start
    for r in started:
        if r.thread.is_alive():
            r.stop()


def controller_config(namespace: str, **kw: Any) -> Config:
    ctrl: dict[str, Any] = {
        "unhealthy_after_seconds": 1.0,
        "healthy_after_seconds": 2.0,
        "device_plugin_grace_seconds": 0.0,
        "lease_name": "vramgate-controller",
        "lease_duration_seconds": LEASE,
        "renew_deadline_seconds": RENEW,
        "retry_period_seconds": RETRY,
        "reconcile_interval_seconds": 0.2,
        **kw,
    }
    return Config(namespace=namespace, controller=Controller(**ctrl))


def node_state(cluster: ControlPlane, name: str) -> tuple[dict[str, str], list[dict[str, Any]]]:
    node = cluster.get_node(name)
    return node["metadata"].get("labels") or {}, node["spec"].get("taints") or []


def has_taint(taints: list[dict[str, Any]]) -> bool:
    return any(t.get("key") == TAINT["key"] and t.get("effect") == TAINT["effect"] for t in taints)


def node_events(cluster: ControlPlane, name: str) -> list[dict[str, Any]]:
    events = cluster.request(
        "GET",
        "/api/v1/namespaces/default/events",
        query={"fieldSelector": f"involvedObject.kind=Node,involvedObject.name={name}"},
    )
    return sorted(events["items"], key=lambda e: e["metadata"]["creationTimestamp"] + e["metadata"]["name"])


def lease(cluster: ControlPlane, namespace: str) -> dict[str, Any]:
    return cluster.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/vramgate-controller")


def test_node_losing_gpus_is_labelled_tainted_and_cleared(
    cluster: ControlPlane, gpu_nodes: Callable[..., Any], lease_namespace: str, replicas: Callable[..., Replica]
) -> None:
    name = "e2e-ctl-h100"
    dedicated = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
    gpu_nodes(name, gpus=8, mem_mib=81920, labels={"team": "ml"}, taints=[dedicated])
    r = replicas(controller_config(lease_namespace), "replica-a")

    labels, taints = cluster.wait_for(
        "labels on a healthy node",
        lambda: (s := node_state(cluster, name))[0].get(HEALTH) == "healthy" and s,
        timeout=30,
    )
    assert labels[MEMORY] == "81920" and labels["team"] == "ml"
    assert taints == [dedicated]
    assert node_events(cluster, name) == []  # labelling a healthy node is no transition
    assert r.sample("vramgate_node_gpus", node=name, state="healthy") == 8

    # 1 of 8 GPUs unhealthy: degraded, no taint.
    cluster.set_node_gpu_status(name, gpus=8, allocatable_gpus=7)
    t0 = time.monotonic()
    cluster.wait_for("degraded", lambda: node_state(cluster, name)[0].get(HEALTH) == "degraded", timeout=30)
    assert time.monotonic() - t0 >= 1.0  # unhealthy_after_seconds
    assert not has_taint(node_state(cluster, name)[1])

    # 6 of 8 unhealthy: past the threshold, tainted; the foreign taint stays.
    cluster.set_node_gpu_status(name, gpus=8, allocatable_gpus=2)
    t0 = time.monotonic()
    labels, taints = cluster.wait_for("taint", lambda: has_taint((s := node_state(cluster, name))[1]) and s, timeout=30)
    assert time.monotonic() - t0 >= 1.0
    assert labels[HEALTH] == "unhealthy" and dedicated in taints
    assert r.sample("vramgate_node_gpus", node=name, state="unhealthy") == 6
    assert r.sample("vramgate_nodes_by_health", health="unhealthy") >= 1
    assert r.sample("vramgate_controller_taints_total", action="added") == 1

    # Someone else adds a taint meanwhile; recovery must keep it.
    cluster.set_node_taints(name, [*taints, {"key": "maintenance", "value": "soon", "effect": "PreferNoSchedule"}])
    cluster.set_node_gpu_status(name, gpus=8, allocatable_gpus=8)
    t0 = time.monotonic()
    labels, taints = cluster.wait_for(
        "recovery", lambda: not has_taint((s := node_state(cluster, name))[1]) and s, timeout=30
    )
    assert time.monotonic() - t0 >= 2.0  # healthy_after_seconds
    assert labels[HEALTH] == "healthy" and labels[MEMORY] == "81920" and labels["team"] == "ml"
    assert [t["key"] for t in taints] == ["dedicated", "maintenance"]
    assert r.sample("vramgate_controller_taints_total", action="removed") == 1

    events = cluster.wait_for("three events", lambda: len(e := node_events(cluster, name)) >= 3 and e, timeout=15)
    assert [e["reason"] for e in events] == ["GPUDegraded", "GPUUnhealthy", "GPUHealthy"]
    assert [e["type"] for e in events] == ["Warning", "Warning", "Normal"]
    assert "6 of 8 GPUs unhealthy" in events[1]["message"]
    assert events[1]["involvedObject"]["uid"] == cluster.get_node(name)["metadata"]["uid"]
    assert {e["reportingInstance"] for e in events} == {"replica-a"}
    r.stop()
    assert lease(cluster, lease_namespace)["spec"]["holderIdentity"] == ""  # released on a clean stop


def test_one_replica_acts_and_another_takes_over_when_it_dies(
    cluster: ControlPlane, gpu_nodes: Callable[..., Any], lease_namespace: str, replicas: Callable[..., Replica]
) -> None:
    name = "e2e-ctl-failover"
    gpu_nodes(name, gpus=4, mem_mib=23034, product="NVIDIA-L4")
    config = controller_config(lease_namespace, unhealthy_after_seconds=0.0, healthy_after_seconds=0.0)
    a = replicas(config, "replica-a")
    cluster.wait_for("replica-a to lead", lambda: a.leading, timeout=15)
    b = replicas(config, "replica-b")
    cluster.wait_for("replica-a to label the node", lambda: node_state(cluster, name)[0].get(HEALTH) == "healthy")
    # b campaigns but waits: a holds the lease and renews it.
    for _ in range(int(3 * RETRY / 0.2)):
        assert a.leading and not b.leading
        time.sleep(0.2)
    spec = lease(cluster, lease_namespace)["spec"]
    assert spec["holderIdentity"] == "replica-a" and spec["leaseDurationSeconds"] == LEASE
    assert a.sample("vramgate_controller_leader") == 1 and b.sample("vramgate_controller_leader") == 0
    assert b.controller.reconciles == 0

    cluster.set_node_gpu_status(name, gpus=4, allocatable_gpus=0)
    cluster.wait_for("a's taint", lambda: has_taint(node_state(cluster, name)[1]), timeout=15)
    assert node_events(cluster, name)[-1]["reportingInstance"] == "replica-a"

    # a dies without releasing the lease: b takes over once it has expired, within the lease duration.
    a.stop(release=False)
    t0 = time.monotonic()
    assert lease(cluster, lease_namespace)["spec"]["holderIdentity"] == "replica-a"
    cluster.wait_for("replica-b to lead", lambda: b.leading, timeout=LEASE + 5, interval=0.05)
    took = time.monotonic() - t0
    assert took <= LEASE + 1.2 * RETRY + 0.5, f"takeover took {took:.1f}s"
    spec = lease(cluster, lease_namespace)["spec"]
    assert spec["holderIdentity"] == "replica-b" and spec["leaseTransitions"] == 1

    # b acts: the node recovers and b, starting from the node's labels, clears a's taint.
    cluster.set_node_gpu_status(name, gpus=4, allocatable_gpus=4)
    cluster.wait_for("b clears the taint", lambda: not has_taint(node_state(cluster, name)[1]), timeout=15)
    last = node_events(cluster, name)[-1]
    assert (last["reason"], last["reportingInstance"]) == ("GPUHealthy", "replica-b")
    assert b.sample("vramgate_controller_taints_total", action="removed") == 1
    assert b.sample("vramgate_controller_taints_total", action="added") == 0  # the taint was a's
    assert a.sample("vramgate_controller_leader") == 0 and b.sample("vramgate_controller_leader") == 1


def _gpu_pod(name: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "trainer"}},
        "spec": {
            "nodeName": node,  # bound directly: no kubelet will ever run it
            "containers": [
                {"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
            ],
        },
    }


def _set_running_and_ready(cluster: ControlPlane, namespace: str, name: str) -> None:
    """What a kubelet would report; the disruption controller counts only Ready pods as healthy."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    cluster.request(
        "PATCH",
        f"/api/v1/namespaces/{namespace}/pods/{name}/status",
        {
            "status": {
                "phase": "Running",
                "startTime": now,
                "conditions": [
                    {"type": "Ready", "status": "True", "lastTransitionTime": now},
                    {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
                ],
            }
        },
        content_type="application/strategic-merge-patch+json",
    )


def _pdb(cluster: ControlPlane, namespace: str) -> dict[str, Any]:
    return cluster.request("GET", f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets/trainer")


def test_eviction_respects_a_pod_disruption_budget(
    cluster: ControlPlane,
    gpu_nodes: Callable[..., Any],
    namespace: str,
    lease_namespace: str,
    replicas: Callable[..., Replica],
) -> None:
    node = "e2e-ctl-evict"
    gpu_nodes(node, gpus=4, allocatable_gpus=4)
    pods = ["trainer-0", "trainer-1"]
    try:
        for p in pods:
            cluster.request("POST", f"/api/v1/namespaces/{namespace}/pods", _gpu_pod(p, node))
            _set_running_and_ready(cluster, namespace, p)
        cluster.request(
            "POST",
            f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets",
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": "trainer"},
                "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "trainer"}}},
            },
        )
        cluster.wait_for(
            "the PDB to count both pods",
            lambda: (
                (s := _pdb(cluster, namespace).get("status", {})).get("currentHealthy") == 2
                and s.get("disruptionsAllowed") == 0
            ),
            timeout=30,
        )

        remediation = Remediation(
            enabled=True, max_evictions_per_minute=600, interval_seconds=0.5, blocked_retry_seconds=1.0
        )
        config = controller_config(lease_namespace, unhealthy_after_seconds=0.0, remediation=remediation)
        r = replicas(config, "replica-evict")
        cluster.set_node_gpu_status(node, gpus=4, allocatable_gpus=0)  # every GPU gone: unhealthy
        cluster.wait_for("taint", lambda: has_taint(node_state(cluster, node)[1]), timeout=15)

        # Both evictions are refused (429) and retried; the pods stay.
        cluster.wait_for(
            "blocked evictions, retried",
            lambda: r.sample("vramgate_controller_evictions_total", result="blocked") >= 4,
            timeout=20,
        )
        assert r.sample("vramgate_controller_evictions_total", result="evicted") == 0
        for p in pods:
            assert not cluster.get_pod(p, namespace)["metadata"].get("deletionTimestamp")

        # The budget allows one disruption: exactly one pod is evicted, the other is still held back.
        cluster.request(
            "PATCH",
            f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets/trainer",
            {"spec": {"minAvailable": 1}},
            content_type="application/merge-patch+json",
        )

        def terminating() -> list[str]:
            out = []
            for p in pods:
                try:
                    if cluster.get_pod(p, namespace)["metadata"].get("deletionTimestamp"):
                        out.append(p)
                except ApiError as exc:
                    if exc.status != 404:
                        raise
                    out.append(p)
            return out

        cluster.wait_for("one eviction", terminating, timeout=20)
        assert r.sample("vramgate_controller_evictions_total", result="evicted") == 1
        blocked = r.sample("vramgate_controller_evictions_total", result="blocked")
        cluster.wait_for(
            "the other pod to be tried again",
            lambda: r.sample("vramgate_controller_evictions_total", result="blocked") > blocked,
            timeout=20,
        )
        assert len(terminating()) == 1
        assert r.sample("vramgate_controller_evictions_total", result="evicted") == 1
    finally:
        for p in pods:  # no kubelet to finish the deletion: force it
            cluster.request(
                "DELETE", f"/api/v1/namespaces/{namespace}/pods/{p}", {"gracePeriodSeconds": 0}, ok=(200, 202, 404)
            )


def test_serve_task_cancelled_at_shutdown_releases_the_lease(cluster: ControlPlane, lease_namespace: str) -> None:
    """``run_controller`` as ``vramgate serve`` runs it: a task, cancelled at shutdown; the Lease is handed back."""
    config = controller_config(lease_namespace)

    async def scenario() -> float | None:
        state = AppState(config, KubeInventory(config, kubeconfig=str(cluster.kubeconfig)), role="controller")
        await state.inventory.start()
        try:
            task = asyncio.create_task(run_controller(state))
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 15
            while state.metrics.registry.get_sample_value("vramgate_controller_leader") != 1:
                assert loop.time() < deadline and not task.done()
                await asyncio.sleep(0.05)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            return state.metrics.registry.get_sample_value("vramgate_controller_leader")
        finally:
            await state.inventory.stop()

    assert asyncio.run(scenario()) == 0
    spec = lease(cluster, lease_namespace)["spec"]
    assert spec["holderIdentity"] == "" and spec["leaseDurationSeconds"] == 1
