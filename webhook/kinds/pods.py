"""The built-in kinds: a Pod, or the one pod template of a Deployment, StatefulSet, Job, CronJob, …"""

from __future__ import annotations

from typing import Any

from .view import PodView, WorkloadError, dig, identity

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
POD_KINDS = frozenset(TEMPLATE_PATHS)


def pod_view(obj: Any, namespace: str | None = None) -> PodView | None:
    """The pod view of a built-in workload object, or None when the kind carries no pod."""
    if not isinstance(obj, dict):
        raise WorkloadError("object must be a mapping")
    kind = obj.get("kind")
    if not isinstance(kind, str) or kind not in TEMPLATE_PATHS:
        return None
    name, ns, meta = identity(obj, namespace)
    path = TEMPLATE_PATHS[kind]
    if path is None:
        pod_meta, spec = meta, obj.get("spec")
    else:
        template = dig(obj, path)
        if template is None:
            raise WorkloadError(f"{kind} has no {'.'.join(path)}")
        if not isinstance(template, dict):
            raise WorkloadError(f"{'.'.join(path)} must be a mapping")
        pod_meta, spec = template.get("metadata") or {}, template.get("spec")
    if not isinstance(spec, dict):
        raise WorkloadError(f"{kind} has no pod spec")
    if not isinstance(pod_meta, dict):
        raise WorkloadError("pod template metadata must be a mapping")
    return PodView(kind=kind, namespace=ns, name=name, meta=pod_meta, spec=spec)
