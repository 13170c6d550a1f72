"""Workload kinds: one module per kind family turns an object into the pod roles it runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import jobset, kserve, kubeai, lws, nim, ray, trainer
from .pods import POD_KINDS, TEMPLATE_PATHS, pod_view
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
}
# The kinds LLMs ship in (custom resources), and every kind vramgate judges.
CUSTOM_KINDS = frozenset(_BY_KIND)
KINDS = POD_KINDS | CUSTOM_KINDS


def roles(obj: Any, ctx: Context | None = None) -> RoleSet | None:
    """The roles of a workload object, or None when its kind carries no pod. Raises WorkloadError."""
    if not isinstance(obj, dict):
        raise WorkloadError("object must be a mapping")
    ctx = ctx or Context()
    kind = obj.get("kind")
    if not isinstance(kind, str):
        return None
    if kind in POD_KINDS:
        view = pod_view(obj, ctx.namespace)
        assert view is not None
        return RoleSet(kind, view.name, (Role("", view),))
    extract = _BY_KIND.get(kind)
    if extract is None:
        return None
    return extract(obj, ctx)


__all__ = [
    "CUSTOM_KINDS", "KINDS", "NO_RUNTIMES", "POD_KINDS", "RUNTIME_KINDS", "TEMPLATE_PATHS", "Context",
    "DeclaredValueError", "PodView", "Role", "RoleSet", "Runtimes", "WorkloadError", "as_list", "pod_view", "roles",
]
