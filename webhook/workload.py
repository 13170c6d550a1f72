"""Where a workload keeps its pod: the Pod itself or the pod template of a controller kind."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# kind → path from the object to its pod template (None for a Pod itself).
TEMPLATE_PATHS: dict[str, tuple[str, ...] | None] = {
    "Pod": None,
    "Deployment": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "ReplicationController": ("spec", "template"),
    "Job": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
}
WORKLOAD_KINDS = frozenset(TEMPLATE_PATHS)


class WorkloadError(ValueError):
    """The object is not a workload, or its pod spec is malformed."""


@dataclass(frozen=True)
class PodView:
    """A workload seen through its pod: identity, pod metadata and pod spec (all read-only dicts)."""

    kind: str
    namespace: str
    name: str
    meta: dict[str, Any]  # the Pod's or the template's metadata
    spec: dict[str, Any]  # the PodSpec

    @property
    def annotations(self) -> dict[str, str]:
        return _strings(self.meta.get("annotations"))

    @property
    def labels(self) -> dict[str, str]:
        return _strings(self.meta.get("labels"))

    @property
    def owner_kinds(self) -> frozenset[str]:
        """Kinds of the controllers that own this pod (a ReplicaSet, a Job, a DaemonSet …)."""
        return frozenset(
            o["kind"] for o in as_list(self.meta.get("ownerReferences"))
            if isinstance(o, dict) and o.get("controller") and isinstance(o.get("kind"), str)
        )

    @property
    def ref(self) -> str:
        """``kind/name`` as kubectl prints it (the namespace is the caller's context)."""
        return f"{self.kind.lower()}/{self.name or '<unnamed>'}"

    def containers(self, include_init: bool = True) -> list[dict[str, Any]]:
        """App containers, then init containers, skipping anything that is not a mapping."""
        out: list[dict[str, Any]] = []
        keys = ("containers", "initContainers") if include_init else ("containers",)
        for key in keys:
            items = self.spec.get(key) or []
            if not isinstance(items, list):
                raise WorkloadError(f"spec.{key} must be a list")
            out.extend(c for c in items if isinstance(c, dict))
        return out


def as_list(value: Any) -> list[Any]:
    """``value`` when it is a list, else an empty one (objects may come from files, not the API server)."""
    return value if isinstance(value, list) else []


def _strings(value: Any) -> dict[str, str]:
    """A string map as the API guarantees it; anything else in it (from a hand-made review) is dropped."""
    if not isinstance(value, dict) or not value:
        return {}
    if all(type(v) is str for v in value.values()):
        return value
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}


def _dig(obj: dict[str, Any], path: tuple[str, ...]) -> Any:
    cur: Any = obj
    for key in path:
        if not isinstance(cur, dict):
            return None
        cur = cur.get(key)
    return cur


def pod_view(obj: Any, namespace: str | None = None) -> PodView | None:
    """The pod view of a workload object, or None when the kind carries no pod."""
    if not isinstance(obj, dict):
        raise WorkloadError("object must be a mapping")
    kind = obj.get("kind")
    if not isinstance(kind, str) or kind not in TEMPLATE_PATHS:
        return None
    meta = obj.get("metadata") or {}
    if not isinstance(meta, dict):
        raise WorkloadError("metadata must be a mapping")
    name = meta.get("name") or meta.get("generateName") or ""
    ns = meta.get("namespace") or namespace or ""
    path = TEMPLATE_PATHS[kind]
    if path is None:
        pod_meta, spec = meta, obj.get("spec")
    else:
        template = _dig(obj, path)
        if template is None:
            raise WorkloadError(f"{kind} has no {'.'.join(path)}")
        if not isinstance(template, dict):
            raise WorkloadError(f"{'.'.join(path)} must be a mapping")
        pod_meta, spec = template.get("metadata") or {}, template.get("spec")
    if not isinstance(spec, dict):
        raise WorkloadError(f"{kind} has no pod spec")
    if not isinstance(pod_meta, dict):
        raise WorkloadError("pod template metadata must be a mapping")
    return PodView(kind=kind, namespace=str(ns), name=str(name), meta=pod_meta, spec=spec)
