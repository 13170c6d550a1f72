"""KubeRay RayCluster, RayJob and RayService: the head and worker groups, and Ray Serve LLM deployments.

Shapes: https://github.com/ray-project/kuberay/blob/master/ray-operator/apis/ray/v1/raycluster_types.go
(``headGroupSpec.template``, ``workerGroupSpecs[].{groupName, replicas, minReplicas, maxReplicas, numOfHosts,
template}``), rayjob_types.go (``spec.rayClusterSpec``), rayservice_types.go (``spec.rayClusterConfig``,
``spec.serveConfigV2``: Ray Serve's config file as a YAML string). Ray Serve LLM
(https://docs.ray.io/en/latest/serve/llm/serving-llms.html): ``applications[].args.llm_configs[]`` with
``model_loading_config.{model_id, model_source}``, ``engine_kwargs`` (vLLM's engine arguments),
``runtime_env.env_vars`` and ``accelerator_type``. A model's tensor × pipeline parallel GPUs form one
placement group, spread over the worker pods of a GPU group. A RayJob's ``spec.entrypoint`` (a shell command
the submitter runs; its Ray tasks run on the GPU workers) with the ``env_vars`` of ``spec.runtimeEnvYAML``
(Ray's runtime_env as a YAML string) is judged as the command of its GPU group, as a Serve deployment is.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Any

import yaml

from ..units.bounds import load_yaml
from .runtimes import Context
from .view import (
    DeclaredValueError,
    PodView,
    Role,
    RoleSet,
    WorkloadError,
    as_dict,
    as_list,
    count,
    engine_flags,
    gpu_count,
    identity,
    inherit_annotations,
    pod_gpus,
    template_parts,
)

# ray-project/kuberay ray-operator/config/crd/bases/ray.io_rayservices.yaml (v1.4.0, .cache/crds).
GROUP = "ray.io"
KINDS = frozenset({"RayCluster", "RayJob", "RayService"})
# Engine kwargs that are secrets or do not change memory; never copied into a synthesised command line.
_SKIP_KWARGS = frozenset({"hf_token", "api_key", "model"})


@dataclass(frozen=True)
class LLMApp:
    """One Ray Serve LLM deployment: the model, its vLLM command line, env, and GPUs per instance."""

    model_id: str
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    gpus: int
    accelerator: str
    shell: str = ""  # a RayJob entrypoint: run as ``/bin/sh -c`` instead of ``args``
    found_in: str = ""  # where a custom app's model was read (its runtime env), for the warning
    # The serveConfigV2 field naming the model (``applications[0].runtime_env.env_vars.MODEL_ID``), for --explain.
    field: str = ""


def roles(obj: dict[str, Any], ctx: Context) -> RoleSet:
    """One role per group (head, each worker group); LLM deployments judged on the GPU groups they run on."""
    kind = str(obj.get("kind"))
    name, ns, meta = identity(obj, ctx.namespace)
    spec = as_dict(obj.get("spec"))
    where = {"RayCluster": "spec", "RayJob": "spec.rayClusterSpec", "RayService": "spec.rayClusterConfig"}[kind]
    cluster = spec if kind == "RayCluster" else spec.get(where.split(".", 1)[1])
    warnings: list[str] = []
    if cluster is None:
        return RoleSet(kind, name, (), grouped=True)  # a RayJob on an existing cluster (clusterSelector)
    if not isinstance(cluster, dict):
        raise WorkloadError(f"{where} must be a mapping")
    apps = serve_llm_apps(spec.get("serveConfigV2"), warnings) if kind == "RayService" else []
    if kind == "RayJob" and (app := entrypoint_app(spec, f"rayjob/{name}", warnings)) is not None:
        apps = [app]

    groups: list[tuple[str, dict[str, Any], dict[str, Any], int, int, int]] = []
    h_meta, h_spec = template_parts(as_dict(cluster.get("headGroupSpec")).get("template"),
                                    f"{where}.headGroupSpec.template")
    groups.append(("head", h_meta, h_spec, 1, 1, 1))
    for i, g in enumerate(as_list(cluster.get("workerGroupSpecs"))):
        gw = f"{where}.workerGroupSpecs[{i}]"
        if not isinstance(g, dict):
            raise WorkloadError(f"{gw} must be a mapping")
        g_name = g.get("groupName") if isinstance(g.get("groupName"), str) and g.get("groupName") else f"worker-{i}"
        hosts = count(g.get("numOfHosts"), 1, f"{gw}.numOfHosts", minimum=1)
        replicas = count(g.get("replicas", g.get("minReplicas")), 1, f"{gw}.replicas")
        most = count(g.get("maxReplicas"), replicas, f"{gw}.maxReplicas")
        g_meta, g_spec = template_parts(g.get("template"), f"{gw}.template")
        groups.append((str(g_name), g_meta, g_spec, hosts, replicas * hosts, max(most, replicas) * hosts))

    resource = ctx.gpu_resources  # every vendor's: a worker group asking amd.com/gpu is a GPU group too
    gpu_groups = [g for g in groups[1:] if pod_gpus(g[2], resource) > 0] or [g for g in groups if
                                                                              pod_gpus(g[2], resource) > 0]
    out: list[Role] = []
    for g_name, g_meta, g_spec, hosts, replicas, most in groups:
        pod_meta = inherit_annotations(g_meta, meta)
        mine = [a for a in apps if _runs_on(a, g_name, g_spec, gpu_groups)] if any(
            g_name == x[0] for x in gpu_groups) else []
        if not mine:
            view = PodView(kind, ns, name, pod_meta, g_spec, g_name, hosts)
            out.append(Role(g_name, view, hosts, replicas))
            continue
        per_pod = max(pod_gpus(g_spec, resource), 1)
        for app in mine:
            role = g_name if len(apps) == 1 else f"{g_name} {app.model_id}"
            group = max(hosts, math.ceil(app.gpus / per_pod))
            if group > most:
                warnings.append(f"{kind.lower()}/{name} ({role}): {app.model_id} needs {app.gpus} GPUs, {group} pods "
                                f"of {per_pod} GPU(s), but group {g_name} has at most {most} pods")
            named = (app.args[2], f"{kind} serveConfigV2 {app.field}") if app.field and len(app.args) > 2 else None
            view = PodView(kind, ns, name, pod_meta, _with_command(g_spec, app, resource), role, group,
                           named_model=named)
            out.append(Role(role, view, group, replicas))
    if apps and not gpu_groups:
        warnings.append(f"{kind.lower()}/{name}: serveConfigV2 deploys {', '.join(a.model_id for a in apps)} but no "
                        f"group requests {ctx.gpu_resource}")
    return RoleSet(kind, name, tuple(out), tuple(warnings), grouped=True)


def _runs_on(app: LLMApp, g_name: str, g_spec: dict[str, Any], gpu_groups: list[Any]) -> bool:
    """Whether an LLM deployment may land on this GPU group: its accelerator type, if named and matched."""
    if not app.accelerator:
        return True
    wanted = app.accelerator.lower()
    matched = [g[0] for g in gpu_groups if wanted in (g[0] + " " + " ".join(
        str(v) for v in as_dict(g[2].get("nodeSelector")).values())).lower()]
    return g_name in matched if matched else True


def _with_command(spec: dict[str, Any], app: LLMApp, resource: str | tuple[str, ...]) -> dict[str, Any]:
    """A copy of the pod spec whose first GPU container runs the deployment's ``vllm serve`` command line."""
    containers = as_list(spec.get("containers"))
    idx = next((i for i, c in enumerate(containers) if isinstance(c, dict) and gpu_count(c, resource)), None)
    if idx is None:
        return spec
    c = dict(containers[idx])
    c.pop("command", None)
    if app.shell:
        c.pop("args", None)
        c["command"] = ["/bin/sh", "-c", app.shell]
    else:
        c["args"] = list(app.args)
    if app.env:
        names = {k for k, _ in app.env}
        c["env"] = [*(e for e in as_list(c.get("env")) if not (isinstance(e, dict) and str(e.get("name")) in names)),
                    *({"name": k, "value": v} for k, v in app.env)]
    return {**spec, "containers": [c if i == idx else x for i, x in enumerate(containers)]}


_PARALLEL = {
    "tp": re.compile(r"(?:^|\s)(?:--tensor-parallel-size|--tensor_parallel_size|--tp-size|--tp|-tp)[=\s]+(\S+)"),
    "pp": re.compile(r"(?:^|\s)(?:--pipeline-parallel-size|--pipeline_parallel_size|--pp-size|--pp|-pp)[=\s]+(\S+)"),
}


def entrypoint_app(spec: dict[str, Any], where: str, warnings: list[str]) -> LLMApp | None:
    """A RayJob's entrypoint and runtime env as a deployment of its GPU group; None without an entrypoint."""
    entry = spec.get("entrypoint")
    if not isinstance(entry, str) or not entry.strip():
        return None
    env: dict[str, str] = {}
    raw = spec.get("runtimeEnvYAML")
    if isinstance(raw, str) and raw.strip():
        try:
            env = _env_vars(as_dict(load_yaml(raw, "spec.runtimeEnvYAML")))
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            at = f" (line {mark.line + 1})" if mark is not None else ""
            warnings.append(f"{where}: spec.runtimeEnvYAML is not YAML{at}; its env_vars are not read")

    def size(key: str) -> int:
        found = _PARALLEL[key].search(entry)
        if found is None:
            return 1
        value = found.group(1).strip("'\"")
        if value.startswith("$"):  # $TP or ${TP} from the runtime env
            value = env.get(value.strip("${}"), "")
        return int(value) if value.isdigit() and int(value) > 0 else 1

    return LLMApp("the entrypoint", (), tuple(env.items()), size("tp") * size("pp"), "", shell=entry)


def serve_llm_apps(raw: Any, warnings: list[str]) -> list[LLMApp]:
    """The Ray Serve LLM deployments in a serveConfigV2 string. Raises DeclaredValueError when it is not YAML."""
    if raw is None or raw == "":
        return []
    if not isinstance(raw, str):
        raise DeclaredValueError("spec.serveConfigV2 must be a string holding Ray Serve's YAML config")
    try:
        doc = load_yaml(raw, "spec.serveConfigV2")
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise DeclaredValueError(f"spec.serveConfigV2 is not valid YAML{where}: {problem}") from None
    if doc is None:
        return []
    if not isinstance(doc, dict):
        raise DeclaredValueError(f"spec.serveConfigV2 must be a YAML mapping with applications, not a "
                                 f"{type(doc).__name__}")
    out: list[LLMApp] = []
    for i, app in enumerate(as_list(doc.get("applications"))):
        app = as_dict(app)
        app_env = _env_vars(as_dict(app.get("runtime_env")))
        configs = as_dict(app.get("args")).get("llm_configs")
        if configs is None and (custom := _custom_app(app, app_env)) is not None:
            warnings.append(f"serveConfigV2 applications[{i}] ({app.get('import_path') or 'a custom app'}) installs "
                            f"vLLM: judged as vLLM serving {custom.model_id}, the model its runtime_env names "
                            f"({custom.found_in}), on {custom.gpus} GPU(s)")
            out.append(replace(custom, field=f"applications[{i}].{custom.found_in}"))
            continue
        for j, cfg in enumerate(as_list(configs)):
            if isinstance(cfg, str):
                warnings.append(f"serveConfigV2 applications[{i}].args.llm_configs[{j}] is a file ({cfg}); "
                                "its model is not readable at admission: declare vramgate.io/model on the group")
                continue
            if isinstance(cfg, dict):
                parsed = _llm_app(cfg, app_env)
                if parsed is not None:
                    loading = as_dict(cfg.get("model_loading_config"))
                    key = "model_source" if isinstance(loading.get("model_source"), str) and loading.get(
                        "model_source") else "model_id"
                    out.append(replace(parsed, field=f"applications[{i}].args.llm_configs[{j}]."
                                                     f"model_loading_config.{key}"))
    return out


# A custom Serve app (its own import_path, no llm_configs) that installs vLLM names its model and parallelism in
# its runtime env by convention (GoogleCloudPlatform/kubernetes-engine-samples ai-ml/gke-ray/rayserve/llm: serve.py
# reads MODEL_ID and TENSOR_PARALLELISM). Only these names, and only a hub id or a path, are taken.
_MODEL_VARS = ("MODEL_ID", "HF_MODEL_ID", "MODEL_NAME")
_TP_VARS = ("TENSOR_PARALLELISM", "TENSOR_PARALLEL_SIZE", "TP_SIZE")
_VLLM_PIP = re.compile(r"^vllm(?:\[[^]]*])?(?:\s*[=<>!~].*)?$", re.IGNORECASE)


def _custom_app(app: dict[str, Any], env: dict[str, str]) -> LLMApp | None:
    runtime_env = as_dict(app.get("runtime_env"))
    pip = runtime_env.get("pip")
    packages = as_list(as_dict(pip).get("packages")) if isinstance(pip, dict) else as_list(pip)
    if not any(isinstance(p, str) and _VLLM_PIP.match(p.strip()) for p in packages):
        return None
    found = next(((k, env[k]) for k in _MODEL_VARS if env.get(k, "").strip()), None)
    if found is None or not re.match(r"^[\w./-]+$", found[1].strip()) or "/" not in found[1]:
        return None
    model = found[1].strip()
    tp = next((int(env[k]) for k in _TP_VARS if env.get(k, "").isdigit() and int(env[k]) > 0), 1)
    args = ("vllm", "serve", model, "--tensor-parallel-size", str(tp))
    return LLMApp(model, args, tuple(env.items()), tp, "", found_in=f"runtime_env.env_vars.{found[0]}")


def _env_vars(runtime_env: dict[str, Any]) -> dict[str, str]:
    env = as_dict(runtime_env.get("env_vars"))
    return {str(k): str(v) for k, v in env.items() if isinstance(v, str | int | float) and not isinstance(v, bool)}


def _llm_app(cfg: dict[str, Any], app_env: dict[str, str]) -> LLMApp | None:
    loading = as_dict(cfg.get("model_loading_config"))
    model_id = loading.get("model_id")
    source = loading.get("model_source")
    model = source if isinstance(source, str) and source else model_id
    if not isinstance(model, str) or not model:
        return None
    kwargs = as_dict(cfg.get("engine_kwargs"))
    args = ["vllm", "serve", model, *engine_flags(kwargs, _SKIP_KWARGS)]

    def positive(key: str) -> int:
        v = kwargs.get(key)
        try:
            return max(int(v), 1) if v is not None and not isinstance(v, bool) else 1
        except (TypeError, ValueError):
            return 1

    env = {**app_env, **_env_vars(as_dict(cfg.get("runtime_env")))}
    accel = cfg.get("accelerator_type")
    return LLMApp(str(model_id if isinstance(model_id, str) and model_id else model), tuple(args),
                  tuple(env.items()), positive("tensor_parallel_size") * positive("pipeline_parallel_size"),
                  accel if isinstance(accel, str) else "")
