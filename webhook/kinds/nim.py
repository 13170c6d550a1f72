"""NVIDIA NIM Operator's NIMService (apps.nvidia.com): the one NIM container the operator runs.

Shape from NVIDIA/k8s-nim-operator api/apps/v1alpha1/nimservice_types.go: ``spec.image.{repository,tag}``,
``spec.env`` (a list of EnvVar), ``spec.resources`` (ResourceRequirements), ``spec.replicas``,
``spec.nodeSelector``, ``spec.tolerations``; the operator builds a Deployment whose container runs that
image with those env and resources. With ``spec.multiNode.parallelism`` (``pipeline``, ``tensor``) it builds
a LeaderWorkerSet of ``pipeline`` pods instead (``GetLWSSize``), each with ``tensor`` GPUs unless the
resources name them, and sets ``NIM_TENSOR_PARALLEL_SIZE`` / ``NIM_PIPELINE_PARALLEL_SIZE``
(api/apps/v1alpha1/nimservice_types.go ``getLWSCommonEnv``; platform/standalone/nimservice.go).
"""

from __future__ import annotations

from typing import Any

from .runtimes import Context
from .view import PodView, Role, RoleSet, WorkloadError, as_dict, as_list, count, identity, inherit_annotations

# NVIDIA/k8s-nim-operator api/apps/v1alpha1/groupversion_info.go.
GROUP = "apps.nvidia.com"
KINDS = frozenset({"NIMService"})


def roles(obj: dict[str, Any], ctx: Context) -> RoleSet:
    """One role: the NIM container with the image, env and resources the NIMService names."""
    kind = str(obj.get("kind"))
    name, ns, meta = identity(obj, ctx.namespace)
    spec = as_dict(obj.get("spec"))
    image = as_dict(spec.get("image"))
    repo, tag = image.get("repository"), image.get("tag")
    if repo is not None and not isinstance(repo, str):
        raise WorkloadError("spec.image.repository must be a string")
    container: dict[str, Any] = {"name": "nim", "image": f"{repo}:{tag}" if repo and tag else str(repo or "")}
    env = [e for e in as_list(spec.get("env")) if isinstance(e, dict)]
    if env:
        container["env"] = env
    resources = as_dict(spec.get("resources"))
    if resources:
        container["resources"] = resources
    pod: dict[str, Any] = {"containers": [container]}
    for key in ("nodeSelector", "tolerations", "affinity", "runtimeClassName"):
        if key in spec:
            pod[key] = spec[key]
    annotations = {str(k): str(v) for k, v in as_dict(spec.get("annotations")).items()}
    # The NIMCache the service mounts names the profile's precision (spec.source.ngc.model.precision).
    cache_name = as_dict(as_dict(spec.get("storage")).get("nimCache")).get("name")
    cache = ctx.runtimes.get("NIMCache", str(cache_name), ns) if ctx.runtimes and cache_name else None
    model = as_dict(as_dict(as_dict(as_dict(cache).get("spec")).get("source")).get("ngc")).get("model")
    precision = as_dict(model).get("precision")
    if isinstance(precision, str) and precision:
        annotations.setdefault("vramgate.io/precision", precision)
    pod_meta = inherit_annotations({"annotations": annotations, "labels": as_dict(spec.get("labels"))}, meta)
    replicas = count(spec.get("replicas"), 1, "spec.replicas")
    group = _multinode(container, as_dict(as_dict(spec.get("multiNode")).get("parallelism")))
    view = PodView(kind, ns, name, pod_meta, pod, "", group)
    return RoleSet(kind, name, (Role("", view, group, replicas * group),), grouped=group > 1)


def _multinode(container: dict[str, Any], parallelism: dict[str, Any]) -> int:
    """Apply ``multiNode.parallelism`` as the operator does; the pods of one instance (1 when not multi-node)."""
    if not parallelism:
        return 1
    pp = count(parallelism.get("pipeline"), 1, "spec.multiNode.parallelism.pipeline", minimum=1)
    tp = count(parallelism.get("tensor"), 1, "spec.multiNode.parallelism.tensor", minimum=1)
    own = {e.get("name") for e in as_list(container.get("env")) if isinstance(e, dict)}
    operator_env = [{"name": "NIM_TENSOR_PARALLEL_SIZE", "value": str(tp)},
                    {"name": "NIM_PIPELINE_PARALLEL_SIZE", "value": str(pp)}]
    container["env"] = [*[e for e in operator_env if e["name"] not in own], *as_list(container.get("env"))]
    resources = as_dict(container.get("resources"))
    named = any("nvidia.com/gpu" in as_dict(resources.get(s)) for s in ("limits", "requests"))
    if not named:
        limits = {**as_dict(resources.get("limits")), "nvidia.com/gpu": str(tp)}
        container["resources"] = {**resources, "limits": limits}
    return pp
