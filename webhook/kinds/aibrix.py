"""AIBrix RayClusterFleet (orchestration.aibrix.ai): ``spec.replicas`` RayClusters of ``spec.template.spec``.

Shape from vllm-project/aibrix api/orchestration/v1alpha1/rayclusterfleet_types.go: a Deployment-like fleet
whose template's spec is a KubeRay RayClusterSpec (``headGroupSpec``, ``workerGroupSpecs``), read as
``ray.roles`` reads a RayCluster. StormService (the same group) is read generically.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from . import ray
from .runtimes import Context
from .view import Role, RoleSet, WorkloadError, as_dict, count

GROUP = "orchestration.aibrix.ai"
KINDS = frozenset({"RayClusterFleet"})


def roles(obj: dict[str, Any], ctx: Context) -> RoleSet:
    """The Ray groups of one cluster of the fleet, each role's replicas times the fleet's."""
    kind = str(obj.get("kind"))
    spec = as_dict(obj.get("spec"))
    template = as_dict(spec.get("template"))
    cluster = template.get("spec")
    if not isinstance(cluster, dict):
        raise WorkloadError("spec.template.spec must be a RayClusterSpec")
    fleet = count(spec.get("replicas"), 1, "spec.replicas")
    meta = {**as_dict(obj.get("metadata"))}
    found = ray.roles({"kind": "RayCluster", "metadata": meta, "spec": cluster}, ctx)
    out = tuple(Role(r.name, replace(r.view, kind=kind), r.group_size, r.replicas * fleet) for r in found.roles)
    warnings = tuple(w.replace("raycluster/", f"{kind.lower()}/") for w in found.warnings)
    return RoleSet(kind, found.name, out, warnings, grouped=True)
