"""SGLang's OME operator (ome.io): an InferenceService's engine and decoder pods, from its runtime and BaseModel.

How OME builds those pods, which this module mirrors (sgl-project/ome at 17b77ed, v0.1.5+):
- pkg/apis/ome/v1beta1/inference_service.go: ``spec.model`` (a ModelRef: ``name``), ``spec.runtime.name``,
  ``spec.engine`` / ``spec.decoder`` (a PodSpec inline, ``minReplicas``…, ``runner`` — the main container —,
  ``leader`` / ``worker.{size, runner}`` for multi-node), ``spec.router``; ``spec.predictor`` is deprecated.
- pkg/controller/v1beta1/inferenceservice/utils/reconciliation.go: ``GetBaseModel`` (a namespaced BaseModel
  first, then the ClusterBaseModel of that name) and ``MergeRuntimeSpecs``: the runtime's ``engineConfig`` /
  ``decoderConfig`` strategic-merged under the InferenceService's ``engine`` / ``decoder`` (utils/merging.go
  ``MergeEngineSpec``: no component in the InferenceService, no component at all).
- reconcilers/common/podspec_reconciler.go: the runner merged onto the pod's container of the same name
  (``MergeRuntimeContainers``: strategic merge, args concatenated), Go-template placeholders filled.
- components/engine.go and base.go: the BaseModel's ``storage.path`` mounted from the node (a hostPath
  volume) at the same path and given as ``MODEL_PATH``; ``PARALLELISM_SIZE`` = GPUs per pod × (1 + workers);
  leader and worker (``worker.size`` pods) run as one LeaderWorkerSet group (utils/deployment.go
  ``DetermineEngineDeploymentMode``).
- pkg/runtimeselector/matcher.go: with no ``spec.runtime``, the runtime whose ``supportedModelFormats`` match the
  BaseModel's format, architecture and quantization, ``autoSelect`` on, size within ``modelSizeRange``, highest
  ``priority`` (namespaced before cluster-scoped).
The model: OME's model agent downloads the BaseModel's ``storage.storageUri`` to ``storage.path`` on the node;
read here as an init container given the URI and the path, so the URI names the model where it is stored.
"""

from __future__ import annotations

import re
from typing import Any

from .kserve import fill_placeholders
from .runtimes import Context
from .view import PodView, Role, RoleSet, as_dict, as_list, copied, count, gpu_count, identity, inherit_annotations

# sgl-project/ome pkg/constants (OMEAPIGroupName) and pkg/apis/ome/v1beta1/v1beta1.go.
GROUP = "ome.io"
KINDS = frozenset({"InferenceService"})
MODEL_PATH_ENV = "MODEL_PATH"  # pkg/constants ModelPathEnvVarKey
PARALLELISM_ENV = "PARALLELISM_SIZE"  # pkg/constants ParallelismSizeEnvVarKey
MODEL_AGENT = "ome-model-agent"  # the DaemonSet that downloads the BaseModel onto the node (cmd/model-agent)
# ComponentExtensionSpec (pkg/apis/ome/v1beta1/component.go) and the component's own fields: not the pod's.
_COMPONENT_ONLY = frozenset({"minReplicas", "maxReplicas", "scaleTarget", "scaleMetric", "scaleMetricType",
                             "containerConcurrency", "timeoutSeconds", "canaryTrafficPercent", "labels",
                             "annotations", "minAvailable", "maxUnavailable", "deploymentStrategy", "kedaConfig",
                             "autoScaling", "runner", "leader", "worker", "acceleratorOverride", "config", "size"})
# Lists a strategic merge patch merges by key (k8s.io/api/core/v1 patchMergeKey), not replaces.
_MERGE_KEYS = {"containers": "name", "initContainers": "name", "env": "name", "volumes": "name",
               "volumeMounts": "mountPath", "ports": "containerPort", "imagePullSecrets": "name"}
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([TBM]?)\s*$")


def roles(obj: dict[str, Any], ctx: Context) -> RoleSet:
    """The engine (and decoder) roles of an OME InferenceService; a warning says what could not be read."""
    kind = str(obj.get("kind"))
    name, ns, meta = identity(obj, ctx.namespace)
    spec = as_dict(obj.get("spec"))
    ref = f"{kind.lower()}/{name}"
    warnings: list[str] = []
    components = [(role, spec[field], config) for role, field, config in
                  (("engine", "engine", "engineConfig"), ("decoder", "decoder", "decoderConfig"))
                  if isinstance(spec.get(field), dict)]
    if not components:
        why = ("spec.predictor is deprecated (OME migrates it to spec.engine and spec.model)"
               if isinstance(spec.get("predictor"), dict) else "it has no spec.engine or spec.decoder")
        return RoleSet(kind, name, (), (f"{ref}: nothing to judge: {why}",))
    model_name = as_dict(spec.get("model")).get("name")
    base: dict[str, Any] | None = None
    where = "in the files given" if ctx.runtimes is not None else "to vramgate at admission"
    if not isinstance(model_name, str) or not model_name:
        warnings.append(f"{ref}: spec.model.name is missing: the model is not known")
    elif ctx.runtimes is not None:
        base = ctx.runtimes.lookup("BaseModel", model_name, ns, GROUP)
    if isinstance(model_name, str) and model_name and base is None:
        warnings.append(f"{ref}: BaseModel or ClusterBaseModel {model_name!r} is not visible {where}: the model "
                        f"path OME mounts is not known (pass its manifest with -f)")
    base_spec = as_dict(as_dict(base).get("spec"))
    if base_spec.get("disabled") is True:
        warnings.append(f"{ref}: BaseModel {model_name!r} is disabled: OME will not serve it")
    runtime, note = _runtime(spec, base_spec if base is not None else None, ns, ctx, where)
    if note:
        warnings.append(f"{ref}: {note}")
    rt_spec = as_dict(as_dict(runtime).get("spec"))
    out: list[Role] = []
    for role, part, config in components:
        merged = merge(as_dict(rt_spec.get(config)), part) if runtime is not None else copied(part)
        made = _component(kind, name, ns, meta, role, merged, as_dict(base), ctx, len(components) > 1)
        if not made:
            warnings.append(f"{ref} ({role}): no container to judge: its runner comes from a runtime not visible "
                            f"{where}")
        out.extend(made)
    return RoleSet(kind, name, tuple(out), tuple(warnings), grouped=len(out) > 1)


def merge(base: Any, over: Any) -> Any:
    """A strategic merge patch of ``over`` onto ``base``, as OME's ``mergeSpec`` applies it to an EngineSpec:
    maps merged key by key, containers, env, volumes and mounts merged by name (or path), other lists replaced."""
    if not (isinstance(base, dict) and isinstance(over, dict)):
        return copied(over)
    out: dict[str, Any] = copied(base)
    for key, value in over.items():
        if value is None:
            continue  # an unset pointer field, absent from the JSON the patch is made of
        if key in _MERGE_KEYS and isinstance(value, list) and isinstance(out.get(key), list):
            out[key] = _merge_list(out[key], value, _MERGE_KEYS[key])
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copied(value)
    return out


def _merge_list(base: list[Any], over: list[Any], key: str) -> list[Any]:
    out = [copied(b) for b in base]
    index = {str(b.get(key)): i for i, b in enumerate(out) if isinstance(b, dict)}
    for item in over:
        i = index.get(str(item.get(key))) if isinstance(item, dict) else None
        if i is None:
            out.append(copied(item))
            continue
        merged = merge(out[i], item)
        for one, other in (("value", "valueFrom"), ("valueFrom", "value")):
            if one in item and other not in item:
                merged.pop(other, None)  # an env var is a value or a reference, never both
        out[i] = merged
    return out


def merge_runner(container: dict[str, Any], runner: dict[str, Any]) -> dict[str, Any]:
    """OME's ``MergeRuntimeContainers``: the runner patched onto the pod's container, args concatenated."""
    out: dict[str, Any] = merge(container, {k: v for k, v in runner.items() if k != "args"})
    args = [*as_list(container.get("args")), *as_list(runner.get("args"))]
    if args:
        out["args"] = args
    else:
        out.pop("args", None)
    if not out.get("name"):
        out["name"] = container.get("name") or "ome-container"
    return out


def _pod(part: dict[str, Any], runner: Any, meta: dict[str, Any]) -> tuple[dict[str, Any] | None, int | None]:
    """The pod of one component (or its leader / worker): its PodSpec with the runner merged in by name, and
    which container is the runner's (None when there is no runner: OME then adds nothing to the pod)."""
    pod: dict[str, Any] = {k: copied(v) for k, v in part.items() if k not in _COMPONENT_ONLY}
    containers = [c for c in as_list(pod.get("containers")) if isinstance(c, dict)]
    at: int | None = None
    if isinstance(runner, dict):
        at = next((i for i, c in enumerate(containers) if c.get("name") == runner.get("name")), None)
        if at is None:
            containers.append(merge_runner({}, runner))
            at = len(containers) - 1
        else:
            containers[at] = merge_runner(containers[at], runner)
    if not containers:
        return None, None
    pod["containers"] = [fill_placeholders(c, meta) for c in containers]
    return pod, at


def _with_model(pod: dict[str, Any], at: int | None, base: dict[str, Any], parallelism: int,
                resource: str) -> dict[str, Any]:
    """The BaseModel's storage as OME puts it on the runner (a hostPath volume named after the model, mounted at
    ``storage.path``, ``MODEL_PATH``), the model agent's download of ``storageUri`` into it, and
    ``PARALLELISM_SIZE`` = the runner's GPUs × the pods of its group (components/base.go, engine.go)."""
    if at is None:
        return pod
    spec = as_dict(base.get("spec"))
    storage = as_dict(spec.get("storage"))
    path, uri = storage.get("path"), storage.get("storageUri")
    volume = str(as_dict(base.get("metadata")).get("name") or "base-model")
    has_path = isinstance(path, str) and bool(path)
    containers = list(pod["containers"])
    c = dict(containers[at])
    env = [e for e in as_list(c.get("env")) if isinstance(e, dict)]
    if has_path and MODEL_PATH_ENV not in {str(e.get("name")) for e in env}:
        env.append({"name": MODEL_PATH_ENV, "value": path})
    gpus = gpu_count(c, resource)
    if gpus:
        env = [e for e in env if e.get("name") != PARALLELISM_ENV]
        env.append({"name": PARALLELISM_ENV, "value": str(gpus * parallelism)})
    if env:
        c["env"] = env
    if has_path:
        mounts = [m for m in as_list(c.get("volumeMounts")) if isinstance(m, dict)]
        c["volumeMounts"] = [*mounts, {"name": volume, "mountPath": path, "readOnly": True}]
    containers[at] = c
    out = {**pod, "containers": containers}
    if has_path:
        out["volumes"] = [*as_list(pod.get("volumes")), {"name": volume, "hostPath": {"path": path}}]
        if isinstance(uri, str) and uri:
            out["initContainers"] = [*as_list(pod.get("initContainers")),
                                     {"name": MODEL_AGENT, "image": "ome-model-agent", "args": [uri, path]}]
    return out


def _component(kind: str, name: str, ns: str, meta: dict[str, Any], role: str, part: dict[str, Any],
               base: dict[str, Any], ctx: Context, several: bool) -> list[Role]:
    replicas = count(part.get("minReplicas"), 1, f"spec.{role}.minReplicas")
    pod_meta = inherit_annotations({"annotations": as_dict(part.get("annotations")),
                                    "labels": as_dict(part.get("labels"))}, meta)
    leader, worker = part.get("leader"), part.get("worker")
    if not isinstance(leader, dict) and not isinstance(worker, dict):
        pod, at = _pod(part, part.get("runner"), meta)
        if pod is None:
            return []
        pod = _with_model(pod, at, base, 1, ctx.gpu_resource)
        label = role if several else ""
        return [Role(label, PodView(kind, ns, name, pod_meta, pod, label or role, 1), 1, replicas)]
    # Multi-node: one LeaderWorkerSet group of a leader and worker.size workers (engine.go getWorkerSize); the
    # leader runs its own PodSpec and runner, or the component's when it has no leader (reconcilePodSpec).
    w = as_dict(worker)
    workers = count(w.get("size"), 0, f"spec.{role}.worker.size")
    group = 1 + workers
    out: list[Role] = []
    if isinstance(leader, dict):
        lead_pod, at = _pod(leader, leader.get("runner"), meta)
    else:
        lead_pod, at = _pod(part, part.get("runner"), meta)
    if lead_pod is not None:
        lead_pod = _with_model(lead_pod, at, base, group, ctx.gpu_resource)
        out.append(Role(f"{role} leader", PodView(kind, ns, name, pod_meta, lead_pod, f"{role} leader", group),
                        group, replicas))
    w_pod, w_at = _pod(w, w.get("runner"), meta) if workers else (None, None)
    if w_pod is not None:
        w_pod = _with_model(w_pod, w_at, base, group, ctx.gpu_resource)
        out.append(Role(f"{role} worker", PodView(kind, ns, name, pod_meta, w_pod, f"{role} worker", group),
                        group, replicas * workers))
    return out


def model_size(text: Any) -> float | None:
    """``7B`` → 7e9, as OME's ``parseModelSize`` reads ``modelParameterSize`` and ``modelSizeRange``."""
    m = _SIZE.match(str(text)) if isinstance(text, str | int | float) else None
    if m is None:
        return None
    return float(m.group(1)) * {"T": 1e12, "B": 1e9, "M": 1e6, "": 1.0}[m.group(2)]


# What the runtime selector compares that OME's model agent writes on the BaseModel once it has read the
# checkpoint's config.json: a published BaseModel often states none of them yet.
_SELECTED_BY = ("modelFormat", "modelArchitecture", "modelParameterSize")


def _format_matches(base: dict[str, Any], fmt: dict[str, Any]) -> bool:
    """OME's ``compareSupportedModelFormats``, without version operators: format name, architecture and
    quantization (one side stating one and the other not is a mismatch). Before the model agent has filled in
    the BaseModel (no ``modelFormat``), only what it states is compared."""
    model_fmt = as_dict(base.get("modelFormat")).get("name")
    if model_fmt is None:
        return all(base.get(k) is None or base.get(k) == fmt.get(k) for k in ("modelArchitecture", "quantization"))
    if as_dict(fmt.get("modelFormat")).get("name", fmt.get("name")) != model_fmt:
        return False
    return all(base.get(k) == fmt.get(k) for k in ("modelArchitecture", "quantization"))


def _runtime(spec: dict[str, Any], base: dict[str, Any] | None, ns: str, ctx: Context,
             where: str) -> tuple[dict[str, Any] | None, str]:
    """The ServingRuntime or ClusterServingRuntime (ome.io) OME uses, and a note when it is not known."""
    named = as_dict(spec.get("runtime")).get("name")
    runtimes = ctx.runtimes
    if isinstance(named, str) and named:
        found = runtimes.lookup("ServingRuntime", named, ns, GROUP) if runtimes is not None else None
        if found is not None:
            return found, ""
        return None, (f"ServingRuntime or ClusterServingRuntime {named!r} (ome.io) is not visible {where}: "
                      "judged as the InferenceService alone")
    if base is None:
        return None, "nor is the runtime OME would pick for it: judged as the InferenceService alone"
    size = model_size(base.get("modelParameterSize"))
    matches: list[tuple[int, int, dict[str, Any]]] = []
    for order, rt in enumerate(runtimes.all("ServingRuntime", ns, GROUP) if runtimes is not None else []):
        rt_spec = as_dict(rt.get("spec"))
        if rt_spec.get("disabled") is True:
            continue
        rng = as_dict(rt_spec.get("modelSizeRange"))
        low, high = model_size(rng.get("min")), model_size(rng.get("max"))
        if size is not None and ((low is not None and size < low) or (high is not None and size > high)):
            continue
        priorities = [p if isinstance(p, int) and not isinstance(p, bool) else 1
                      for f in as_list(rt_spec.get("supportedModelFormats"))
                      if as_dict(f).get("autoSelect") is True and _format_matches(base, as_dict(f))
                      for p in [as_dict(f).get("priority")]]
        if priorities:
            matches.append((max(priorities), -order, rt))
    unknown = [k for k in _SELECTED_BY if base.get(k) is None]
    if matches and not unknown:
        return max(matches, key=lambda m: (m[0], m[1]))[2], ""
    if len(matches) == 1:
        rt_name = as_dict(matches[0][2].get("metadata")).get("name")
        return matches[0][2], (f"the BaseModel does not state its {', '.join(unknown)} (OME's model agent reads "
                               f"them from the checkpoint): judged with runtime {rt_name!r}, the only auto-select "
                               f"runtime visible that can match")
    if matches:
        return None, (f"{len(matches)} auto-select runtimes could serve this BaseModel, which does not state its "
                      f"{', '.join(unknown)} (OME's model agent reads them from the checkpoint): no runtime is "
                      f"guessed; name one in spec.runtime.name")
    return None, (f"no ServingRuntime or ClusterServingRuntime (ome.io) that OME would select for this BaseModel "
                  f"is visible {where}: judged as the InferenceService alone")
