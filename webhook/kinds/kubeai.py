"""KubeAI Model (kubeai.org/v1): the server pod KubeAI builds from url, engine, args and resourceProfile.

From https://github.com/substratusai/kubeai at 2f32ef4: internal/modelcontroller/engine_vllm.go (the vLLM
pod: ``python3 -m vllm.entrypoints.openai.api_server --model=<ref> --served-model-name=<name> <spec.args>``,
``spec.env`` as env), engine_ollama.go (``ollama/ollama`` with ``spec.args``), model_controller.go
(``resourceProfile: <profile>:<count>``: the profile's requests and limits multiplied by count) and
charts/kubeai/values.yaml (the default profiles below and ``modelServers`` images).
"""

from __future__ import annotations

from typing import Any

from ..units.quantity import QuantityError, parse_size_bytes
from .runtimes import Context
from .view import PodView, Role, RoleSet, WorkloadError, as_dict, as_list, copied, count, identity, inherit_annotations

KINDS = frozenset({"Model"})
API_GROUP = "kubeai.org"

_GPU_TOLERATION = [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}]


def _gpu(resource: str = "nvidia.com/gpu", cpu: str | None = None, memory: str | None = None,
         toleration: bool = True) -> dict[str, Any]:
    requests: dict[str, str] = {resource: "1"}
    if cpu:
        requests["cpu"] = cpu
    if memory:
        requests["memory"] = memory
    out: dict[str, Any] = {"limits": {resource: "1"}, "requests": requests}
    if toleration:
        out["tolerations"] = [{**_GPU_TOLERATION[0], "key": resource}]
    return out


# charts/kubeai/values.yaml ``resourceProfiles`` (one unit each; a Model asks for <count> units).
RESOURCE_PROFILES: dict[str, dict[str, Any]] = {
    "cpu": {"requests": {"cpu": "1", "memory": "2Gi"}},
    "nvidia-gpu-t4": _gpu(toleration=False),
    "nvidia-gpu-l4": _gpu(cpu="6", memory="24Gi"),
    "nvidia-gpu-l40s": _gpu(cpu="6", memory="24Gi"),
    "nvidia-gpu-h100": _gpu(),
    "nvidia-gpu-gh200": _gpu(),
    "nvidia-gpu-a100-80gb": _gpu(),
    "nvidia-gpu-a100-40gb": _gpu(),
    "nvidia-gpu-a16": _gpu(),
    "nvidia-gpu-rtx4070-8gb": _gpu(),
    "amd-gpu-mi300x": _gpu("amd.com/gpu"),
}
# charts/kubeai/values.yaml ``modelServers.*.images.default``.
ENGINE_IMAGES = {"VLLM": "vllm/vllm-openai:v0.8.3", "OLlama": "ollama/ollama:latest",
                 "FasterWhisper": "fedirz/faster-whisper-server:latest-cuda", "Infinity": "michaelf34/infinity:latest"}


def _scaled(amounts: Any, n: int) -> dict[str, str]:
    """Resource amounts multiplied by ``n``, as KubeAI's ``Quantity.Mul`` does."""
    out = {}
    for k, v in as_dict(amounts).items():
        text = str(v)
        if text.isdigit():
            out[str(k)] = str(int(text) * n)
        elif n == 1:
            out[str(k)] = text
        else:
            try:
                out[str(k)] = str(parse_size_bytes(text) * n)
            except QuantityError:
                out[str(k)] = text
    return out


def roles(obj: dict[str, Any], ctx: Context) -> RoleSet:
    """The one server role of a KubeAI Model (``minReplicas`` pods; KubeAI scales it)."""
    if obj.get("apiVersion", API_GROUP).split("/", 1)[0] != API_GROUP:
        return RoleSet(str(obj.get("kind")), "", ())  # another project's ``Model`` kind
    kind = str(obj.get("kind"))
    name, ns, meta = identity(obj, ctx.namespace)
    spec = as_dict(obj.get("spec"))
    warnings: list[str] = []
    engine = str(spec.get("engine") or "VLLM")
    raw_url = spec.get("url")
    url = raw_url if isinstance(raw_url, str) else ""
    scheme, _, ref = url.partition("://")
    container: dict[str, Any] = {"name": "server", "image": spec.get("image") or ENGINE_IMAGES.get(engine, "")}
    args = [str(a) for a in as_list(spec.get("args"))]
    if engine == "VLLM":
        model_flag = url if scheme == "s3" else "/model" if scheme == "pvc" else ref
        container["command"] = ["python3", "-m", "vllm.entrypoints.openai.api_server"]
        args = [f"--model={model_flag}", f"--served-model-name={name}", *args]
    elif engine.lower() == "ollama" and ref:
        # KubeAI's Ollama server pulls and runs the model at start-up (engine_ollama.go startup probe).
        container["lifecycle"] = {"postStart": {"exec": {"command": ["ollama", "run", ref]}}}
    if args:
        container["args"] = args
    env = as_dict(spec.get("env"))
    if env:
        container["env"] = [{"name": str(k), "value": str(v)} for k, v in sorted(env.items())]
    pod: dict[str, Any] = {"containers": [container]}
    profile = spec.get("resourceProfile")
    if isinstance(profile, str) and profile:
        p_name, sep, multiple = profile.partition(":")
        if not sep:
            raise WorkloadError(f"spec.resourceProfile {profile!r} should be <name>:<count>, e.g. nvidia-gpu-l4:1")
        n = count(multiple, 1, "spec.resourceProfile count", minimum=1)
        known = RESOURCE_PROFILES.get(p_name)
        if known is None:
            warnings.append(f"{kind.lower()}/{name}: resource profile {p_name!r} is not one of KubeAI's defaults; "
                            f"assumed {n} {ctx.gpu_resource} per pod")
            known = _gpu(ctx.gpu_resource) if not p_name.startswith("cpu") else RESOURCE_PROFILES["cpu"]
        container["resources"] = {k: _scaled(known[k], n) for k in ("requests", "limits") if k in known}
        if known.get("tolerations"):
            pod["tolerations"] = copied(known["tolerations"])
    replicas = count(spec.get("minReplicas"), 1, "spec.minReplicas")
    view = PodView(kind, ns, name, inherit_annotations({}, meta), pod, "", 1)
    return RoleSet(kind, name, (Role("server", view, 1, replicas),), tuple(warnings))
