"""`vramgate audit` and `vramgate explain`: the background audit once, and "why is my GPU pod Pending?".

Both work against a live cluster (read-only, credentials found as kubectl finds them) or offline over
manifests and a node list (``--nodes FILE -f DIR``). The decisions are :mod:`webhook.audit.audit` and
:mod:`webhook.advise.explain`; this module gathers their inputs and renders their answers.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from ..advise.explain import as_dict, explain, render
from ..audit.audit import AuditResult, audit, counts
from ..audit.auditor import BUILTIN, CUSTOM, POD_SELECTOR, list_workloads
from ..cluster.snapshot import Snapshot, snapshot_from_nodes
from ..config import Config
from ..kinds import Runtimes
from ..kube.apiserver import ApiError, RawApi
from ..kube.kubectl import NoCluster, from_args
from ..kube.manifests import ManifestError, load_file, load_nodes
from .common import EXIT_BAD_INPUT, EXIT_OK, EXIT_REJECTED, UsageError, catalog_for

EXIT_FAIL = EXIT_REJECTED  # audit: something that runs would not be admitted
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")

# kubectl's names and short names → the kind (the plural and group come from the auditor's tables).
ALIASES = {
    "po": "Pod", "pod": "Pod", "pods": "Pod",
    "deploy": "Deployment", "deployment": "Deployment", "deployments": "Deployment",
    "sts": "StatefulSet", "statefulset": "StatefulSet", "statefulsets": "StatefulSet",
    "rs": "ReplicaSet", "replicaset": "ReplicaSet", "replicasets": "ReplicaSet",
    "ds": "DaemonSet", "daemonset": "DaemonSet", "daemonsets": "DaemonSet",
    "job": "Job", "jobs": "Job", "cj": "CronJob", "cronjob": "CronJob", "cronjobs": "CronJob",
    "rc": "ReplicationController", "replicationcontroller": "ReplicationController",
    "lws": "LeaderWorkerSet", "leaderworkerset": "LeaderWorkerSet", "leaderworkersets": "LeaderWorkerSet",
    "isvc": "InferenceService", "inferenceservice": "InferenceService", "inferenceservices": "InferenceService",
    "llmisvc": "LLMInferenceService", "llminferenceservice": "LLMInferenceService",
    "raycluster": "RayCluster", "rayclusters": "RayCluster", "rayjob": "RayJob", "rayjobs": "RayJob",
    "rayservice": "RayService", "rayservices": "RayService",
    "trainjob": "TrainJob", "trainjobs": "TrainJob", "pytorchjob": "PyTorchJob", "pytorchjobs": "PyTorchJob",
    "jobset": "JobSet", "jobsets": "JobSet", "model": "Model", "models": "Model",
}




def _manifests(paths: list[str]) -> list[dict[str, Any]]:
    """Objects from files and folders (every .yaml/.yml/.json under a folder)."""
    out: list[dict[str, Any]] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            for f in sorted(p.rglob("*")):
                if f.is_file() and f.suffix in MANIFEST_SUFFIXES:
                    out.extend(load_file(f))
        else:
            out.extend(load_file(p))
    return out


def _offline(args: argparse.Namespace) -> bool:
    if args.nodes and not args.file:
        raise UsageError("--nodes FILE needs -f FILE|DIR (the manifests to judge offline)")
    if args.file and not args.nodes:
        raise UsageError("-f needs --nodes FILE (offline: the node list to judge the manifests against)")
    return bool(args.nodes)


def _default_namespace(objs: list[dict[str, Any]], namespace: str) -> list[dict[str, Any]]:
    """Manifests without a namespace land in ``namespace`` (as kubectl apply -n does)."""
    out = []
    for o in objs:
        meta = o.get("metadata")
        if isinstance(meta, dict) and not meta.get("namespace") and str(o.get("kind", "")).startswith("Cluster"):
            out.append(o)
        elif isinstance(meta, dict) and not meta.get("namespace"):
            out.append({**o, "metadata": {**meta, "namespace": namespace}})
        else:
            out.append(o)
    return out


def _live(args: argparse.Namespace) -> tuple[RawApi, str]:
    try:
        cluster = from_args(args)
    except NoCluster as exc:
        raise UsageError(f"cannot reach a cluster: {exc}; or work offline with --nodes FILE -f DIR") from None
    return RawApi(cluster.client, timeout=30.0), cluster.namespace


def _live_snapshot(api: RawApi, config: Config) -> Snapshot:
    """The inventory listed once as the service lists it (kube/nodecache.py), over ``api``'s connection."""
    from ..kube.nodecache import live_snapshot

    try:
        return live_snapshot(config, client=api.api_client)
    except Exception as exc:  # the official client's ApiException, or urllib3's errors: unreachable
        status = getattr(exc, "status", None)
        raise ApiError(status if isinstance(status, int) else 0, _client_message(exc), "GET", "inventory") from exc


def _client_message(exc: BaseException) -> str:
    """The API server's message in an ApiException's body, else the error's first line."""
    body = getattr(exc, "body", None)
    try:
        data = json.loads(body) if body else None
    except ValueError:
        data = None
    if isinstance(data, dict) and data.get("message"):
        return str(data["message"])[:300]
    reason = getattr(exc, "reason", None)
    if isinstance(reason, str) and reason and getattr(exc, "status", None):
        return reason
    lines = str(exc).strip().splitlines()
    return lines[0][:300] if lines else type(exc).__name__


def _api_failure(exc: ApiError) -> UsageError:
    return UsageError(f"the API server said {exc.status or 'nothing (unreachable)'}: {exc.message or exc}")


# ---------------------------------------------------------------------------------------------------- audit


def _row(r: AuditResult) -> dict[str, Any]:
    w = r.workload
    return {"namespace": w.namespace, "kind": w.kind, "name": w.name, "result": r.result, "reason": r.code,
            "message": r.message, "need": r.need, "bestNode": r.best_node}


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def print_audit(results: list[AuditResult], output: str) -> None:
    tally = counts(results)
    if output in ("json", "yaml"):
        doc = {"summary": tally, "workloads": [_row(r) for r in results]}
        if output == "json":
            print(json.dumps(doc, indent=2, ensure_ascii=False))
        else:
            print(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=120), end="")
        return
    if not results:
        print("No GPU workloads found.")
        return
    rows = [["NAMESPACE", "WORKLOAD", "RESULT", "NEED", "BEST NODE", "REASON"]]
    for r in results:
        rows.append([r.workload.namespace or "-", r.workload.ref, r.result.upper(), r.need or "-",
                     r.best_node or "-", r.code])
    print(_table(rows))
    problems = [r for r in results if r.result in ("fail", "warn")]
    if problems:
        print()
        for r in problems:
            print(f"{r.result.upper()}  {r.workload.namespace}/{r.workload.ref}: {r.message}")
    print(f"\n{tally['pass']} pass, {tally['warn']} warn, {tally['fail']} fail, {tally['skip']} skip")


def cmd_audit(args: argparse.Namespace, config: Config) -> int:
    catalog = catalog_for(config)
    try:
        if _offline(args):
            objects = _manifests(args.file)
            objects = _default_namespace(objects, args.namespace or "default")
            snapshot = snapshot_from_nodes(load_nodes(args.nodes), config)
            results = audit(objects, snapshot, config, catalog)
            if args.namespace and not args.all_namespaces:
                results = [r for r in results if r.workload.namespace == args.namespace]
        else:
            api, namespace = _live(args)
            scope = None if args.all_namespaces else namespace
            try:
                snapshot = _live_snapshot(api, config)
                objects = list_workloads(api, scope, cached=False)
            except ApiError as exc:
                raise _api_failure(exc) from None
            results = audit(objects, snapshot, config, catalog)
            if scope is not None:
                results = [r for r in results if r.workload.namespace == scope]
    except (UsageError, ManifestError) as exc:
        print(f"vramgate audit: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print_audit(results, args.output)
    return EXIT_FAIL if any(r.result == "fail" for r in results) else EXIT_OK


# ---------------------------------------------------------------------------------------------------- explain


def parse_target(target: list[str]) -> tuple[str, str]:
    """``kind/name`` or ``kind name`` → (Kind, name)."""
    if len(target) == 1 and "/" in target[0]:
        kind, name = target[0].split("/", 1)
    elif len(target) == 2:
        kind, name = target
    else:
        raise UsageError(f"expected KIND/NAME (e.g. deployment/llama), got {' '.join(target)!r}")
    found = ALIASES.get(kind.lower().split(".", 1)[0])
    if found is None or not name:
        raise UsageError(f"unknown kind {kind!r}; use one of pod, deployment, statefulset, job, cronjob, "
                         "replicaset, daemonset, leaderworkerset, inferenceservice, rayservice, raycluster, rayjob, "
                         "trainjob, pytorchjob, jobset, model")
    return found, name


def _find_offline(objects: list[dict[str, Any]], kind: str, name: str, namespace: str | None) -> dict[str, Any]:
    for o in objects:
        meta = o.get("metadata") or {}
        if o.get("kind") == kind and meta.get("name") == name and (
                namespace is None or meta.get("namespace") in (None, "", namespace)):
            return o
    raise UsageError(f"{kind.lower()}/{name} is not in the files given with -f")


def _get_live(api: RawApi, kind: str, name: str, namespace: str) -> dict[str, Any]:
    for base, plural, k, namespaced in (*BUILTIN, *CUSTOM):
        if k != kind:
            continue
        path = f"{base}/namespaces/{namespace}/{plural}/{name}" if namespaced else f"{base}/{plural}/{name}"
        try:
            obj = api.get(path)
        except ApiError as exc:
            if exc.status == 404:
                raise UsageError(f'{kind.lower()}/{name} not found in namespace "{namespace}" (if admission rejected '
                                 "it, it was never created: pass its manifest with -f)") from None
            raise _api_failure(exc) from None
        return {"apiVersion": base.removeprefix("/apis/").removeprefix("/api/"), "kind": kind, **obj}
    raise UsageError(f"unknown kind {kind}")  # pragma: no cover - ALIASES only names known kinds


def _runtimes_live(api: RawApi, namespace: str) -> Runtimes:
    objs: list[dict[str, Any]] = []
    for base, plural, kind, namespaced in CUSTOM:
        if not kind.endswith("Runtime"):
            continue
        path = f"{base}/namespaces/{namespace}/{plural}" if namespaced else f"{base}/{plural}"
        try:
            data = api.get(path)
        except ApiError:
            continue
        # List items carry no apiVersion; the path's group files each runtime under its own group (Runtimes.of).
        objs.extend({"apiVersion": base.removeprefix("/apis/"), "kind": kind, **i}
                    for i in (data or {}).get("items") or [] if isinstance(i, dict))
    return Runtimes.of(objs)


def _stamp(ev: dict[str, Any]) -> str:
    return str(ev.get("lastTimestamp") or ev.get("eventTime") or (ev.get("metadata") or {}).get("creationTimestamp")
               or "")


def scheduler_events(api: RawApi, namespace: str, kind: str, name: str, limit: int = 3) -> list[str]:
    """The newest FailedScheduling events of the workload's pods, and FailedCreate events of its controllers
    (where admission's rejection of its pods shows up)."""
    found: list[dict[str, Any]] = []
    for reason in ("FailedScheduling", "FailedCreate"):
        try:
            data = api.get(f"/api/v1/namespaces/{namespace}/events", query={"fieldSelector": f"reason={reason}"})
        except ApiError:
            continue
        for ev in (data or {}).get("items") or []:
            inv = ev.get("involvedObject") or {}
            obj_name = str(inv.get("name") or "")
            if obj_name == name or (kind != "Pod" and obj_name.startswith(f"{name}-")):
                found.append(ev)
    found.sort(key=_stamp, reverse=True)
    out = []
    for ev in found[:limit]:
        inv = ev.get("involvedObject") or {}
        count = ev.get("count") or (ev.get("series") or {}).get("count") or 1
        out.append(f"{_stamp(ev)} {ev.get('reason')} {str(inv.get('kind', '')).lower()}/{inv.get('name')} "
                   f"(×{count}): {ev.get('message', '')}")
    return out


def _bound_pods(api: RawApi, namespace: str, kind: str, name: str) -> dict[str, str]:
    """The workload's pods already bound to a node (its own pod, or those named ``NAME-…``), pod → node."""
    try:
        data = api.get(f"/api/v1/namespaces/{namespace}/pods", query={"fieldSelector": POD_SELECTOR})
    except ApiError:
        return {}
    out = {}
    for p in (data or {}).get("items") or []:
        pod_name = str((p.get("metadata") or {}).get("name") or "")
        node = (p.get("spec") or {}).get("nodeName")
        if node and (pod_name == name if kind == "Pod" else pod_name.startswith(f"{name}-")):
            out[pod_name] = str(node)
    return out


def cmd_explain(args: argparse.Namespace, config: Config) -> int:
    catalog = catalog_for(config)
    try:
        kind, name = parse_target(args.target)
        if args.nodes and not args.file:
            raise UsageError("--nodes FILE needs -f FILE|DIR (the manifests to explain offline)")
        if args.nodes:
            objects = _default_namespace(_manifests(args.file), args.namespace or "default")
            obj = _find_offline(objects, kind, name, args.namespace)
            snapshot = snapshot_from_nodes(load_nodes(args.nodes), config)
            result = explain(obj, snapshot, config, catalog, runtimes=Runtimes.of(objects))
        else:
            # Live; with -f the workload comes from its manifest (one admission rejected was never created),
            # judged against the cluster's nodes.
            api, namespace = _live(args)
            if args.file:
                objects = _default_namespace(_manifests(args.file), namespace)
                obj = _find_offline(objects, kind, name, namespace)
                runtimes = Runtimes.of(objects)
            else:
                obj = _get_live(api, kind, name, namespace)
                runtimes = _runtimes_live(api, namespace)
            try:
                snapshot = _live_snapshot(api, config)
            except ApiError as exc:
                raise _api_failure(exc) from None
            events = scheduler_events(api, namespace, kind, name)
            placed = _bound_pods(api, namespace, kind, name)
            result = explain(obj, snapshot, config, catalog, runtimes=runtimes, events=events, placed=placed)
    except (UsageError, ManifestError) as exc:
        print(f"vramgate explain: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.output == "json":
        print(json.dumps(as_dict(result), indent=2, ensure_ascii=False))
    elif args.output == "yaml":
        print(yaml.safe_dump(as_dict(result), sort_keys=False, allow_unicode=True, width=120), end="")
    else:
        print(render(result))
    return EXIT_OK
