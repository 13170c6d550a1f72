"""NVIDIA Dynamo (nvidia.com): DynamoGraphDeployment services and DynamoComponentDeployment, one role each.

Shape from ai-dynamo/dynamo deploy/cloud/operator/api/v1alpha1: a graph's ``spec.services`` maps a service
name to a ``DynamoComponentDeploymentSharedSpec`` (``replicas``, ``resources.{limits,requests}.gpu``,
``envs``, ``extraPodSpec`` — a PodSpec whose ``mainContainer`` is the engine's container —, ``multinode.
nodeCount``: each of that many pods gets the GPU limit); a DynamoComponentDeployment is one such spec. The
operator puts the GPU count on the main container as ``nvidia.com/gpu``. v1beta1's ``components[]`` with a
``podTemplate`` reads the same way.
"""

from __future__ import annotations

from typing import Any

from .runtimes import Context
from .view import PodView, Role, RoleSet, WorkloadError, as_dict, as_list, copied, count, identity, inherit_annotations

GROUP = "nvidia.com"
KINDS = frozenset({"DynamoGraphDeployment", "DynamoComponentDeployment"})


def roles(obj: dict[str, Any], ctx: Context) -> RoleSet:
    """One role per service (component); a multinode service is a group of ``nodeCount`` pods."""
    kind = str(obj.get("kind"))
    name, ns, meta = identity(obj, ctx.namespace)
    spec = as_dict(obj.get("spec"))
    shared_env = [e for e in as_list(spec.get("envs")) if isinstance(e, dict)]
    if kind == "DynamoComponentDeployment":
        services: list[tuple[str, dict[str, Any]]] = [(str(spec.get("serviceName") or name), spec)]
    elif isinstance(spec.get("services"), dict):
        services = [(str(k), as_dict(v)) for k, v in spec["services"].items()]
    else:
        services = [(str(as_dict(c).get("name") or as_dict(c).get("componentName") or f"component-{i}"), as_dict(c))
                    for i, c in enumerate(as_list(spec.get("components")))]
    out = [_role(kind, ns, name, meta, service, part, shared_env, ctx.gpu_resource) for service, part in services]
    return RoleSet(kind, name, tuple(r for r in out if r is not None), grouped=True)


def _role(kind: str, ns: str, name: str, meta: dict[str, Any], service: str, part: dict[str, Any],
          shared_env: list[dict[str, Any]], resource: str) -> Role | None:
    where = f"spec.services.{service}"
    template = as_dict(part.get("podTemplate"))
    pod = copied(as_dict(template.get("spec")) or as_dict(part.get("extraPodSpec")))
    main = as_dict(pod.pop("mainContainer", None))
    containers = [c for c in as_list(pod.get("containers")) if isinstance(c, dict)]
    if main or not containers:
        main = {"name": "main", **main}
        containers = [main, *containers]
    gpus = _gpus(as_dict(part.get("resources")), f"{where}.resources")
    if gpus is not None:
        limits = as_dict(as_dict(containers[0].get("resources")).get("limits"))
        if resource not in limits:
            res = as_dict(containers[0].get("resources"))
            containers[0] = {**containers[0], "resources": {**res, "limits": {**limits, resource: str(gpus)}}}
    env = [e for e in as_list(part.get("envs")) if isinstance(e, dict)]
    if env or shared_env:
        containers[0] = {**containers[0], "env": [*shared_env, *env, *as_list(containers[0].get("env"))]}
    pod["containers"] = containers
    nodes = count(as_dict(part.get("multinode")).get("nodeCount"), 1, f"{where}.multinode.nodeCount", minimum=1)
    replicas = count(part.get("replicas"), 1, f"{where}.replicas")
    pod_meta = {"annotations": {**as_dict(part.get("annotations")),
                                **as_dict(as_dict(part.get("extraPodMetadata")).get("annotations")),
                                **as_dict(as_dict(template.get("metadata")).get("annotations"))}}
    view = PodView(kind, ns, name, inherit_annotations(pod_meta, meta), pod, service, nodes)
    return Role(service, view, nodes, replicas * nodes)


def _gpus(resources: dict[str, Any], where: str) -> int | None:
    for section in ("limits", "requests"):
        raw = as_dict(resources.get(section)).get("gpu")
        if raw is not None and str(raw).strip():
            try:
                return max(int(str(raw)), 0)
            except ValueError:
                raise WorkloadError(f"{where}.{section}.gpu must be a whole number, not {raw!r}") from None
    return None
