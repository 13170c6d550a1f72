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


def _is_pod_spec(value: Any) -> bool:
    containers = value.get("containers") if isinstance(value, dict) else None
    return isinstance(containers, list) and bool(containers) and all(
        isinstance(c, dict) and ("image" in c or "name" in c) for c in containers)


def pod_specs(spec: dict[str, Any]) -> list[tuple[str, dict[str, Any], dict[str, Any], int]]:
    """``(path, pod metadata, pod spec, replicas)`` of every pod spec under ``spec``, in document order."""
    found: list[tuple[str, dict[str, Any], dict[str, Any], int]] = []

    def walk(node: Any, path: str, meta: dict[str, Any], replicas: int, depth: int) -> None:
        if depth > MAX_DEPTH or len(found) >= MAX_TEMPLATES:
            return
        if isinstance(node, dict):
            here = node.get("replicas")
            if isinstance(here, int) and not isinstance(here, bool) and here >= 0:
                replicas = here
            if _is_pod_spec(node):
                found.append((path, meta, node, replicas))
                return
            inner = node.get("spec")
            template_meta = node.get("metadata")
            if isinstance(template_meta, dict) and isinstance(inner, dict) and _is_pod_spec(inner):
                found.append((f"{path}.spec", template_meta, inner, replicas))  # a PodTemplateSpec
                return
            for key, value in node.items():
                if isinstance(key, str) and key not in ("metadata", "status"):
                    walk(value, f"{path}.{key}", meta, replicas, depth + 1)
        elif isinstance(node, list):
            for i, item in enumerate(node):
                name = item.get("name") if isinstance(item, dict) else None
                label = f"{path}[{name}]" if isinstance(name, str) and name else f"{path}[{i}]"
                walk(item, label, meta, replicas, depth + 1)

    walk(spec, "spec", {}, 1, 0)
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
    for path, pod_meta, pod, replicas in specs:
        role = _role_name(path)
        out.append(Role(role, PodView(kind, ns, name, inherit_annotations(pod_meta, meta), pod, role, 1), 1, replicas))
        warnings.append(f"{kind.lower()}/{name} ({role}): {kind}{' (' + api + ')' if api else ''} is read "
                        f"generically: the pod spec at {path}, as its operator would run it unchanged")
    return RoleSet(kind, name, tuple(out), tuple(warnings), grouped=len(out) > 1)
