"""HTTP endpoints ``/validate`` and ``/mutate``: size limits, decoding, metrics and one log line per review."""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import replace
from typing import Any

import anyio.to_thread
import yaml
from fastapi import APIRouter
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from ...kinds import KINDS, Runtimes
from ...kube.autofit_events import Target
from ...kube.configmaps import ConfigMapReader, configmap_refs
from ...units.bounds import CONFIG_FILES, TooLarge
from ..answers import Answer
from ..bodies import BadContentLength, BodyTooLarge, read_limited
from ..logs import info_fast
from ..state import AppState, Rejection
from .decision import Webhook, decide, failure_answer
from .review import BadReview, parse_review, render

log = logging.getLogger("vramgate.admission")
router = APIRouter()


def _plain(status: int, text: str) -> Response:
    return Response(text + "\n", status_code=status, media_type="text/plain; charset=utf-8")


def _verdict(answer: Answer) -> str:
    if not answer.allowed:
        return "denied"
    if answer.patch:
        return "patched"
    if answer.warnings:
        return "warned"
    return "allowed"


async def _review(request: Request, webhook: Webhook) -> Response:
    state: AppState = request.app.state.vg
    metrics = state.metrics
    start = time.perf_counter()
    limit = state.config.admission.max_body_bytes
    try:
        req = parse_review(await read_limited(request, limit))
    except ClientDisconnect:
        # The API server gave up (its webhook timeout) or the connection broke: nobody to answer, nothing wrong here.
        metrics.client_disconnects.labels(request.url.path).inc()
        log.debug("client went away before the review arrived", extra={"fields": {"webhook": webhook}})
        return _plain(400, "client disconnected")
    except BodyTooLarge:
        metrics.bad_requests.labels(webhook, "too-large").inc()
        return _plain(413, f"body exceeds {limit} bytes")
    except BadContentLength as exc:
        metrics.bad_requests.labels(webhook, "bad-length").inc()
        return _plain(400, str(exc))
    except BadReview as exc:
        metrics.bad_requests.labels(webhook, exc.reason).inc()
        return _plain(400, str(exc))
    runtimes, late = await _configmaps_of(state, req)
    try:
        answer = decide(state, req, webhook, runtimes)
    except Exception:  # decide() answers its own errors; this is the last line of defence against a 500
        log.exception("admission failed", extra={"fields": {"uid": req["uid"], "webhook": webhook}})
        answer = failure_answer(state, webhook)
    if late:
        metrics.configmap_reads_late.inc(len(late))
        if webhook == "validate":
            answer = replace(answer, warnings=(*answer.warnings, _late_note(state, late)))
    body = render(req["uid"], answer.allowed, message=answer.message, warnings=answer.warnings,
                  patch=answer.patch or None)
    elapsed = time.perf_counter() - start
    gvk_kind = req["kind"]["kind"]
    kind = gvk_kind if gvk_kind in KINDS else "other"
    verdict = _verdict(answer)
    metrics.admission_requests.labels(req["operation"], kind, verdict, answer.reason).inc()
    if answer.autofit is not None:
        metrics.autofit.labels(answer.autofit).inc()
        if answer.autofit == "applied" and not req.get("dryRun") and state.autofit_events is not None:
            target = _event_target(req)
            if target is not None:
                state.autofit_events.record(target, f"autofit applied {answer.autofit_change}")
    if not answer.allowed:
        state.rejections.append(_rejection(req, webhook, answer))
    metrics.admission_duration.labels(webhook).observe(elapsed)
    if log.isEnabledFor(logging.INFO):
        info_fast(log, "review", _fields(req, webhook, verdict, answer, elapsed))
    return Response(body, media_type="application/json")


async def _configmaps_of(state: AppState, req: Any) -> tuple[Runtimes | None, list[str]]:
    """The ConfigMaps the object's env refers to, read off the event loop within the review's budget (or None),
    and the names not read in time (read in the background for the next review)."""
    reader = state.configmaps
    obj = req.get("object")
    if reader is None or req.get("operation") not in ("CREATE", "UPDATE") or not isinstance(obj, dict):
        return None, []
    names = configmap_refs(obj)
    namespace = req.get("namespace")
    if not names or not isinstance(namespace, str) or not namespace:
        return None, []
    deadline = time.monotonic() + state.config.admission.configmap_budget_seconds
    try:
        found, late = await anyio.to_thread.run_sync(_read_and_parse, reader, namespace, names, deadline)
    except Exception:  # a read that fails leaves the values unknown, as without the reader
        log.debug("ConfigMap read failed", exc_info=True)
        return None, []
    if late:
        # A warning at most once a minute (a frozen API server would make it one per review), debug otherwise;
        # vramgate_configmap_reads_late_total counts every one.
        now = time.monotonic()
        level = logging.WARNING if now - _LATE_LOGGED[0] >= 60 else logging.DEBUG
        if level == logging.WARNING:
            _LATE_LOGGED[0] = now
        log.log(level, "ConfigMaps not read within admission.configmap_budget_seconds; reading them in the "
                "background", extra={"fields": {"namespace": namespace, "configmaps": late}})
    return (Runtimes.of(found) if found else None), late


_LATE_LOGGED = [float("-inf")]  # when the last warning about late ConfigMap reads was logged


def _late_note(state: AppState, late: list[str]) -> str:
    budget = state.config.admission.configmap_budget_seconds
    return (f"ConfigMap {', '.join(late)} not read within {budget:g} s (admission.configmap_budget_seconds): the "
            "values it sets are not known in this answer; it is being read for the next one")


# A ConfigMap value this long, over several lines, may be a config file an engine reads (a trainer's YAML): it is
# parsed in the reading thread, so the review finds it parsed (CONFIG_FILES) instead of parsing it on the event loop.
_PARSE_AHEAD_CHARS = 4096


def _read_and_parse(reader: ConfigMapReader, namespace: str, names: list[str],
                    deadline: float) -> tuple[list[dict[str, Any]], list[str]]:
    found, late = reader.read_timed(namespace, names, deadline)
    for cm in found:
        data = cm.get("data")
        for key, value in (data.items() if isinstance(data, dict) else ()):
            if isinstance(value, str) and len(value) >= _PARSE_AHEAD_CHARS and "\n" in value:
                with contextlib.suppress(TooLarge, yaml.YAMLError):
                    CONFIG_FILES.load(value, f"ConfigMap {cm.get('metadata', {}).get('name')} key {key}")
    return found, late


def _fields(req: Any, webhook: str, verdict: str, answer: Answer, elapsed: float) -> dict[str, Any]:
    obj = req.get("object") or req.get("oldObject") or {}
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    name = req.get("name") or meta.get("name") or meta.get("generateName") or ""
    return {
        "webhook": webhook,
        "uid": req["uid"],
        "object": f"{req.get('namespace') or meta.get('namespace') or ''}/{name}",
        "kind": req["kind"]["kind"],
        "operation": req["operation"],
        "dry_run": bool(req.get("dryRun")),
        "verdict": verdict,
        "reason": answer.reason,
        "patch_ops": len(answer.patch),
        "warnings": len(answer.warnings),
        "duration_ms": round(elapsed * 1000, 3),
    }


def _event_target(req: Any) -> Target | None:
    """The object autofit changed, as the API server will store it (None without a name: generateName)."""
    obj = req.get("object") or {}
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    name = req.get("name") or meta.get("name")
    namespace = req.get("namespace") or meta.get("namespace")
    resource = req.get("resource") or {}
    if not (isinstance(name, str) and name and isinstance(namespace, str) and namespace and isinstance(resource, dict)):
        return None
    return Target(namespace, str(resource.get("group") or ""), str(resource.get("version") or "v1"),
                  str(resource.get("resource") or ""), str(req["kind"]["kind"]), name)


def _rejection(req: Any, webhook: str, answer: Answer) -> Rejection:
    obj = req.get("object") or req.get("oldObject") or {}
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    return Rejection(time.time(), webhook, str(req["kind"]["kind"]),
                     str(req.get("namespace") or meta.get("namespace") or ""),
                     str(req.get("name") or meta.get("name") or meta.get("generateName") or ""), str(answer.reason))


async def validate(request: Request) -> Response:
    """ValidatingWebhookConfiguration target: admit, admit with warnings, or deny with the §6 message."""
    return await _review(request, "validate")


async def mutate(request: Request) -> Response:
    """MutatingWebhookConfiguration target: a JSONPatch for admitted GPU Pods and GPU Jobs."""
    return await _review(request, "mutate")


# Plain Starlette routes: no request-model parsing or dependency solving on the hot path.
router.add_route("/validate", validate, methods=["POST"], include_in_schema=False)
router.add_route("/mutate", mutate, methods=["POST"], include_in_schema=False)
