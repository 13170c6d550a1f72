"""GPUs in use: what a bound, non-terminal pod holds, summed per node."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .accelerators import resources_of_vendors

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


def container_gpus(container: Any, resource: str = "nvidia.com/gpu") -> int:
    """A container's GPUs from its requests (or limits: for extended resources a limit implies the request)."""
    if not isinstance(container, dict):
        return 0
    res = container.get("resources") or {}
    if not isinstance(res, dict):
        return 0
    for key in ("requests", "limits"):  # extended resources: a limit alone implies the request
        section = res.get(key) or {}
        if isinstance(section, dict) and resource in section:
            try:
                return max(0, int(str(section[resource])))
            except ValueError:
                return 0
    return 0


def pod_gpus(pod: dict[str, Any], resource: str = "nvidia.com/gpu") -> int:
    """GPUs a pod holds: max(sum of app containers, largest init container), as the scheduler counts."""
    spec = pod.get("spec") or {}
    if not isinstance(spec, dict):
        return 0
    app = sum(container_gpus(c, resource) for c in spec.get("containers") or [])
    init = max((container_gpus(c, resource) for c in spec.get("initContainers") or []), default=0)
    return max(app, init)


def pod_gpus_of(pod: dict[str, Any], resource: str = "nvidia.com/gpu") -> int:
    """GPUs a pod holds of ``resource`` (the config's, NVIDIA's) or of any vendor in webhook/data/accelerators.yaml
    (``amd.com/gpu``): a pod asks one vendor's, and a node's free GPUs are counted in its own vendor's."""
    return pod_gpus(pod, resource) + sum(pod_gpus(pod, r) for r in resources_of_vendors() if r != resource)


def holds_gpus(pod: dict[str, Any]) -> bool:
    """Whether a pod still holds its devices: bound to a node and not in a terminal phase."""
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    return bool(isinstance(spec, dict) and spec.get("nodeName")) and (
        not isinstance(status, dict) or status.get("phase") not in TERMINAL_PHASES
    )


def used_per_node(pods: Iterable[dict[str, Any]], resource: str = "nvidia.com/gpu") -> dict[str, int]:
    """GPUs requested by non-terminal pods, per node name (each vendor's resource: :func:`pod_gpus_of`)."""
    used: dict[str, int] = {}
    for pod in pods:
        if holds_gpus(pod):
            n = pod_gpus_of(pod, resource)
            if n:
                node = pod["spec"]["nodeName"]
                used[node] = used.get(node, 0) + n
    return used
