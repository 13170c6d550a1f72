"""Workload kinds: one module per kind family turns an object into the pod roles it runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import (
    aibrix,
    argo,
    dynamo,
    generic,
    jobset,
    kaito,
    knative,
    kserve,
    kubeai,
    lws,
    nim,
    prodstack,
    ray,
    trainer,
    volcano,
)
from .pods import POD_KINDS, TEMPLATE_PATHS, api_group, is_builtin, pod_part, pod_view
from .runtimes import NO_RUNTIMES, RUNTIME_KINDS, Context, Runtimes
from .view import DeclaredValueError, PodView, Role, RoleSet, WorkloadError, as_list

_Extract = Callable[[dict[str, Any], Context], RoleSet]
_BY_KIND: dict[str, _Extract] = {
    **dict.fromkeys(lws.KINDS, lws.roles),
    **dict.fromkeys(kserve.KINDS, kserve.roles),
    **dict.fromkeys(ray.KINDS, ray.roles),
    **dict.fromkeys(trainer.KINDS, trainer.roles),
    **dict.fromkeys(jobset.KINDS, jobset.roles),
    **dict.fromkeys(kubeai.KINDS, kubeai.roles),
    **dict.fromkeys(nim.KINDS, nim.roles),
    **dict.fromkeys(dynamo.KINDS, dynamo.roles),
    **dict.fromkeys(argo.KINDS, argo.roles),
    **dict.fromkeys(kaito.KINDS, kaito.roles),
    **dict.fromkeys(aibrix.KINDS, aibrix.roles),
    **dict.fromkeys(prodstack.KINDS, prodstack.roles),
}
# Kinds whose name a built-in kind also has: told apart by their API group.
_BY_GROUP_KIND: dict[tuple[str, str], _Extract] = {
    **{(volcano.GROUP, k): volcano.roles for k in volcano.KINDS},
    **{(knative.GROUP, k): knative.roles for k in knative.KINDS},
}
# The kinds LLMs ship in (custom resources), and every kind vramgate judges.
CUSTOM_KINDS = frozenset(_BY_KIND) | frozenset(k for _, k in _BY_GROUP_KIND)
KINDS = POD_KINDS | CUSTOM_KINDS
# Kinds that hold pod templates without running them (defaults an operator copies from): never read generically.
_TEMPLATE_SUFFIXES = ("Runtime", "Config", "Template", "Definition")


def nothing_to_judge(obj: dict[str, Any]) -> str:
    """Why ``vramgate check`` judges no pod of this object, for the line it prints instead of a verdict."""
    kind = str(obj.get("kind", "?"))
    if kind in RUNTIME_KINDS or kind.endswith(_TEMPLATE_SUFFIXES):
        return f"kind {kind}: a runtime or template the workloads refer to, judged with them"
    return f"kind {kind}: nothing to judge (no pod template found)"


def roles(obj: Any, ctx: Context | None = None) -> RoleSet | None:
    """The roles of a workload object, or None when its kind carries no pod. Raises WorkloadError.

    Built-in kinds by kind and API group; the kinds LLMs ship in by their module; any other kind by the
    generic reader (its pod specs, each with a warning), unless it is a runtime or template kind.
    """
    if not isinstance(obj, dict):
        raise WorkloadError("object must be a mapping")
    ctx = ctx or Context()
    kind = obj.get("kind")
    if not isinstance(kind, str):
        return None
    group = api_group(obj)
    if kind in POD_KINDS and is_builtin(obj):
        view = pod_view(obj, ctx.namespace)
        assert view is not None
        return RoleSet(kind, view.name, (Role("", view),))
    extract = _BY_GROUP_KIND.get((group, kind)) or (_BY_KIND.get(kind) if kind not in POD_KINDS else None)
    if extract is not None:
        return extract(obj, ctx)
    if kind in RUNTIME_KINDS or kind.endswith(_TEMPLATE_SUFFIXES):
        return None
    return generic.roles(obj, ctx)


__all__ = [
    "CUSTOM_KINDS",
    "KINDS",
    "NO_RUNTIMES",
    "POD_KINDS",
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
    "roles",
]
