"""The controller's audit against an in-memory API: reports written only when they change, one Event when a
workload turns from pass to fail (none again after a restart), unchanged workloads not re-judged."""

from __future__ import annotations

import copy
from typing import Any

from webhook.audit.auditor import EVENT_REASON, Auditor
from webhook.cluster.snapshot import snapshot_from_nodes
from webhook.config import Audit, Config
from webhook.kube.apiserver import ApiError
from webhook.metrics import Metrics
from webhook.models.catalog import builtin_catalog

from ..unit.helpers import container, deployment, gpu_node

REPORTS = "/apis/wgpolicyk8s.io/v1alpha2"


class WorkloadApi:
    """Lists of workloads by path, PolicyReports (create, replace, delete, list), Events."""

    def __init__(self, *objs: dict[str, Any], crd: bool = True) -> None:
        self.rv = 0
        self.deployments: list[dict[str, Any]] = []
        for o in objs:
            self.add(o)
        self.reports: dict[str, dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []
        self.writes: list[tuple[str, str]] = []
        self.crd = crd

    def add(self, obj: dict[str, Any]) -> None:
        self.rv += 1
        obj = copy.deepcopy(obj)
        obj["metadata"]["uid"] = f"uid-{obj['metadata']['name']}"
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.deployments = [d for d in self.deployments if d["metadata"]["name"] != obj["metadata"]["name"]]
        self.deployments.append(obj)

    def get(self, path: str, query: dict[str, str] | None = None) -> Any:
        if path == "/apis/apps/v1/deployments":
            return {"items": [{k: v for k, v in d.items() if k not in ("kind", "apiVersion")}
                              for d in self.deployments]}
        if path == f"{REPORTS}/policyreports":
            if not self.crd:
                raise ApiError(404, "the server could not find the requested resource")
            return {"items": copy.deepcopy(list(self.reports.values()))}
        if path.startswith(("/api/v1", "/apis/apps/v1", "/apis/batch/v1")):
            return {"items": []}
        raise ApiError(404, "not found")

    def request(self, method: str, path: str, body: Any = None, **_: Any) -> Any:
        if path.endswith("/events"):
            self.events.append(body)
            return body
        self.writes.append((method, path))
        ns = path.split("/namespaces/")[1].split("/")[0]
        if method == "DELETE":
            self.reports.pop(ns)
            return None
        self.rv += 1
        stored = copy.deepcopy(body)
        stored["metadata"]["resourceVersion"] = str(self.rv)
        self.reports[ns] = stored
        return stored


CFG = Config(audit=Audit(min_interval_seconds=0))
SMALL = container(env={"MODEL_NAME": "llama-3-8b-instruct"})


def auditor(api: WorkloadApi, metrics: Metrics | None = None) -> Auditor:
    return Auditor(CFG, api, builtin_catalog(), metrics or Metrics(), identity="test",  # type: ignore[arg-type]
                   clock=lambda: 0.0, wallclock=lambda: 1_700_000_000.0)


def test_reports_events_and_no_churn() -> None:
    big = snapshot_from_nodes([gpu_node("a100")], CFG)
    small = snapshot_from_nodes([gpu_node("t4", gpus=1, mem=16384)], CFG)
    api = WorkloadApi(deployment(SMALL, name="llama"))
    metrics = Metrics()
    a = auditor(api, metrics)
    assert a.due(big) == "inventory"
    a.run_pass(big)
    assert api.writes == [("POST", f"{REPORTS}/namespaces/ml/policyreports")]
    assert api.reports["ml"]["summary"]["pass"] == 1 and api.reports["ml"]["results"] == []
    assert a.due(big) is None  # nothing changed, the period is not up
    a.run_pass(big, "period")
    assert len(api.writes) == 1  # unchanged: not rewritten
    judged = metrics.registry.get_sample_value("vramgate_audit_judged_total")
    assert judged == 1  # and not re-judged either

    # The only big node goes: fail, one Event, the report rewritten.
    assert a.due(small) == "inventory"
    a.run_pass(small, "inventory")
    report = api.reports["ml"]
    assert report["summary"]["fail"] == 1 and report["results"][0]["rule"] == "VRAMTooSmall"
    assert api.writes[-1] == ("PUT", f"{REPORTS}/namespaces/ml/policyreports/vramgate")
    assert [e["reason"] for e in api.events] == [EVENT_REASON]
    event = api.events[0]
    assert event["type"] == "Warning" and event["involvedObject"]["name"] == "llama"
    assert event["involvedObject"]["kind"] == "Deployment" and event["metadata"]["namespace"] == "ml"
    a.run_pass(small, "period")
    assert len(api.events) == 1 and len(api.writes) == 2  # still failing: no new Event, no write
    assert metrics.registry.get_sample_value("vramgate_audit_workloads", {"result": "fail"}) == 1

    # A new leader reads the reports: what they list as failing already had its Event.
    b = auditor(api)
    b.run_pass(small)
    assert len(api.events) == 1

    # Back to pass; then the Deployment is deleted: its namespace's report is emptied (once).
    a.run_pass(big, "inventory")
    assert api.reports["ml"]["summary"] == {"pass": 1, "fail": 0, "warn": 0, "error": 0, "skip": 0}
    api.deployments.clear()
    a.run_pass(big, "period")
    assert api.reports["ml"]["summary"]["pass"] == 0 and api.writes[-1][0] == "PUT"
    writes = len(api.writes)
    a.run_pass(big, "period")
    assert len(api.writes) == writes


def test_only_changed_workloads_are_rejudged() -> None:
    snap = snapshot_from_nodes([gpu_node("a100")], CFG)
    api = WorkloadApi(*(deployment(SMALL, name=f"d{i}") for i in range(20)))
    metrics = Metrics()
    a = auditor(api, metrics)
    a.run_pass(snap)
    assert metrics.registry.get_sample_value("vramgate_audit_judged_total") == 20
    api.add(deployment(container(env={"MODEL_NAME": "llama-3-70b-instruct"}), name="d3"))
    a.run_pass(snap)
    assert metrics.registry.get_sample_value("vramgate_audit_judged_total") == 21
    assert api.reports["ml"]["summary"]["fail"] == 1
    # Free GPUs changing is not an inventory change that matters.
    busy = snapshot_from_nodes([gpu_node("a100")], CFG, used={"a100": 5})
    assert a.due(busy) is None


def test_report_capped_with_many_failures() -> None:
    snap = snapshot_from_nodes([gpu_node("t4", gpus=1, mem=16384)], CFG)
    cfg = Config(audit=Audit(max_results_per_report=5))
    api = WorkloadApi(*(deployment(SMALL, name=f"d{i:02}") for i in range(30)))
    a = Auditor(cfg, api, builtin_catalog(), identity="t")  # type: ignore[arg-type]
    a.run_pass(snap)
    report = api.reports["ml"]
    assert len(report["results"]) == 5 and report["summary"]["fail"] == 30
    assert report["metadata"]["annotations"]["vramgate.io/results-truncated"] == "25"
    assert len(api.events) == 30  # each turned to fail once


def test_without_the_report_crd_the_audit_still_runs() -> None:
    snap = snapshot_from_nodes([gpu_node("t4", gpus=1, mem=16384)], CFG)
    api = WorkloadApi(deployment(SMALL, name="d"), crd=False)
    metrics = Metrics()
    results = auditor(api, metrics).run_pass(snap)
    assert [r.result for r in results] == ["fail"] and api.writes == []
    assert metrics.registry.get_sample_value("vramgate_audit_passes_total", {"trigger": "period"}) == 1


def test_the_inventory_fingerprint_is_derived_once_per_node_revision(monkeypatch: Any) -> None:
    import dataclasses

    import webhook.audit.auditor as auditor_module

    calls: list[int] = []
    real = auditor_module.capabilities

    def counted(snapshot: Any) -> Any:
        calls.append(snapshot.nodes_revision)
        return real(snapshot)

    monkeypatch.setattr(auditor_module, "capabilities", counted)
    live = dataclasses.replace(snapshot_from_nodes([gpu_node("a100")], CFG), nodes_revision=3)
    a = auditor(WorkloadApi(deployment(SMALL, name="llama")))
    assert a.due(live) == "inventory"
    a.run_pass(live)
    # Pod churn publishes new snapshots with the same node revision: no O(nodes) fingerprint for them.
    churned = dataclasses.replace(live, free={"a100": 2}, revision=live.revision + 1)
    assert a.due(churned) is None and a.due(churned) is None
    assert calls == [3]
    relabelled = dataclasses.replace(snapshot_from_nodes([gpu_node("a100", labels={"team": "x"})], CFG),
                                     nodes_revision=4)
    assert a.due(relabelled) == "inventory" and calls == [3, 4]
    fixed = snapshot_from_nodes([gpu_node("a100")], CFG)  # revision 0 (a fixed inventory): always derived
    a.due(fixed)
    a.due(fixed)
    assert calls == [3, 4, 0, 0]
