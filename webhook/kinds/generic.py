"""Any other kind that carries pod specs: each pod spec found under ``spec`` judged as one role, said so.

Operators put their pods in many places (``extraPodSpec``, ``podTemplate``, ``roles[].template``,
``workerGroupSpecs[].template``, …). A kind vramgate has no module for is read generically: every mapping
under ``spec`` that holds a ``containers`` list of containers is a pod spec; its role is the path it sits
at, its replica count the nearest ``replicas`` above it. Each role carries a warning naming the kind and the
path, so nobody mistakes a generic reading for an exact one.
"""

from __future__ import annotations

import re
from typing import Any

from .runtimes import Context
from .view import PodView, Role, RoleSet, as_dict, identity, inherit_annotations

# A generic reading stops here: a legitimate object holds a handful of pod specs a few levels down.
MAX_DEPTH = 12
MAX_TEMPLATES = 32
# Fields that hold pods of one model instance together, and the size they give it (LWS-shaped subtrees: a
# DisaggregatedSet's roles, RoleBasedGroup's leaderWorkerPattern): read as the LWS `size`.
_GROUP_FIELDS = ("leaderWorkerTemplate", "leaderWorkerPattern", "leaderWorkerSet")
# Fields that hold templates other parts refer to, or sidecars of the same pod: not roles of their own
# (RoleBasedGroup's roleTemplates, its v1alpha1 engineRuntimes).
_NOT_ROLES = frozenset({"roleTemplates", "engineRuntimes", "podTemplates"})


def _is_pod_spec(value: Any) -> bool:
    containers = value.get("containers") if isinstance(value, dict) else None
    return isinstance(containers, list) and bool(containers) and all(
        isinstance(c, dict) and ("image" in c or "name" in c) for c in containers)


def pod_specs(spec: dict[str, Any]) -> list[tuple[str, dict[str, Any], dict[str, Any], int, int]]:
    """``(path, pod metadata, pod spec, replicas, group size)`` of every pod spec under ``spec``, in order."""
    found: list[tuple[str, dict[str, Any], dict[str, Any], int, int]] = []

    def walk(node: Any, path: str, meta: dict[str, Any], replicas: int, group: int, depth: int) -> None:
        if depth > MAX_DEPTH or len(found) >= MAX_TEMPLATES:
            return
        if isinstance(node, dict):
            here = node.get("replicas")
            if isinstance(here, int) and not isinstance(here, bool) and here >= 0:
                replicas = here
            if _is_pod_spec(node):
                found.append((path, meta, node, replicas, group))
                return
            inner = node.get("spec")
            template_meta = node.get("metadata")
            if isinstance(template_meta, dict) and isinstance(inner, dict) and _is_pod_spec(inner):
                found.append((f"{path}.spec", template_meta, inner, replicas, group))  # a PodTemplateSpec
                return
            for key, value in node.items():
                if not isinstance(key, str) or key in ("metadata", "status") or key in _NOT_ROLES:
                    continue
                size = value.get("size") if key in _GROUP_FIELDS and isinstance(value, dict) else None
                inner_group = size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else group
                walk(value, f"{path}.{key}", meta, replicas, inner_group, depth + 1)
        elif isinstance(node, list):
            for i, item in enumerate(node):
                name = item.get("name") if isinstance(item, dict) else None
                label = f"{path}[{name}]" if isinstance(name, str) and name else f"{path}[{i}]"
                walk(item, label, meta, replicas, group, depth + 1)

    walk(spec, "spec", {}, 1, 1, 0)
    return found


def _role_name(path: str) -> str:
    """``spec.roles[prefill].template.spec`` → ``prefill``; ``spec.workerSpec.template.spec`` → ``workerSpec``."""
    named = re.findall(r"\[([^\]]+)\]", path)
    for name in reversed(named):
        if not name.isdigit():
            return name
    parts = [p for p in re.sub(r"\[\d+\]", "", path).split(".") if p not in ("spec", "template", "podTemplate")]
    return ".".join(parts) or "pod"


def roles(obj: dict[str, Any], ctx: Context) -> RoleSet | None:
    """The pod specs of an unknown kind, one role each, or None when it holds none."""
    specs = pod_specs(as_dict(obj.get("spec")))
    if not specs:
        return None
    kind = str(obj.get("kind"))
    name, ns, meta = identity(obj, ctx.namespace)
    api = str(obj.get("apiVersion") or "")
    out = []
    warnings = []
    for path, pod_meta, pod, replicas, group in specs:
        role = _role_name(path)
        view = PodView(kind, ns, name, inherit_annotations(pod_meta, meta), pod, role, group)
        out.append(Role(role, view, group, replicas * group))
        warnings.append(f"{kind.lower()}/{name} ({role}): {kind}{' (' + api + ')' if api else ''} is read "
                        f"generically: the pod spec at {path}, as its operator would run it unchanged")
    return RoleSet(kind, name, tuple(out), tuple(warnings), grouped=len(out) > 1)
