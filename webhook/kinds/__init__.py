"""Workload kinds: one module per kind family turns an object into the pod roles it runs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from . import (
    aibrix,
    aibrix_claim,
    argo,
    dynamo,
    generic,
    grove,
    jobset,
    kaito,
    kaito_multirole,
    knative,
    kserve,
    kubeai,
    llmaz,
    lws,
    nim,
    ome,
    prodstack,
    ray,
    trainer,
    volcano,
)
from .pods import POD_KINDS, TEMPLATE_PATHS, api_group, is_builtin, pod_part, pod_view
from .runtimes import ATTACHED_GROUP, NO_RUNTIMES, RUNTIME_KINDS, Context, Runtimes
from .view import DeclaredValueError, PodView, Role, RoleSet, WorkloadError, as_list

_Extract = Callable[[dict[str, Any], Context], RoleSet]


def _keyed(group: str, kinds: frozenset[str], extract: _Extract) -> dict[tuple[str, str], _Extract]:
    return {(group, kind): extract for kind in kinds}


# Every reader, keyed by API group and kind: a namesake of another group (OME's ``ome.io`` InferenceService,
# a ``Model`` of some other project) is never read as the one a module knows. Versions of one group whose
# fields differ are told apart inside the module (Dynamo's v1beta1 ``components``, KAITO's v1alpha1 fields).
READERS: dict[tuple[str, str], _Extract] = {
    **_keyed(lws.GROUP, lws.KINDS, lws.roles),
    **_keyed(kserve.GROUP, kserve.KINDS, kserve.roles),
    **_keyed(ray.GROUP, ray.KINDS, ray.roles),
    **_keyed(trainer.GROUP, trainer.KINDS, trainer.roles),
    **_keyed(trainer.PYTORCH_GROUP, trainer.PYTORCH_KINDS, trainer.roles),
    **_keyed(jobset.GROUP, jobset.KINDS, jobset.roles),
    **_keyed(kubeai.API_GROUP, kubeai.KINDS, kubeai.roles),
    **_keyed(nim.GROUP, nim.KINDS, nim.roles),
    **_keyed(dynamo.GROUP, dynamo.KINDS, dynamo.roles),
    **_keyed(argo.GROUP, argo.KINDS, argo.roles),
    **_keyed(kaito.GROUP, kaito.KINDS, kaito.roles),
    **_keyed(aibrix.GROUP, aibrix.KINDS, aibrix.roles),
    **_keyed(prodstack.GROUP, prodstack.KINDS, prodstack.roles),
    **_keyed(volcano.GROUP, volcano.KINDS, volcano.roles),
    **_keyed(knative.GROUP, knative.KINDS, knative.roles),
    **_keyed(ome.GROUP, ome.KINDS, ome.roles),
    **_keyed(grove.GROUP, grove.KINDS, grove.roles),
    **_keyed(llmaz.GROUP, llmaz.KINDS, llmaz.roles),
    **_keyed(kaito_multirole.GROUP, kaito_multirole.KINDS, kaito_multirole.roles),
    **_keyed(aibrix_claim.GROUP, aibrix_claim.KINDS, aibrix_claim.roles),
}
# Groups whose kinds share a name with Kubernetes' own (Service, Job): read only when the apiVersion says so.
_GROUP_ONLY = frozenset({volcano.GROUP, knative.GROUP})
# The kinds LLMs ship in (custom resources), and every kind vramgate judges (by name: metrics, audit lists).
CUSTOM_KINDS = frozenset(k for _, k in READERS)
KINDS = POD_KINDS | CUSTOM_KINDS
# Kinds that hold pod templates without running them (defaults an operator copies from): never read generically.
_TEMPLATE_SUFFIXES = ("Runtime", "Config", "Template", "Definition")


def reader_key(obj: dict[str, Any]) -> tuple[tuple[str, str] | None, str]:
    """The ``(group, kind)`` whose reader reads ``obj`` (None: the generic reader), and a warning when that is
    a guess: an object with no apiVersion (a hand-written file; the API server always sets one) is read by
    the one reader of its kind name, said so; a kind name two groups share is then not guessed at."""
    kind = str(obj.get("kind"))
    api = obj.get("apiVersion")
    if isinstance(api, str) and api:
        key = (api_group(obj), kind)
        return (key if key in READERS else None), ""
    named = sorted(g for g, k in READERS if k == kind and g not in _GROUP_ONLY)
    if len(named) == 1:
        return (named[0], kind), f"{kind} has no apiVersion: read as {kind} of {named[0]}"
    if named:
        return None, f"{kind} has no apiVersion, and {' and '.join(named)} both have one: read generically"
    return None, ""


def nothing_to_judge(obj: dict[str, Any]) -> str:
    """Why ``vramgate check`` judges no pod of this object, for the line it prints instead of a verdict."""
    kind = str(obj.get("kind", "?"))
    if kind in RUNTIME_KINDS or kind.endswith(_TEMPLATE_SUFFIXES):
        return f"kind {kind}: a runtime or template the workloads refer to, judged with them"
    if isinstance(obj, dict) and reader_key(obj)[0] is not None:
        # A kind vramgate reads that runs no pod here (an OME InferenceService without its runtime, a ModelClaim):
        # its reader's warning, where it gives one, says why.
        return f"kind {kind}: nothing to judge here (no pod of its own in view)"
    return f"kind {kind}: nothing to judge (no pod template found)"


def roles(obj: Any, ctx: Context | None = None) -> RoleSet | None:
    """The roles of a workload object, or None when its kind carries no pod. Raises WorkloadError.

    Built-in kinds by kind and API group; the kinds LLMs ship in by their module, keyed by API group and kind;
    any other kind (a namesake of another group included) by the generic reader (its pod specs, each with a
    warning), unless it is a runtime or template kind.
    """
    if not isinstance(obj, dict):
        raise WorkloadError("object must be a mapping")
    ctx = ctx or Context()
    kind = obj.get("kind")
    if not isinstance(kind, str):
        return None
    if kind in POD_KINDS and is_builtin(obj):
        view = pod_view(obj, ctx.namespace)
        assert view is not None
        return RoleSet(kind, view.name, (Role("", view),))
    key, note = reader_key(obj)
    if key is not None:
        return _noted(READERS[key](obj, ctx), note)
    if kind in RUNTIME_KINDS or kind.endswith(_TEMPLATE_SUFFIXES):
        return None
    return _noted(generic.roles(obj, ctx), note)


def with_attachments(view: PodView, runtimes: Runtimes | None) -> tuple[PodView, str | None]:
    """A built-in workload's pod with what objects in the same files say about it that it does not (the model a
    ModelClaim attaches to its warm pool), and a warning where they disagree. Nothing without runtimes."""
    if not runtimes:
        return view, None
    return aibrix_claim.attach(view, runtimes)


def _noted(rs: RoleSet | None, note: str) -> RoleSet | None:
    if rs is None or not note:
        return rs
    return replace(rs, warnings=(*rs.warnings, f"{rs.ref}: {note}"))


# Kinds the workloads of the same files are judged with although they are not runtimes (a ModelClaim's model).
ATTACHED_KINDS = frozenset(ATTACHED_GROUP)

__all__ = [
    "ATTACHED_KINDS",
    "CUSTOM_KINDS",
    "KINDS",
    "NO_RUNTIMES",
    "POD_KINDS",
    "READERS",
    "RUNTIME_KINDS",
    "TEMPLATE_PATHS",
    "Context",
    "DeclaredValueError",
    "PodView",
    "Role",
    "RoleSet",
    "Runtimes",
    "WorkloadError",
    "api_group",
    "as_list",
    "is_builtin",
    "pod_part",
    "pod_view",
    "reader_key",
    "roles",
    "with_attachments",
]
