"""The background audit's I/O: list what runs, judge it (:mod:`webhook.audit.audit`), write reports, Events, metrics.

Runs in the leader-elected controller (:class:`webhook.controller.controller.Controller`), one blocking pass at a
time in a thread. A pass is due when the inventory changes in a way that can change a verdict (a GPU
node added, removed, relabelled, its health, driver or GPUs: :func:`webhook.audit.audit.capabilities`), or
when ``audit.interval_seconds`` has passed. Workloads are listed from the API server's watch cache
(``resourceVersion=0``); one whose resourceVersion and namespace mode did not change since it was last
judged against the same inventory keeps its verdict, so a pass costs what changed. `vramgate audit`
uses :func:`list_workloads` for its one pass from a laptop.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from ..cluster.snapshot import Snapshot
from ..config import Config
from ..kinds import ATTACHED_KINDS, RUNTIME_KINDS, Runtimes
from ..kube.apiserver import ApiError, RawApi
from ..kube.events import event_body as new_event
from ..metrics import Metrics
from ..models.catalog import Catalog
from .audit import AuditResult, Result, audit_one, capabilities, counts, workload_ref, workloads
from .reports import APIS, MANAGED_BY, REPORT_NAME, ReportApi, by_namespace, desired_report, failing_in

log = logging.getLogger("vramgate.audit")

COMPONENT = "vramgate-audit"
RETRY_SECONDS = 10.0  # after a failed pass
EVENT_REASON = "VRAMGateAuditFailed"

# (group/version path, plural, kind, namespaced): every kind admission judges, and the runtimes they name.
BUILTIN = (
    ("/api/v1", "pods", "Pod", True),
    ("/apis/apps/v1", "deployments", "Deployment", True),
    ("/apis/apps/v1", "statefulsets", "StatefulSet", True),
    ("/apis/apps/v1", "replicasets", "ReplicaSet", True),
    ("/apis/apps/v1", "daemonsets", "DaemonSet", True),
    ("/apis/batch/v1", "jobs", "Job", True),
    ("/apis/batch/v1", "cronjobs", "CronJob", True),
    ("/api/v1", "replicationcontrollers", "ReplicationController", True),
)
CUSTOM = (
    ("/apis/leaderworkerset.x-k8s.io/v1", "leaderworkersets", "LeaderWorkerSet", True),
    ("/apis/serving.kserve.io/v1beta1", "inferenceservices", "InferenceService", True),
    ("/apis/serving.kserve.io/v1alpha1", "llminferenceservices", "LLMInferenceService", True),
    ("/apis/serving.kserve.io/v1alpha1", "servingruntimes", "ServingRuntime", True),
    ("/apis/serving.kserve.io/v1alpha1", "clusterservingruntimes", "ClusterServingRuntime", False),
    ("/apis/ray.io/v1", "rayclusters", "RayCluster", True),
    ("/apis/ray.io/v1", "rayjobs", "RayJob", True),
    ("/apis/ray.io/v1", "rayservices", "RayService", True),
    ("/apis/trainer.kubeflow.org/v1alpha1", "trainjobs", "TrainJob", True),
    ("/apis/trainer.kubeflow.org/v1alpha1", "trainingruntimes", "TrainingRuntime", True),
    ("/apis/trainer.kubeflow.org/v1alpha1", "clustertrainingruntimes", "ClusterTrainingRuntime", False),
    ("/apis/kubeflow.org/v1", "pytorchjobs", "PyTorchJob", True),
    ("/apis/jobset.x-k8s.io/v1alpha2", "jobsets", "JobSet", True),
    ("/apis/kubeai.org/v1", "models", "Model", True),
)
POD_SELECTOR = "status.phase!=Succeeded,status.phase!=Failed"


def _items(data: Any, api_version: str, kind: str) -> list[dict[str, Any]]:
    """A list's items with apiVersion and kind set (list responses leave them out of each item)."""
    out = []
    for item in (data or {}).get("items") or []:
        if isinstance(item, dict):
            out.append({"apiVersion": api_version, "kind": kind, **item})
    return out


def list_workloads(api: RawApi, namespace: str | None = None, *, cached: bool = True) -> list[dict[str, Any]]:
    """Every object of the kinds vramgate judges (and the runtimes they refer to), in one namespace or all.

    A custom resource whose CRD is not installed (404) is skipped. ``cached`` reads the API server's
    watch cache (``resourceVersion=0``) instead of a quorum read of etcd.
    """
    out: list[dict[str, Any]] = []
    for base, plural, kind, namespaced in (*BUILTIN, *CUSTOM):
        where = f"{base}/namespaces/{namespace}/{plural}" if namespace and namespaced else f"{base}/{plural}"
        query = {"resourceVersion": "0"} if cached else {}
        if kind == "Pod":
            query["fieldSelector"] = POD_SELECTOR
        try:
            data = api.get(where, query=query)
        except ApiError as exc:
            if exc.status in (404, 403) and (base, plural, kind, namespaced) in CUSTOM:
                continue
            raise
        out.extend(_items(data, base.removeprefix("/apis/").removeprefix("/api/"), kind))
    return out


def _timestamp(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def event_body(r: AuditResult, instance: str, timestamp: str) -> dict[str, Any]:
    """A Warning Event on the workload that turned from pass to fail."""
    w = r.workload
    involved = {"apiVersion": w.api_version, "kind": w.kind, "name": w.name, "namespace": w.namespace}
    if w.uid:
        involved["uid"] = w.uid
    return new_event(involved, w.namespace, reason=EVENT_REASON, message=r.message, type="Warning",
                     component=COMPONENT, instance=instance, action="Audit", timestamp=timestamp)


class Auditor:
    """The leader's audit: :meth:`due` says when, :meth:`run_pass` does one pass (blocking)."""

    def __init__(
        self, config: Config, api: RawApi, catalog: Catalog, metrics: Metrics | None = None, *,
        identity: str = "vramgate", clock: Callable[[], float] = time.monotonic,
        wallclock: Callable[[], float] = time.time, can_write: Callable[[], bool] = lambda: True,
    ) -> None:
        self.config = config
        self.api = api
        self.catalog = catalog
        self.metrics = metrics or Metrics()
        self.identity = identity
        self.clock = clock
        self.wallclock = wallclock
        self.can_write = can_write
        self.report_api: ReportApi | None = APIS.get(config.audit.reports)
        self.passes = 0
        self.last_results: list[AuditResult] = []
        self.forget()

    def forget(self) -> None:
        """Drop what a term learned (a new leader starts from the reports that exist)."""
        self._fingerprint: frozenset[Any] | None = None
        self._caps_of: tuple[int, frozenset[Any]] | None = None  # (Snapshot.nodes_revision, its capabilities)
        self._next_full = 0.0
        self._last_pass = float("-inf")
        self._memo: dict[str, tuple[str, str, AuditResult | None]] = {}  # uid → (rv, mode, result)
        self._runtimes: frozenset[tuple[str, str, str]] = frozenset()
        self._previous: dict[tuple[str, str, str], Result] = {}
        self._seeded = False
        self._reports_missing_logged = False

    def _capabilities(self, snapshot: Snapshot) -> frozenset[Any]:
        """:func:`capabilities` of ``snapshot``, derived once per node revision of a live inventory (O(nodes):
        ~10 µs a node, and due() asks every reconcile)."""
        rev = snapshot.nodes_revision
        cached = self._caps_of
        if rev and cached is not None and cached[0] == rev:
            return cached[1]
        fingerprint = capabilities(snapshot)
        self._caps_of = (rev, fingerprint)
        return fingerprint

    def postpone(self) -> None:
        """After a failed pass (the API server unreachable, …): try again in a while, not in a tight loop."""
        self._last_pass = self.clock() + max(0.0, RETRY_SECONDS - self.config.audit.min_interval_seconds)

    def due(self, snapshot: Snapshot, now: float | None = None) -> str | None:
        """Why a pass is due now ("inventory" or "period"), or None."""
        if not snapshot.synced:
            return None
        now = self.clock() if now is None else now
        if now - self._last_pass < self.config.audit.min_interval_seconds:
            return None
        if self._fingerprint != self._capabilities(snapshot):
            return "inventory"
        if now >= self._next_full:
            return "period"
        return None

    def run_pass(self, snapshot: Snapshot, trigger: str = "period") -> list[AuditResult]:
        """List, judge, report, record: one pass. Raises ApiError when the API server cannot be read."""
        started = self.clock()
        fingerprint = self._capabilities(snapshot)
        if fingerprint != self._fingerprint:
            self._memo.clear()  # every verdict may change with the inventory
        objects = list_workloads(self.api)
        results = self.judge(objects, snapshot)
        reports_ok = self._write_reports(results)
        if self.config.audit.events:
            self._record_events(results)
        tally = counts(results)
        for name, n in tally.items():
            self.metrics.audit_workloads.labels(result=name).set(n)
        self._fingerprint = fingerprint
        self._last_pass = started
        self._next_full = started + self.config.audit.interval_seconds
        self.passes += 1
        self.last_results = results
        self.metrics.audit_passes.labels(trigger=trigger).inc()
        self.metrics.audit_duration.observe(self.clock() - started)
        log.info("audit (%s): %d workloads: %d pass, %d warn, %d fail%s", trigger, len(results), tally["pass"],
                 tally["warn"], tally["fail"], "" if reports_ok else " (reports not written)")
        return results

    def judge(self, objects: list[dict[str, Any]], snapshot: Snapshot) -> list[AuditResult]:
        """Audit results for ``objects``, re-judging only what changed since the memo was filled."""
        runtimes = Runtimes.of(objects)
        versions = frozenset((str(o.get("kind")), str((o.get("metadata") or {}).get("uid")),
                              str((o.get("metadata") or {}).get("resourceVersion")))
                             for o in objects if str(o.get("kind")) in RUNTIME_KINDS | ATTACHED_KINDS)
        # A runtime changed, or a ModelClaim: the workloads that name it (its pool) may judge differently.
        if versions != self._runtimes:
            self._memo.clear()
            self._runtimes = versions
        modes = snapshot.enforcement
        seen: set[str] = set()
        out: list[AuditResult] = []
        for obj in workloads(objects):
            meta = obj.get("metadata") or {}
            uid, rv = str(meta.get("uid") or ""), str(meta.get("resourceVersion") or "")
            ref = workload_ref(obj)
            mode = modes.get(ref.namespace, "enforce")
            memo = self._memo.get(uid) if uid else None
            if memo is not None and memo[0] == rv and memo[1] == mode:
                result = memo[2]
            else:
                result = audit_one(obj, snapshot, self.config, self.catalog, runtimes=runtimes, enforcement=mode)
                self.metrics.audit_judged.inc()
                # A pass runs in a thread beside the event loop: offer the GIL between workloads, so a review
                # or an extender call waits for one judgement at most, not for the pass.
                time.sleep(0)
                if uid:
                    self._memo[uid] = (rv, mode, result)
            if uid:
                seen.add(uid)
            if result is not None:
                out.append(result)
        for uid in self._memo.keys() - seen:
            del self._memo[uid]
        out.sort(key=lambda r: r.workload.key)
        return out

    # ------------------------------------------------------------------ reports

    def _existing_reports(self, api: ReportApi) -> dict[str, dict[str, Any]] | None:
        selector = ",".join(f"{k}={v}" for k, v in MANAGED_BY.items())
        try:
            data = self.api.get(api.all_path(), query={"labelSelector": selector})
        except ApiError as exc:
            if exc.status == 404:
                if not self._reports_missing_logged:
                    log.warning("audit: %s is not installed (its CRD is missing); no reports written "
                                "(install it, or the chart with reports.installCRDs=true)", api.kind)
                    self._reports_missing_logged = True
                return None
            raise
        out = {}
        for item in (data or {}).get("items") or []:
            meta = item.get("metadata") or {}
            if meta.get("name") == REPORT_NAME and isinstance(meta.get("namespace"), str):
                out[meta["namespace"]] = {"apiVersion": api.api_version, "kind": api.kind, **item}
        return out

    def _write_reports(self, results: list[AuditResult]) -> bool:
        api = self.report_api
        if api is None:
            return True
        existing = self._existing_reports(api)
        if existing is None:
            if not self._seeded:
                self._seeded = True
            return False
        if not self._seeded:  # a new leader: what the reports say failed already had its Event
            for report in existing.values():
                for key in failing_in(report):
                    self._previous.setdefault(key, "fail")
            self._seeded = True
        now = int(self.wallclock())
        grouped = by_namespace(results)
        cap = self.config.audit.max_results_per_report
        for ns, rows in grouped.items():
            previous = existing.get(ns)
            body = desired_report(ns, rows, api=api, max_results=cap, now=now, previous=previous)
            if body is None or not self.can_write():
                continue
            try:
                if previous is None:
                    self.api.request("POST", api.collection(ns), body)
                    self.metrics.audit_report_writes.labels(action="create").inc()
                else:
                    body["metadata"]["resourceVersion"] = (previous.get("metadata") or {}).get("resourceVersion")
                    self.api.request("PUT", api.path(ns), body)
                    self.metrics.audit_report_writes.labels(action="update").inc()
            except ApiError as exc:
                if exc.status == 0:
                    raise
                log.warning("audit: report in %s: %s", ns, exc)  # 409/404: the next pass writes it
        # A namespace whose GPU workloads are gone keeps an empty report (never deleted: the controller's RBAC
        # has no delete verb); it goes with its namespace.
        for ns in existing.keys() - grouped.keys():
            body = desired_report(ns, [], api=api, max_results=cap, now=now, previous=existing[ns])
            if body is None or not self.can_write():
                continue
            body["metadata"]["resourceVersion"] = (existing[ns].get("metadata") or {}).get("resourceVersion")
            try:
                self.api.request("PUT", api.path(ns), body)
                self.metrics.audit_report_writes.labels(action="update").inc()
            except ApiError as exc:
                if exc.status == 0:
                    raise
                log.warning("audit: report in %s: %s", ns, exc)
        return True

    # ------------------------------------------------------------------ events

    def _record_events(self, results: Iterable[AuditResult]) -> None:
        current: dict[tuple[str, str, str], Result] = {}
        stamp = _timestamp(self.wallclock())
        for r in results:
            key = r.workload.key
            current[key] = r.result
            if r.result != "fail" or self._previous.get(key) == "fail" or not self.can_write():
                continue
            try:
                self.api.request("POST", f"/api/v1/namespaces/{r.workload.namespace}/events",
                                 event_body(r, self.identity, stamp))
            except ApiError as exc:
                if exc.status == 0:
                    raise
                log.warning("audit: cannot record event on %s/%s: %s", r.workload.namespace, r.workload.ref, exc)
        self._previous = current
