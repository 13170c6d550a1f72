"""The chart's RBAC, cut to the verbs the code calls, is enough: each role run under its own ServiceAccount's token,
with only the chart's Roles and ClusterRoles bound, does its whole job through a real kube-apiserver and is never
refused (no 403 in its log).

- the controller (its ClusterRole and Lease Role): takes the Lease, labels a GPU node, taints it and records the Events
  with the node's UID when its GPUs go, lists what already runs, records the audit's Event on a workload that fits
  nowhere and writes its PolicyReport, and releases the Lease;
- the extender (the ClusterRole the chart binds to the scheduler sidecar's ServiceAccount) and the webhook: their
  inventories sync, every kind listed and watched (an optional kind refused would be logged, not fatal).

The webhook's access reviews run so in tests/e2e/test_metrics_auth.py. tests/chart/test_rbac_matches_code.py holds
the grants to the calls; this holds the calls to the API server's answer.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart.render import find, one, render_chart
from tests.e2e.harness import ControlPlane
from tests.e2e.test_audit import BIG_MODEL, audit_events, deployment, report, report_crd
from tests.e2e.test_controller import Replica, has_taint, node_events, node_state
from tests.e2e.test_metrics_auth import service_account_token, token_kubeconfig
from tests.e2e.vramgate_fixture import NAMESPACE, Vramgate
from webhook.config import Config, load_config
from webhook.controller.controller import Controller as HealthController
from webhook.kube.client import api_client
from webhook.kube.nodecache import KubeInventory
from webhook.serve.server import build_inventory

pytestmark = pytest.mark.e2e

__all__ = ["report_crd"]  # a fixture, used by name

HEALTH = "vramgate.io/gpu-health"


class ServedReplica(Replica):
    """A controller replica whose inventory is built as ``vramgate serve --role controller`` builds it (no
    PriorityClasses, no NodePools: serve/server.py's build_inventory), so it asks for what the real one asks."""

    def __init__(self, config: Config, kubeconfig: str, identity: str) -> None:
        super().__init__(config, kubeconfig, identity)
        args = argparse.Namespace(role="controller", kubeconfig=kubeconfig, nodes=None)
        inventory = build_inventory(args, config, self.metrics)
        assert isinstance(inventory, KubeInventory)
        self.inventory = inventory
        self.controller = HealthController(config, api_client(kubeconfig), inventory, self.metrics, identity=identity)


def _rbac_for(chart: list[dict[str, Any]], service_account: str, roles: tuple[str, ...]) -> list[dict[str, Any]]:
    """The ServiceAccount and the chart's roles named, with their bindings."""
    out = [one(chart, "ServiceAccount", service_account)]
    for kind in ("Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"):
        out += [o for o in find(chart, kind) if o["metadata"]["name"] in roles]
    return out


@pytest.fixture
def apply_rbac(cluster: ControlPlane) -> Iterator[Callable[[list[dict[str, Any]]], None]]:
    """``kubectl apply`` of RBAC objects; the cluster-scoped ones are deleted afterwards."""
    cluster.fresh_namespace(NAMESPACE)
    made: list[dict[str, Any]] = []

    def apply(objects: list[dict[str, Any]]) -> None:
        cluster.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
        made.extend(objects)

    yield apply
    for o in made:
        if o["kind"] in ("ClusterRole", "ClusterRoleBinding"):
            cluster.kubectl("delete", o["kind"].lower(), o["metadata"]["name"], "--ignore-not-found", "--wait=false")


REFUSED = re.compile(r"\b403\b|forbidden", re.IGNORECASE)


# Not RBAC: the NamespaceLifecycle admission plugin's 403 for writes into a namespace being deleted (an earlier
# module's test namespace, whose workloads the audit still lists while it terminates).
TERMINATING = "because it is being terminated"


def _refusals(lines: list[str]) -> list[str]:
    return [line for line in lines if REFUSED.search(line) and TERMINATING not in line]


def test_the_controller_does_its_job_on_the_charts_rbac_alone(
    cluster: ControlPlane, namespace: str, gpu_nodes: Callable[..., Any], report_crd: str, tmp_path: Path,
    apply_rbac: Callable[[list[dict[str, Any]]], None], caplog: pytest.LogCaptureFixture,
) -> None:
    chart = render_chart({})  # the defaults: controller on, audit on with PolicyReports, remediation off
    apply_rbac(_rbac_for(chart, "vramgate-controller",
                         ("vramgate-controller", "vramgate-controller-leader-election")))
    token = service_account_token(cluster, NAMESPACE, "vramgate-controller")
    kubeconfig = token_kubeconfig(cluster, tmp_path / "controller.kubeconfig", token)
    # The chart's own config (namespace, Lease name, audit), with a test's short timings.
    config = yaml.safe_load(one(chart, "ConfigMap", "vramgate-config")["data"]["config.yaml"])
    config["controller"] = {**config.get("controller", {}), "lease_duration_seconds": 4, "renew_deadline_seconds": 3,
                            "retry_period_seconds": 1, "reconcile_interval_seconds": 0.2,
                            "unhealthy_after_seconds": 0.5, "healthy_after_seconds": 0.5}
    config["audit"] = {**config.get("audit", {}), "interval_seconds": 1.0, "min_interval_seconds": 0.0}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    name = f"e2e-rbac-{uuid.uuid4().hex[:6]}"
    gpu_nodes(name, gpus=2, mem_mib=16384, product="Tesla-T4")
    deployment(cluster, namespace, "fits-nowhere", BIG_MODEL)

    caplog.set_level(logging.INFO, logger="vramgate")
    identity = f"rbac-{uuid.uuid4().hex[:6]}"
    r = ServedReplica(load_config(path), str(kubeconfig), identity).start()
    try:
        lease_path = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{config['controller']['lease_name']}"
        cluster.wait_for("the Lease", lambda: cluster.request("GET", lease_path)["spec"].get("holderIdentity")
                         == identity, timeout=30)
        cluster.wait_for("labels", lambda: node_state(cluster, name)[0].get(HEALTH) == "healthy", timeout=30)
        cluster.set_node_gpu_status(name, gpus=2, allocatable_gpus=0)
        cluster.wait_for("the taint", lambda: has_taint(node_state(cluster, name)[1]), timeout=30)
        events = cluster.wait_for("the node's Event", lambda: node_events(cluster, name), timeout=15)
        assert events[-1]["involvedObject"].get("uid") == cluster.get_node(name)["metadata"]["uid"]
        cluster.wait_for("the audit's Event", lambda: audit_events(cluster, namespace, "fits-nowhere"), timeout=30)
        cluster.wait_for("the PolicyReport", lambda: report(cluster, namespace), timeout=30)
    finally:
        r.stop()
    assert cluster.request("GET", lease_path)["spec"].get("holderIdentity") == ""  # released: an update
    cluster.request("DELETE", lease_path, ok=(200, 404))
    refused = _refusals([rec.getMessage() for rec in caplog.records])
    assert not refused, refused
    print(f"\ncontroller as vramgate-controller: Lease, labels, taint, {len(events)} node Event(s), the audit's "
          f"Event and PolicyReport; {len(caplog.records)} log records, none refused")


@pytest.mark.parametrize(("role", "service_account", "roles"), [
    # kube-scheduler's sidecar runs as the scheduler's ServiceAccount, bound to the extender's ClusterRole.
    ("extender", "vramgate-scheduler", ("vramgate-extender",)),
    # The webhook's inventory also lists PriorityClasses and NodePools (the tiers, Karpenter).
    ("webhook", "vramgate-webhook", ("vramgate-webhook",)),
])
def test_the_inventory_syncs_on_the_charts_rbac_alone(
    cluster: ControlPlane, tmp_path: Path, apply_rbac: Callable[[list[dict[str, Any]]], None], role: str,
    service_account: str, roles: tuple[str, ...],
) -> None:
    gate = Vramgate(cluster, role=role)
    apply_rbac(_rbac_for(gate.chart, service_account, roles))
    token = service_account_token(cluster, NAMESPACE, service_account)
    gate.kubeconfig = token_kubeconfig(cluster, tmp_path / f"{role}.kubeconfig", token)
    since = gate.log.stat().st_size if gate.log.exists() else 0  # the log is appended to across a session
    gate.start(timeout=60)  # /readyz 200: every kind of its inventory listed and watched
    try:
        status, body = gate.get("/inventory")
        assert status == 200, body
    finally:
        gate.stop()
    refused = _refusals(gate.log.read_bytes()[since:].decode("utf-8", "replace").splitlines())
    assert not refused, refused
