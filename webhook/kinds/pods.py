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
# API groups of those kinds ("" is core v1). A `Job` of batch.volcano.sh is not a batch/v1 Job.
BUILTIN_GROUPS = frozenset({"", "apps", "batch", "extensions"})


def api_group(obj: dict[str, Any]) -> str:
    """The API group of an object's ``apiVersion`` (``""`` for core ``v1`` and when there is none)."""
    api = obj.get("apiVersion")
    return api.rpartition("/")[0] if isinstance(api, str) else ""


def is_builtin(obj: dict[str, Any]) -> bool:
    """Whether the object is one of Kubernetes' own pod-carrying kinds (kind and API group both)."""
    kind = obj.get("kind")
    return isinstance(kind, str) and kind in TEMPLATE_PATHS and api_group(obj) in BUILTIN_GROUPS


def pod_part(obj: dict[str, Any]) -> Any:
    """Where a built-in workload keeps its pod as written (its pod template; a Pod, or any other kind: the object
    itself), without judging it: None where a step is missing, whatever sits there otherwise. Never raises."""
    path = TEMPLATE_PATHS.get(str(obj.get("kind")))
    return obj if path is None else dig(obj, path)


def pod_view(obj: Any, namespace: str | None = None) -> PodView | None:
    """The pod view of a built-in workload object, or None when the kind carries no pod."""
    if not isinstance(obj, dict):
        raise WorkloadError("object must be a mapping")
    kind = obj.get("kind")
    if not isinstance(kind, str) or kind not in TEMPLATE_PATHS or api_group(obj) not in BUILTIN_GROUPS:
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
    return PodView(kind=kind, namespace=ns, name=name, meta=pod_meta, spec=spec,
                   generated_claims=_generated_claims(obj) if path is None else ())


def _generated_claims(pod: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """A Pod's ``status.resourceClaimStatuses``: the ResourceClaim the resourceclaim controller made per template
    claim (``{name, resourceClaimName}``, k8s.io/api core/v1 PodResourceClaimStatus)."""
    status = pod.get("status")
    raw = status.get("resourceClaimStatuses") if isinstance(status, dict) else None
    out = []
    for s in raw if isinstance(raw, list) else []:
        if isinstance(s, dict) and isinstance(s.get("name"), str) and isinstance(s.get("resourceClaimName"), str):
            out.append((s["name"], s["resourceClaimName"]))
    return tuple(out)
