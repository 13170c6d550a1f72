"""From an admission request to an answer: exclusions, enforcement modes, UPDATE diffing, failure modes.

The verdict itself comes from ``verdict.judge`` (the same call ``vramgate check`` makes) and the
patch from ``mutation``; this module only decides whether and how to ask them.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any, Literal

import jsonpatch

from ...advise.autofit import NAMESPACE_MODE, already_applied, autofit, engine_flags_changed, wanted
from ...advise.fixes import rejudger
from ...cluster.snapshot import Snapshot
from ...config import Config, Enforcement
from ...decide.mutation import OUTPUT_ANNOTATIONS, mutation
from ...decide.placement import Code, Need
from ...decide.verdict import OVER_BUDGET, TOO_LARGE, Judgement, judge
from ...kinds import CUSTOM_KINDS, Runtimes, WorkloadError, is_builtin, pod_part, pod_view
from ...models.catalog import Catalog
from ...units.bounds import MAX_OBJECT_DEPTH, TooLarge, budget, too_deep
from ...units.declaration import ANNOTATION_PREFIX
from ..answers import Answer, Cached
from ..hub import HubResolver
from ..state import AppState
from .review import AdmissionRequest

Webhook = Literal["validate", "mutate"]
# Autofit for this review: off, on a CREATE (unless the object already carries its trail), or on an UPDATE
# whose engine flags changed.
AutofitMode = Literal["off", "create", "update"]
SKIP_LABEL = "vramgate.io/skip"
ENFORCEMENT_LABEL = "vramgate.io/enforcement"
_MODES: frozenset[str] = frozenset({"enforce", "warn", "off", NAMESPACE_MODE})

log = logging.getLogger("vramgate.admission")


def enforcement_for(snapshot: Snapshot, config: Config, namespace: str) -> Enforcement:
    """The namespace's ``vramgate.io/enforcement`` label (from the snapshot), else the configured default."""
    mode = snapshot.enforcement.get(namespace)
    if mode == NAMESPACE_MODE:
        return "enforce"  # autofit: enforce, and the mutating webhook applies an eligible fix first
    if isinstance(mode, str) and mode in _MODES:
        return mode  # type: ignore[return-value]
    return config.admission.default_enforcement


def _labels(meta: Any) -> dict[str, Any]:
    if not isinstance(meta, dict):
        return {}
    labels = meta.get("labels")
    return labels if isinstance(labels, dict) else {}


def skipped(obj: dict[str, Any]) -> bool:
    """``vramgate.io/skip: "true"`` on the Pod, on a workload's pod template, or on the workload itself."""
    if _labels(obj.get("metadata")).get(SKIP_LABEL) == "true":
        return True
    part = pod_part(obj)
    return isinstance(part, dict) and _labels(part.get("metadata")).get(SKIP_LABEL) == "true"


def _declaration(annotations: dict[str, Any], labels: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in annotations.items()
           if isinstance(k, str) and k.startswith(ANNOTATION_PREFIX) and k not in OUTPUT_ANNOTATIONS}
    out[SKIP_LABEL] = labels.get(SKIP_LABEL)
    return out


def _meta_maps(obj: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return {}, {}
    ann = meta.get("annotations")
    return (ann if isinstance(ann, dict) else {}), _labels(meta)


def declaration_changed(obj: dict[str, Any], old: dict[str, Any] | None) -> bool:
    """Whether an UPDATE touches what admission judges: the pod spec or the ``vramgate.io/*`` declaration."""
    if not isinstance(old, dict):
        return True
    if str(obj.get("kind")) in CUSTOM_KINDS or not is_builtin(obj):
        # Roles come from the whole spec (sizes, parallelism, serveConfigV2 …) and the object's declaration.
        return obj.get("spec") != old.get("spec") or _declaration(*_meta_maps(obj)) != _declaration(*_meta_maps(old))
    try:
        new_view, old_view = pod_view(obj), pod_view(old)
    except WorkloadError:
        return True
    if new_view is None or old_view is None:
        return new_view is not old_view
    return new_view.spec != old_view.spec or _declaration(new_view.annotations, new_view.labels) != _declaration(
        old_view.annotations, old_view.labels
    )


def _with_kind(obj: dict[str, Any], req: AdmissionRequest) -> dict[str, Any]:
    """The object with the request's kind and apiVersion where it lacks them: readers are keyed by both."""
    gvk = req["kind"]
    out = obj if isinstance(obj.get("kind"), str) else {**obj, "kind": gvk["kind"]}
    api = obj.get("apiVersion")
    if not (isinstance(api, str) and api) and isinstance(gvk.get("version"), str) and gvk.get("version"):
        group = gvk.get("group") or ""
        out = {**out, "apiVersion": f"{group}/{gvk['version']}" if group else str(gvk["version"])}
    return out


def decide(state: AppState, req: AdmissionRequest, webhook: Webhook, runtimes: Runtimes | None = None) -> Answer:
    """The answer for one request. Never raises: an unexpected error answers per the failure mode.

    ``runtimes`` holds the ConfigMaps the object's env refers to, read by the route; an answer that read them
    is not remembered (a ConfigMap changes without the object changing).
    """
    op = req["operation"]
    if op in ("DELETE", "CONNECT"):
        return Answer(True, "operation")
    if req.get("subResource"):
        return Answer(True, "subresource")
    obj = req.get("object")
    if not isinstance(obj, dict):  # parse_review guarantees it for CREATE/UPDATE
        return Answer(True, "no-object")
    config = state.config
    meta = obj.get("metadata")
    namespace = req.get("namespace") or (meta.get("namespace") if isinstance(meta, dict) else None) or ""
    if not isinstance(namespace, str):
        namespace = ""
    if namespace and (namespace == config.namespace or namespace in config.admission.excluded_namespaces):
        return Answer(True, "excluded")
    try:
        if too_deep(obj) or too_deep(req.get("oldObject")):
            # Before anything recurses over it (comparisons, the patch's copy): admitted unjudged, as judge() does;
            # the warning once, from /validate, as for every judgement.
            note = TooLarge(f"objects nested more than {MAX_OBJECT_DEPTH} deep").warning
            return Answer(True, TOO_LARGE, warnings=(note,) if webhook == "validate" else ())
        if skipped(obj):
            return Answer(True, "skip-label")
        # One snapshot per review: the namespace's enforcement label and the verdict come from the same one.
        snapshot = state.inventory.snapshot()
        enforcement = enforcement_for(snapshot, config, namespace)
        if enforcement == "off":
            return Answer(True, "enforcement-off")
        fit_mode: AutofitMode = "off"
        if webhook == "mutate" and wanted(obj, snapshot.enforcement.get(namespace)):
            fit_mode = "update" if op == "UPDATE" else "create"
        if op == "UPDATE":
            if webhook == "mutate" and not (fit_mode == "update" and engine_flags_changed(obj, req.get("oldObject"))):
                # Pod specs are (mostly) immutable; only CREATE is rewritten, and autofit only re-runs on an
                # UPDATE that changes the engine's flags.
                return Answer(True, "update")
            if webhook == "validate" and not declaration_changed(obj, req.get("oldObject")):
                return Answer(True, "unchanged")
        if not snapshot.synced:
            # Judging an empty inventory would admit everything; answer as if the webhook were down.
            return unsynced_answer(state, webhook)
        obj = _with_kind(obj, req)
        stale = _stale_for(state, config)
        # The same object against the same snapshot, config and catalog gets the same answer (see answers.py);
        # not while the inventory is stale (its snapshot stops changing, and the answer depends on how stale).
        catalog = state.catalog
        key = (state.answers.key(f"{webhook}:{fit_mode}", namespace, enforcement, obj)
               if runtimes is None and stale is None else None)
        cached = state.answers.get(key, snapshot, config, catalog) if key is not None else None
        if cached is None:
            cached = _judged(obj, snapshot, config, catalog, namespace, enforcement, webhook, runtimes, stale,
                             fit_mode)
            if key is not None and cached.answer.reason != OVER_BUDGET:  # over budget: maybe not the next time
                state.answers.put(key, cached, snapshot, config, catalog)
        if cached.remember is not None:
            state.placeable.record(*cached.remember)
        if cached.unknown_models and state.hub is not None:
            return _with_hub_notes(cached.answer, cached.unknown_models, state.hub)
        return cached.answer
    except Exception:
        log.exception("admission decision failed", extra={"fields": {"uid": req["uid"], "webhook": webhook}})
        return failure_answer(state, webhook)


def _judged(obj: dict[str, Any], snapshot: Snapshot, config: Config, catalog: Catalog, namespace: str,
            enforcement: Enforcement, webhook: Webhook, runtimes: Runtimes | None = None,
            stale: float | None = None, fit_mode: AutofitMode = "off") -> Cached:
    """The answer for an object past the exclusions, and what /validate records of it: a function of the arguments."""
    with budget(config.admission.review_cpu_budget_seconds):
        # Only this first judgement: autofit's re-judgements below must never read "over budget" as "fits".
        judgement = judge(obj, snapshot, config, catalog, namespace=namespace or None, enforcement=enforcement,
                          runtimes=runtimes)
    if webhook == "validate" and stale is not None:
        judgement = softened(judgement, stale)
    if webhook == "validate":
        remember = None
        if judgement.allowed and judgement.demand is not None and obj.get("kind") != "Pod":
            remember = _remember(judgement, namespace)
        return Cached(Answer(judgement.allowed, judgement.code, judgement.message, judgement.warnings), remember,
                      unknown_models(judgement))
    if not judgement.allowed:
        if fit_mode == "update" or (fit_mode == "create" and not already_applied(obj)):
            return Cached(_autofitted(obj, judgement, snapshot, config, catalog, namespace, enforcement, runtimes))
        return Cached(Answer(True, judgement.code))  # /validate denies; mutation stays out of the way
    patch, notes = mutation(obj, judgement, config, snapshot.priority_classes)
    return Cached(Answer(True, judgement.code, warnings=tuple(notes), patch=patch))


def _autofitted(obj: dict[str, Any], judgement: Judgement, snapshot: Snapshot, config: Config, catalog: Catalog,
                namespace: str, enforcement: Enforcement, runtimes: Runtimes | None) -> Answer:
    """The mutating answer for a rejected object that asked for autofit: the fix and its trail, then the usual
    mutation of the fixed object; or, when no fix is eligible, why (validation then rejects as written)."""
    rejudge = rejudger(snapshot, config, catalog, runtimes)
    outcome = autofit(obj, judgement, snapshot, config, rejudge)
    if outcome is None:
        return Answer(True, judgement.code)
    if not outcome.applied:
        return Answer(True, judgement.code, warnings=(f"vramgate autofit: refused: {outcome.reason}",),
                      autofit=outcome.result)
    fixed = jsonpatch.apply_patch(obj, outcome.patch)
    again = judge(fixed, snapshot, config, catalog, namespace=namespace or None, enforcement=enforcement,
                  runtimes=runtimes)
    more, notes = mutation(fixed, again, config, snapshot.priority_classes) if again.allowed else ([], [])
    # JSON Patch operations apply in order: the mutation's, computed on the fixed object, follow the fix's.
    note = f"vramgate autofit: applied {outcome.reason} instead of rejecting: {judgement.message.splitlines()[0]}"
    return Answer(True, "autofit", warnings=(note, *notes), patch=[*outcome.patch, *more], autofit=outcome.result,
                  autofit_change=outcome.reason)


# Denials that rest on the inventory's GPUs (placement.Code, and a selector matching only too-small GPUs):
# a stale inventory may be wrong about them. Declaration errors and malformed objects are not.
CLUSTER_DENIALS = frozenset({*(str(c) for c in Code if c is not Code.FITS), "narrow-selector"})


def _stale_for(state: AppState, config: Config) -> float | None:
    """How long the inventory has not heard from the API server, when past admission.stale_inventory_seconds."""
    limit = config.admission.stale_inventory_seconds
    stale = state.inventory.staleness()
    return stale if limit > 0 and stale is not None and stale > limit else None


def softened(judgement: Judgement, stale: float) -> Judgement:
    """A denial that rests only on the inventory's GPUs, admitted with its reason as a warning: the inventory is
    ``stale`` seconds old, and rejecting a deployment that works is worse than admitting one that may not start."""
    denied = [r.judgement for r in judgement.roles if not r.judgement.allowed] or [judgement]
    if judgement.allowed or any(j.code not in CLUSTER_DENIALS for j in denied):
        return judgement
    note = (f"admitted although it would be rejected: vramgate has not heard from the API server for {stale:.0f} s, "
            "so its view of the GPUs may be out of date (admission.stale_inventory_seconds)")
    return replace(judgement, allowed=True, warnings=(judgement.message, note, *judgement.warnings))


def unknown_models(judgement: Judgement) -> tuple[str, ...]:
    """The models a judgement (and its roles') named that the catalog does not know, each once."""
    demands = [judgement.demand, *(r.judgement.demand for r in judgement.roles)]
    return tuple(dict.fromkeys(d.unknown_model for d in demands if d is not None and d.unknown_model))


def _with_hub_notes(answer: Answer, models: tuple[str, ...], hub: HubResolver) -> Answer:
    """The answer with what the hub lookup of each unknown model says (asking it if nobody has yet)."""
    notes = tuple(n for m in models if (n := hub.note(m)) is not None)
    return replace(answer, warnings=(*answer.warnings, *notes)) if notes else answer


def _remember(judgement: Judgement, namespace: str) -> tuple[str, str, Need] | None:
    """An admitted GPU workload (not a Pod): its need feeds vramgate_workload_placeable_replicas."""
    demand = judgement.demand
    if demand is None or demand.gpus <= 0 or demand.min_per_gpu_mib is None or judgement.view is None:
        return None
    return namespace or judgement.view.namespace or "", judgement.view.ref, Need.of(demand)


def unsynced_answer(state: AppState, webhook: Webhook) -> Answer:
    """Before the first inventory sync: mutation fails open; validation per admission.validation_failure_mode."""
    if webhook == "validate" and state.config.admission.validation_failure_mode == "deny":
        return Answer(False, "inventory-not-synced", "vramgate has not synced its node inventory yet; retry in a "
                      "few seconds (failing closed per admission.validation_failure_mode)")
    return Answer(True, "inventory-not-synced")


def failure_answer(state: AppState, webhook: Webhook) -> Answer:
    """The answer when deciding raised: mutation fails open; validation per admission.validation_failure_mode."""
    state.metrics.admission_errors.labels(webhook).inc()
    if webhook == "validate" and state.config.admission.validation_failure_mode == "deny":
        return Answer(False, "error", "vramgate could not judge this object (internal error); "
                      "failing closed per admission.validation_failure_mode", error=True)
    return Answer(True, "error", error=True)
