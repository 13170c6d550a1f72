"""Audit results shaped as PolicyReports (``wgpolicyk8s.io/v1alpha2``) or OpenReports (``openreports.io/v1alpha1``).

One report per namespace, named ``vramgate``. Only failing and at-risk workloads are listed (fail first),
at most ``max_results`` of them, so a big cluster cannot fill etcd; passes are counted in ``summary``.
:func:`desired_report` is pure and idempotent: given the report that exists it returns None when nothing
changed (no write, no churn), and keeps each unchanged result's timestamp so a rewrite only moves what moved.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .audit import AuditResult, counts

REPORT_NAME = "vramgate"
POLICY = "vramgate"
SOURCE = "vramgate"
MANAGED_BY = {"app.kubernetes.io/managed-by": "vramgate"}
TRUNCATED = "vramgate.io/results-truncated"
SEVERITY = {"fail": "high", "warn": "medium"}


@dataclass(frozen=True)
class ReportApi:
    """Where a kind of report lives in the API."""

    group: str
    version: str
    kind: str
    plural: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    def collection(self, namespace: str) -> str:
        return f"/apis/{self.group}/{self.version}/namespaces/{namespace}/{self.plural}"

    def path(self, namespace: str, name: str = REPORT_NAME) -> str:
        return f"{self.collection(namespace)}/{name}"

    def all_path(self) -> str:
        return f"/apis/{self.group}/{self.version}/{self.plural}"


POLICY_REPORT = ReportApi("wgpolicyk8s.io", "v1alpha2", "PolicyReport", "policyreports")
OPEN_REPORT = ReportApi("openreports.io", "v1alpha1", "Report", "reports")
APIS = {"policyreport": POLICY_REPORT, "openreports": OPEN_REPORT}


def by_namespace(results: Iterable[AuditResult]) -> dict[str, list[AuditResult]]:
    out: dict[str, list[AuditResult]] = defaultdict(list)
    for r in results:
        out[r.workload.namespace].append(r)
    return dict(out)


def _result_entry(r: AuditResult, seconds: int) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "policy": POLICY,
        "rule": r.code,
        "result": r.result,
        "message": r.message[:1024],
        "source": SOURCE,
        "category": "GPU",
        "severity": SEVERITY.get(r.result, "info"),
        "scored": True,
        "resources": [r.workload.resource()],
        "timestamp": {"seconds": seconds, "nanos": 0},
    }
    props = r.properties()
    if props:
        entry["properties"] = props
    return entry


def _identity(entry: Mapping[str, Any]) -> Any:
    """A result without its timestamp: equal identities are the same finding."""
    return json.dumps({k: v for k, v in entry.items() if k != "timestamp"}, sort_keys=True)


def desired_report(
    namespace: str,
    results: list[AuditResult],
    *,
    api: ReportApi = POLICY_REPORT,
    max_results: int = 100,
    now: int = 0,
    previous: Mapping[str, Any] | None = None,
) -> dict[str, Any] | None:
    """The report for ``namespace``, or None when ``previous`` already says exactly this.

    ``now`` (Unix seconds) stamps results that are new or changed; unchanged ones keep their stamp.
    """
    listed = sorted((r for r in results if r.result in ("fail", "warn")),
                    key=lambda r: (r.result != "fail", r.workload.key))
    dropped = max(0, len(listed) - max_results)
    listed = listed[:max_results]
    stamps: dict[Any, Any] = {}
    for old in (previous or {}).get("results") or []:
        if isinstance(old, dict) and "timestamp" in old:
            stamps.setdefault(_identity(old), old["timestamp"])
    entries = []
    for r in listed:
        entry = _result_entry(r, now)
        kept = stamps.get(_identity(entry))
        if kept is not None:
            entry["timestamp"] = kept
        entries.append(entry)
    tally = counts(results)
    annotations = {TRUNCATED: str(dropped)} if dropped else {}
    body: dict[str, Any] = {
        "apiVersion": api.api_version,
        "kind": api.kind,
        "metadata": {"name": REPORT_NAME, "namespace": namespace, "labels": dict(MANAGED_BY),
                     **({"annotations": annotations} if annotations else {})},
        "summary": {"pass": tally["pass"], "fail": tally["fail"], "warn": tally["warn"], "error": 0,
                    "skip": tally["skip"]},
        "results": entries,
    }
    if previous is not None and _same(previous, body):
        return None
    return body


def _same(previous: Mapping[str, Any], body: Mapping[str, Any]) -> bool:
    meta = previous.get("metadata") if isinstance(previous.get("metadata"), dict) else {}
    assert isinstance(meta, dict)
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    want = body["metadata"]
    return (
        previous.get("apiVersion") == body["apiVersion"]
        and previous.get("kind") == body["kind"]
        and all(labels.get(k) == v for k, v in want["labels"].items())
        and annotations.get(TRUNCATED) == want.get("annotations", {}).get(TRUNCATED)
        and (previous.get("summary") or {}) == body["summary"]
        and (previous.get("results") or []) == body["results"]
    )


def failing_in(report: Mapping[str, Any]) -> set[tuple[str, str, str]]:
    """(namespace, kind, name) of every workload a report lists as failing: seeds the pass→fail Events."""
    out = set()
    for entry in report.get("results") or []:
        if not isinstance(entry, dict) or entry.get("result") != "fail":
            continue
        for res in entry.get("resources") or []:
            if isinstance(res, dict):
                out.add((str(res.get("namespace") or ""), str(res.get("kind") or ""), str(res.get("name") or "")))
    return out
