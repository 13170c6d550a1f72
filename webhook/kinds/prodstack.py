"""vLLM production-stack VLLMRuntime (production-stack.vllm.ai): the vLLM Deployment its operator builds.

Shape from vllm-project/production-stack operator/api/v1alpha1/vllmruntime_types.go and its samples:
``spec.model.{modelURL, maxModelLen, dtype, maxNumSeqs}``, ``spec.vllmConfig.{tensorParallelSize,
gpuMemoryUtilization, maxModelLen, extraArgs, env}``, ``spec.deploymentConfig.{replicas, resources.{gpu,
gpuType}, image.{registry, name}}``; the controller starts ``vllm serve <modelURL>`` with those flags and
gives the container ``gpu`` GPUs of ``gpuType`` (default ``nvidia.com/gpu``).
"""

from __future__ import annotations

from typing import Any

from .runtimes import Context
from .view import PodView, Role, RoleSet, as_dict, as_list, count, identity

GROUP = "production-stack.vllm.ai"
KINDS = frozenset({"VLLMRuntime"})
_FLAGS = (("maxModelLen", "--max-model-len"), ("dtype", "--dtype"), ("maxNumSeqs", "--max-num-seqs"),
          ("tensorParallelSize", "--tensor-parallel-size"), ("gpuMemoryUtilization", "--gpu-memory-utilization"))


def roles(obj: dict[str, Any], ctx: Context) -> RoleSet:
    """One role: the vLLM container the operator runs, ``deploymentConfig.replicas`` times."""
    kind = str(obj.get("kind"))
    name, ns, meta = identity(obj, ctx.namespace)
    spec = as_dict(obj.get("spec"))
    model, vllm, deploy = as_dict(spec.get("model")), as_dict(spec.get("vllmConfig")), as_dict(
        spec.get("deploymentConfig"))
    args: list[str] = ["vllm", "serve", str(model.get("modelURL") or "")]
    for key, flag in _FLAGS:
        value = vllm.get(key, model.get(key))
        if value is not None and not isinstance(value, bool) and str(value).strip():
            args += [flag, str(value)]
    args += [str(a) for a in as_list(vllm.get("extraArgs")) if isinstance(a, str | int | float)]
    image = as_dict(deploy.get("image"))
    ref = "/".join(str(p) for p in (image.get("registry"), image.get("name")) if p) or "vllm/vllm-openai"
    resources = as_dict(deploy.get("resources"))
    gpu_type = str(resources.get("gpuType") or ctx.gpu_resource)
    container: dict[str, Any] = {"name": "vllm", "image": ref, "command": args}
    if resources.get("gpu") is not None:
        container["resources"] = {"limits": {gpu_type: str(resources["gpu"])}}
    env = [e for e in as_list(vllm.get("env")) if isinstance(e, dict)]
    if env:
        container["env"] = env
    replicas = count(deploy.get("replicas"), 1, "spec.deploymentConfig.replicas")
    url = model.get("modelURL")
    view = PodView(kind, ns, name, {"annotations": as_dict(meta.get("annotations"))}, {"containers": [container]},
                   named_model=(url, f"{kind} spec.model.modelURL") if isinstance(url, str) and url else None)
    return RoleSet(kind, name, (Role("", view, 1, replicas),))
