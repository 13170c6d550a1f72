"""KServe InferenceService (with its ServingRuntime) and LLMInferenceService: the predictor pods they run.

How KServe builds the predictor pod, which this module mirrors (kserve/kserve at aaac4e2):
- pkg/controller/v1beta1/inferenceservice/utils/utils.go: ``MergeRuntimeContainers`` (strategic merge
  patch of the ISVC's ``predictor.model`` container onto the runtime's ``kserve-container``, then args
  concatenated runtime + isvc), ``MergePodSpec`` (the runtime's nodeSelector/affinity/tolerations/volumes/
  imagePullSecrets/schedulerName/resourceClaims overlaid by the predictor's pod fields), ``GetServingRuntime``
  (namespaced ServingRuntime first, then ClusterServingRuntime) and ``ReplacePlaceholders`` (Go template
  over the container with the ISVC's ObjectMeta: ``{{.Name}}``, ``{{.Namespace}}``, ``{{.Labels.x}}``).
- pkg/controller/v1beta1/inferenceservice/components/predictor.go: ``multiNodeProcess`` and
  ``computeRayNodeAndGPUs`` (workerSpec: TP × PP GPUs over a head and ceil(total / worker GPUs) - 1 workers).
- config/runtimes/kserve-huggingfaceserver.yaml and kserve-huggingfaceserver-multinode.yaml: the default
  runtimes used here when the named runtime is not visible.
- pkg/apis/serving/v1alpha1/llm_inference_service_types.go (+ _func.go ``ParallelismSpec.GetSize``) and
  config/llmisvcconfig/config-llm-template.yaml (``vllm serve /mnt/models … --tensor-parallel-size``).
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Callable
from typing import Any

from .runtimes import Context
from .view import (
    DeclaredValueError,
    PodView,
    Role,
    RoleSet,
    WorkloadError,
    as_dict,
    as_list,
    asked_resource,
    copied,
    count,
    gpu_count,
    identity,
    inherit_annotations,
)

# kserve/kserve config/crd/full/serving.kserve.io_inferenceservices.yaml (v0.15.2, .cache/crds); LLMInferenceService
# in the same group (pkg/apis/serving/v1alpha1). OME's namesake is ome.io: not read here.
GROUP = "serving.kserve.io"
KINDS = frozenset({"InferenceService", "LLMInferenceService"})

MAIN, WORKER = "kserve-container", "worker-container"
EXECUTOR_BACKEND = "multinode/executor-backend"
# The old per-framework predictor fields, which KServe reads as ``model`` with that modelFormat.
_FRAMEWORKS = ("huggingface", "sklearn", "xgboost", "tensorflow", "pytorch", "triton", "onnx", "pmml", "lightgbm",
               "paddle")
# ModelSpec fields that are not the container's.
_MODEL_ONLY = frozenset({"modelFormat", "runtime", "storageUri", "runtimeVersion", "protocolVersion", "storage",
                         "confidential"})
# PredictorSpec / ComponentExtensionSpec fields that are not the pod's.
_COMPONENT_ONLY = frozenset({"model", "workerSpec", "storageUris", "storageContainerName", "minReplicas",
                             "maxReplicas", "scaleTarget", "scaleMetric", "scaleMetricType", "autoScaling",
                             "containerConcurrency", "timeout", "canaryTrafficPercent", "logger", "batcher",
                             "labels", "annotations", "deploymentStrategy", "name", *_FRAMEWORKS})
_POD_FROM_RUNTIME = ("nodeSelector", "affinity", "tolerations", "volumes", "imagePullSecrets", "schedulerName",
                     "resourceClaims")

# config/runtimes/kserve-huggingfaceserver.yaml (the fields that matter to a VRAM judgement).
DEFAULT_HF_RUNTIME: dict[str, Any] = {
    "apiVersion": "serving.kserve.io/v1alpha1", "kind": "ClusterServingRuntime",
    "metadata": {"name": "kserve-huggingfaceserver"},
    "spec": {
        "supportedModelFormats": [{"name": "huggingface", "version": "1", "autoSelect": True, "priority": 1}],
        "containers": [{
            "name": MAIN, "image": "kserve/huggingfaceserver:latest", "args": ["--model_name={{.Name}}"],
            "resources": {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"cpu": "1", "memory": "2Gi"}},
        }],
    },
}
# config/runtimes/kserve-huggingfaceserver-multinode.yaml, likewise trimmed.
DEFAULT_HF_MULTINODE_RUNTIME: dict[str, Any] = {
    "apiVersion": "serving.kserve.io/v1alpha1", "kind": "ClusterServingRuntime",
    "metadata": {"name": "kserve-huggingfaceserver-multinode"},
    "spec": {
        "supportedModelFormats": [{"name": "huggingface", "version": "1", "autoSelect": True, "priority": 2}],
        "containers": [{
            "name": MAIN, "image": "kserve/huggingfaceserver:latest-gpu",
            "command": ["bash", "-c", "ray start --head --disable-usage-stats --include-dashboard false\n"
                        "python -m huggingfaceserver ${MODEL_DIR_ARG} --tensor-parallel-size=${TENSOR_PARALLEL_SIZE} "
                        "--pipeline-parallel-size=${PIPELINE_PARALLEL_SIZE} $0 $@"],
            "args": ["--model_name={{.Name}}"],
            "resources": {"requests": {"cpu": "2", "memory": "6Gi"}, "limits": {"cpu": "4", "memory": "12Gi"}},
        }],
        "workerSpec": {
            "pipelineParallelSize": 1, "tensorParallelSize": 1,
            "containers": [{
                "name": WORKER, "image": "kserve/huggingfaceserver:latest-gpu",
                "command": ["bash", "-c", 'ray start --address="${RAY_HEAD_ADDRESS}" --block'],
                "resources": {"requests": {"cpu": "2", "memory": "6Gi"}, "limits": {"cpu": "4", "memory": "12Gi"}},
            }],
        },
    },
}


def roles(obj: dict[str, Any], ctx: Context) -> RoleSet:
    """The roles of an InferenceService or an LLMInferenceService."""
    if obj.get("kind") == "LLMInferenceService":
        return _llmisvc(obj, ctx)
    return _isvc(obj, ctx)


# --- InferenceService -------------------------------------------------------------------------------


def _isvc(obj: dict[str, Any], ctx: Context) -> RoleSet:
    kind = str(obj.get("kind"))
    name, ns, meta = identity(obj, ctx.namespace)
    spec = as_dict(obj.get("spec"))
    predictor = spec.get("predictor")
    if not isinstance(predictor, dict):
        raise WorkloadError("spec.predictor is missing")
    replicas = count(predictor.get("minReplicas"), 1, "spec.predictor.minReplicas")
    warnings: list[str] = []

    def view(role: str, pod_meta: dict[str, Any], pod_spec: dict[str, Any], group: int) -> PodView:
        return PodView(kind=kind, namespace=ns, name=name, meta=inherit_annotations(pod_meta, meta), spec=pod_spec,
                       role=role, group_size=group)

    pod_meta = {"annotations": as_dict(predictor.get("annotations")), "labels": as_dict(predictor.get("labels"))}
    model = _model_of(predictor)
    out: list[Role] = []
    if model is None:
        # A custom predictor: its own containers are the pod.
        pod = {k: v for k, v in predictor.items() if k not in _COMPONENT_ONLY}
        out.append(Role("predictor", view("predictor", pod_meta, pod, 1), 1, replicas))
    else:
        runtime, note = _runtime_for(model, predictor, ns, ctx)
        rt_spec = as_dict(runtime.get("spec"))
        head_container = _merge_runtime(rt_spec.get("containers"), MAIN, _container_of(model), meta)
        head_container = _with_model_id(head_container, model)
        pod = _merge_pod(rt_spec, predictor)
        _with_storage_initializer(pod, model)
        worker_spec = predictor.get("workerSpec")
        if worker_spec is None:
            pod["containers"] = [head_container]
            out.append(Role("predictor", view("predictor", pod_meta, pod, 1), 1, replicas))
        else:
            out.extend(_multinode(runtime, rt_spec, predictor, head_container, pod, ctx, view, replicas, meta))
        if note and any(gpu_count(c, ctx.gpu_resources) for r in out for c in r.view.containers()):
            warnings.append(f"{kind.lower()}/{name}: {note}")
    for component in ("transformer", "explainer"):
        part = spec.get(component)
        if isinstance(part, dict) and as_list(part.get("containers")):
            pod = {k: v for k, v in part.items() if k not in _COMPONENT_ONLY}
            c_meta = {"annotations": as_dict(part.get("annotations"))}
            out.append(Role(component, view(component, c_meta, pod, 1), 1,
                            count(part.get("minReplicas"), 1, f"spec.{component}.minReplicas")))
    return RoleSet(kind, name, tuple(out), tuple(warnings), grouped=len(out) > 1)


def _model_of(predictor: dict[str, Any]) -> dict[str, Any] | None:
    model = predictor.get("model")
    if isinstance(model, dict):
        return model
    for framework in _FRAMEWORKS:
        part = predictor.get(framework)
        if isinstance(part, dict):
            return {**part, "modelFormat": {"name": framework}}
    return None


def _container_of(model: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in model.items() if k not in _MODEL_ONLY}


def _format(model: dict[str, Any]) -> tuple[str, str | None]:
    fmt = as_dict(model.get("modelFormat"))
    version = fmt.get("version")
    return str(fmt.get("name") or ""), str(version) if version is not None else None


def _runtime_for(model: dict[str, Any], predictor: dict[str, Any], ns: str,
                 ctx: Context) -> tuple[dict[str, Any], str]:
    """The runtime KServe would pick, and a note when vramgate falls back to the default HF runtime."""
    multinode = predictor.get("workerSpec") is not None
    default = DEFAULT_HF_MULTINODE_RUNTIME if multinode else DEFAULT_HF_RUNTIME
    fallback = f"judged with KServe's default Hugging Face runtime shape ({default['metadata']['name']})"
    named = model.get("runtime")
    runtimes = ctx.runtimes
    if isinstance(named, str) and named:
        found = runtimes.lookup("ServingRuntime", named, ns) if runtimes is not None else None
        if found is not None:
            return found, ""
        where = "in the files given" if runtimes is not None else "to vramgate at admission"
        return default, f"ServingRuntime or ClusterServingRuntime {named!r} is not visible {where}; {fallback}"
    fmt, version = _format(model)
    if runtimes is not None:
        best: tuple[int, dict[str, Any]] | None = None
        for rt in runtimes.all("ServingRuntime", ns):
            rt_spec = as_dict(rt.get("spec"))
            if rt_spec.get("disabled") is True or (rt_spec.get("workerSpec") is not None) != multinode:
                continue
            for f in as_list(rt_spec.get("supportedModelFormats")):
                f = as_dict(f)
                if f.get("name") != fmt or f.get("autoSelect") is not True:
                    continue
                if version is not None and str(f.get("version", "")) != version:
                    continue
                raw = f.get("priority")
                priority = raw if isinstance(raw, int) else 0
                if best is None or priority > best[0]:
                    best = (priority, rt)
        if best is not None:
            return best[1], ""
    if fmt == "huggingface":
        return default, ""  # what KServe installs for this format: no guess, no warning
    return default, f"no ServingRuntime for model format {fmt or '(none)'!r} is visible; {fallback}"


_PLACEHOLDER = re.compile(r"\{\{\s*(?:\.(Name|Namespace|GenerateName)|\.(Labels|Annotations)\.([A-Za-z0-9_]+)|"
                          r"index\s+\.(Labels|Annotations)\s+\"([^\"]+)\")\s*\}\}")


def fill_placeholders(value: Any, meta: dict[str, Any]) -> Any:
    """Strings under ``value`` with KServe's ``{{.Name}}``-style placeholders filled from ``meta``."""
    if isinstance(value, str):
        if "{{" not in value:
            return value

        def sub(m: re.Match[str]) -> str:
            if m.group(1):
                return str(meta.get(m.group(1)[0].lower() + m.group(1)[1:]) or "")
            field, key = (m.group(2), m.group(3)) if m.group(2) else (m.group(4), m.group(5))
            return str(as_dict(meta.get(field.lower())).get(key, ""))

        return _PLACEHOLDER.sub(sub, value)
    if isinstance(value, list):
        return [fill_placeholders(v, meta) for v in value]
    if isinstance(value, dict):
        return {k: fill_placeholders(v, meta) for k, v in value.items()}
    return value


def _merge_named(base: list[Any], overlay: list[Any], key: str) -> list[Any]:
    """Strategic merge of a list keyed by ``key`` (env by name): same-key entries merge, new ones append."""
    out = [copied(b) for b in base]
    index = {str(b.get(key)): i for i, b in enumerate(out) if isinstance(b, dict)}
    for o in overlay:
        if not isinstance(o, dict):
            continue
        i = index.get(str(o.get(key)))
        if i is None:
            out.append(copied(o))
            continue
        merged = {**out[i], **copied(o)}
        if "value" in o:
            merged.pop("valueFrom", None)
        elif "valueFrom" in o:
            merged.pop("value", None)
        out[i] = merged
    return out


def merge_container(runtime: dict[str, Any], isvc: dict[str, Any]) -> dict[str, Any]:
    """KServe's MergeRuntimeContainers: strategic merge patch of ``isvc`` onto ``runtime``, args concatenated."""
    out: dict[str, Any] = copied(runtime)
    for key, value in isvc.items():
        if key == "env":
            out["env"] = _merge_named(as_list(runtime.get("env")), as_list(value), "name")
        elif key == "resources" and isinstance(value, dict):
            res = as_dict(copied(runtime.get("resources")))
            for section, amounts in value.items():
                if isinstance(amounts, dict):
                    res[section] = {**as_dict(res.get(section)), **copied(amounts)}
                else:
                    res[section] = copied(amounts)
            out["resources"] = res
        elif key == "volumeMounts":
            out[key] = _merge_named(as_list(runtime.get(key)), as_list(value), "mountPath")
        elif key == "ports":
            out[key] = _merge_named(as_list(runtime.get(key)), as_list(value), "containerPort")
        elif key != "args" and value is not None:
            out[key] = copied(value)
    out["args"] = [*as_list(runtime.get("args")), *as_list(isvc.get("args"))]
    if not out["args"]:
        del out["args"]
    if not out.get("name"):
        out["name"] = runtime.get("name", MAIN)
    return out


def _merge_runtime(containers: Any, name: str, isvc: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    listed = [c for c in as_list(containers) if isinstance(c, dict)]
    base = next((c for c in listed if c.get("name") == name), listed[0] if listed else {"name": name})
    merged = merge_container(base, isvc)
    filled: dict[str, Any] = fill_placeholders(merged, meta)
    return filled


def _with_model_id(container: dict[str, Any], model: dict[str, Any]) -> dict[str, Any]:
    """The HF runtime serves the ``hf://org/model`` of ``storageUri``: say so with ``--model_id``."""
    uri = model.get("storageUri")
    if not isinstance(uri, str) or not uri.startswith("hf://"):
        return container
    text = " ".join(str(t) for k in ("command", "args") for t in as_list(container.get(k)))
    if "--model_id" in text or "--model " in text or "--model=" in text:
        return container
    repo = uri.removeprefix("hf://").split(":", 1)[0].strip("/")
    return {**container, "args": [*as_list(container.get("args")), f"--model_id={repo}"]} if repo else container


def _with_storage_initializer(pod: dict[str, Any], model: dict[str, Any]) -> None:
    """KServe's storage initializer downloads ``storageUri`` into /mnt/models (pkg/webhook/admission/pod
    storage_initializer_injector.go): the init container the pod will have, so the URI names the model there."""
    uri = model.get("storageUri")
    if not isinstance(uri, str) or not uri or uri.startswith("hf://"):
        return
    init = {"name": "storage-initializer", "image": "kserve/storage-initializer", "args": [uri, "/mnt/models"]}
    pod["initContainers"] = [*as_list(pod.get("initContainers")), init]


def _merge_pod(rt_spec: dict[str, Any], predictor: dict[str, Any]) -> dict[str, Any]:
    """KServe's MergePodSpec: the runtime's scheduling fields overlaid by the predictor's pod fields."""
    pod: dict[str, Any] = {k: copied(rt_spec[k]) for k in _POD_FROM_RUNTIME if k in rt_spec}
    for key, value in predictor.items():
        if key in _COMPONENT_ONLY or key == "containers":
            continue
        if key == "tolerations" or key == "volumes":
            pod[key] = _merge_named(as_list(pod.get(key)), as_list(value), "key" if key == "tolerations" else "name")
        elif key == "nodeSelector" and isinstance(value, dict):
            pod[key] = {**as_dict(pod.get(key)), **value}
        else:
            pod[key] = value
    return pod


def _expand_parallel(container: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    """The shell expansion of ``${TENSOR_PARALLEL_SIZE}`` etc. in the command, as the pod's shell will do it."""
    def expand(text: Any) -> Any:
        if not isinstance(text, str):
            return text
        for k, v in env.items():
            text = text.replace("${" + k + "}", v).replace("$(" + k + ")", v)
        return text
    out = dict(container)
    for key in ("command", "args"):
        if key in container:
            out[key] = [expand(t) for t in as_list(container.get(key))]
    return out


def _set_gpus(container: dict[str, Any], resource: str, n: int) -> dict[str, Any]:
    res = as_dict(copied(container.get("resources")))
    for section in ("limits", "requests"):
        amounts = as_dict(res.get(section))
        if n > 0:
            amounts[resource] = str(n)
        else:
            amounts.pop(resource, None)
        res[section] = amounts
    return {**container, "resources": res}


def _multinode(runtime: dict[str, Any], rt_spec: dict[str, Any], predictor: dict[str, Any],
               head: dict[str, Any], head_pod: dict[str, Any], ctx: Context, view: Callable[..., PodView],
               replicas: int, meta: dict[str, Any]) -> list[Role]:
    """Head and worker roles of a multi-node predictor (KServe's multiNodeProcess)."""
    isvc_ws = as_dict(predictor.get("workerSpec"))
    rt_ws = as_dict(rt_spec.get("workerSpec"))
    pp = count(isvc_ws.get("pipelineParallelSize", rt_ws.get("pipelineParallelSize")), 1,
               "spec.predictor.workerSpec.pipelineParallelSize", minimum=1)
    tp = count(isvc_ws.get("tensorParallelSize", rt_ws.get("tensorParallelSize")), 1,
               "spec.predictor.workerSpec.tensorParallelSize", minimum=1)
    isvc_workers = [c for c in as_list(isvc_ws.get("containers")) if isinstance(c, dict)]
    worker = _merge_runtime(rt_ws.get("containers"), WORKER, isvc_workers[0] if isvc_workers else {}, meta)
    resource = asked_resource((head, worker), ctx.gpu_resources)  # amd.com/gpu where the containers ask it
    total = tp * pp
    head_gpus, worker_gpus = gpu_count(head, resource), gpu_count(worker, resource)
    if as_dict(as_dict(runtime.get("metadata")).get("annotations")).get(EXECUTOR_BACKEND) == "mp" or \
            as_dict(rt_spec.get("annotations")).get(EXECUTOR_BACKEND) == "mp":
        nodes, worker_gpus, head_gpus = pp, tp, tp
    elif worker_gpus > 0:
        nodes = math.ceil(total / worker_gpus)
        new_head = total - worker_gpus * (nodes - 1)
        if head_gpus > 0:
            if math.ceil(total / head_gpus) == 1:
                nodes = 1
        else:
            head_gpus = new_head
        if nodes == 1:
            worker_gpus, head_gpus = 0, total
    elif head_gpus > 0:
        nodes = 1 + (math.ceil((total - head_gpus) / 1) if total > head_gpus else 0)
        worker_gpus = 1
    else:
        nodes, worker_gpus, head_gpus = total, 1, 1
    env = {"TENSOR_PARALLEL_SIZE": str(tp), "PIPELINE_PARALLEL_SIZE": str(pp)}
    head = _expand_parallel(_set_gpus(head, resource, head_gpus), env)
    head_pod = {**head_pod, "containers": [head]}
    out = [Role("head", view("head", {}, head_pod, nodes), nodes, replicas)]
    if nodes > 1:
        w_pod: dict[str, Any] = {k: copied(rt_ws[k]) for k in _POD_FROM_RUNTIME if k in rt_ws}
        w_pod.update({k: v for k, v in isvc_ws.items()
                      if k not in ("containers", "pipelineParallelSize", "tensorParallelSize")})
        # Workers hold their share of the head's model: judge them with the head's command.
        w = {**_set_gpus(worker, resource, worker_gpus), "command": head.get("command", []),
             "args": head.get("args", [])}
        w_pod["containers"] = [w]
        out.append(Role("worker", view("worker", {}, w_pod, nodes), nodes, replicas * (nodes - 1)))
    return out


# --- LLMInferenceService ----------------------------------------------------------------------------


def _llmisvc(obj: dict[str, Any], ctx: Context) -> RoleSet:
    kind = str(obj.get("kind"))
    name, ns, meta = identity(obj, ctx.namespace)
    spec = as_dict(obj.get("spec"))
    model = as_dict(spec.get("model"))
    uri = model.get("uri")
    served = uri.split("://", 1)[1] if isinstance(uri, str) and uri.startswith("hf://") else None
    model_name = served or (model.get("name") if isinstance(model.get("name"), str) else None)
    field = f"{kind} spec.model.uri {uri}" if served else f"{kind} spec.model.name {model_name}"
    named = (model_name, field) if model_name else None
    out: list[Role] = []
    warnings: list[str] = []
    managed = managed_dra(as_dict(meta.get("annotations")), name)
    prefill = spec.get("prefill")
    has_prefill = isinstance(prefill, dict) and bool(prefill)
    for role, part in (("decode" if has_prefill else "", spec), ("prefill", prefill)):
        if not isinstance(part, dict) or (role == "prefill" and not has_prefill):
            continue
        where = "spec.prefill" if role == "prefill" else "spec"
        replicas = count(part.get("replicas"), 1, f"{where}.replicas")
        par = as_dict(part.get("parallelism"))
        tp = count(par.get("tensor"), 1, f"{where}.parallelism.tensor", minimum=1)
        pp = count(par.get("pipeline"), 1, f"{where}.parallelism.pipeline", minimum=1)
        data = count(par.get("data"), 1, f"{where}.parallelism.data", minimum=1)
        data_local = count(par.get("dataLocal"), 1, f"{where}.parallelism.dataLocal", minimum=1)
        # ParallelismSpec.GetSize: data parallel → data / dataLocal pods (each a full TP replica); pipeline → PP.
        size = max(data // data_local, 1) if "data" in par or "dataLocal" in par else pp
        # The pods of one instance: PP stages, or data-parallel ranks spread over pods (one engine, experts shared).
        group = size if size > 1 else 1
        template = part.get("template")
        pod: dict[str, Any] = copied(template) if isinstance(template, dict) else {}
        flags = _parallel_flags(par, tp, pp, data, data_local)
        if pp > 1 and part.get("worker") is None and not _own_command(pod):
            # kserve/kserve#6044 (v0.20.0): the single-node templates render no --pipeline-parallel-size, so vLLM
            # runs TP alone on part of the GPUs the pod still holds. A release with the fix (kserve#6121) runs PP:
            # judged as written, said so.
            warnings.append(f"{kind.lower()}/{name}: {where}.parallelism.pipeline is {pp} on one node (no "
                            f"worker): KServe v0.20's single-node templates drop it (kserve/kserve#6044), so vLLM "
                            f"may run tensor parallel {tp} alone while the pod keeps its GPUs; judged with PP {pp}")
        pod["containers"] = [_llm_main(c, model_name, flags) for c in as_list(pod.get("containers"))
                             if isinstance(c, dict)] or [_llm_main({"name": "main"}, model_name, flags)]
        pod_meta = inherit_annotations({"annotations": as_dict(part.get("annotations")),
                                        "labels": as_dict(part.get("labels"))}, meta)
        label = role if part.get("worker") is None else f"{role} leader".strip()
        claims = _inject_managed_dra(pod, managed, warnings, f"{kind.lower()}/{name} ({where}.template)")
        out.append(Role(label, PodView(kind, ns, name, pod_meta, pod, label, group, claim_templates=claims,
                                       named_model=named), group, replicas))
        worker = part.get("worker")
        if isinstance(worker, dict) and size > 1:
            w_pod = copied(worker)
            w_pod["containers"] = [_llm_main(c, model_name, flags) for c in as_list(w_pod.get("containers"))
                                   if isinstance(c, dict)]
            w_label = f"{role} worker".strip()
            w_claims = _inject_managed_dra(w_pod, managed, warnings, f"{kind.lower()}/{name} ({where}.worker)")
            out.append(Role(w_label, PodView(kind, ns, name, pod_meta, w_pod, w_label, group,
                                             claim_templates=w_claims, named_model=named), group,
                            replicas * (size - 1)))
    if model_name is None and not isinstance(uri, str):
        warnings.append(f"{kind.lower()}/{name}: spec.model.uri is missing")
    return RoleSet(kind, name, tuple(out), tuple(warnings), grouped=len(out) > 1)


def _own_command(pod: dict[str, Any]) -> bool:
    """Whether the ``main`` container sets its own command (then no LLMInferenceServiceConfig template renders it)."""
    return any(isinstance(c, dict) and c.get("name") == "main" and c.get("command")
               for c in as_list(pod.get("containers")))


def _parallel_flags(par: dict[str, Any], tp: int, pp: int, data: int, data_local: int) -> list[str]:
    """The vLLM flags the default LLMInferenceServiceConfig templates derive from ``spec.parallelism``.

    KServe's well-known configs (config-llm-*-worker-data-parallel) start ``vllm serve`` with
    ``--data-parallel-size``, ``--data-parallel-size-local`` and, for ``expert: true``,
    ``--enable-expert-parallel``, beside ``--tensor-parallel-size`` / ``--pipeline-parallel-size``.
    """
    flags: list[str] = []
    if tp > 1 or "tensor" in par:
        flags += ["--tensor-parallel-size", str(tp)]
    if pp > 1:
        flags += ["--pipeline-parallel-size", str(pp)]
    if data > 1:
        flags += ["--data-parallel-size", str(data), "--data-parallel-size-local", str(data_local)]
    if par.get("expert") is True:
        flags.append("--enable-expert-parallel")
    return flags


def _llm_main(container: dict[str, Any], model: str | None, flags: list[str]) -> dict[str, Any]:
    """The ``main`` container as the default LLMInferenceServiceConfig runs it, unless the user set a command."""
    if container.get("name") != "main" or container.get("command") or not model:
        return container
    # The well-known configs expand ${VLLM_ADDITIONAL_ARGS} into the command line (a literal env value here).
    extra = next((e.get("value") for e in as_list(container.get("env")) if isinstance(e, dict)
                  and e.get("name") == "VLLM_ADDITIONAL_ARGS" and isinstance(e.get("value"), str)), None)
    try:
        extra_words = shlex.split(extra) if extra else []
    except ValueError:
        extra_words = extra.split() if extra else []
    args = ["vllm", "serve", model, *flags, *extra_words]
    return {"image": "ghcr.io/llm-d/llm-d-cuda", **container, "command": [], "args": [*args, *as_list(
        container.get("args"))]}


# --- LLMInferenceService: Managed DRA -----------------------------------------------------------------
# Since KServe v0.20.0 (0c5166a, #5352; older releases ignore the annotations). kserve/kserve at aaac4e2:
# pkg/controller/v1alpha2/llmisvc/managed_dra.go (expectedManagedDRATemplate,
# buildDeviceRequests, injectManagedDRA, targetContainerForDRA), pkg/validation/managed_dra.go (how each annotation
# is read), pkg/constants/constants.go, docs/samples/llmisvc/managed-dra/. With ``exp-dra-device-class`` set, the
# controller creates the ResourceClaimTemplate ``<name>-managed-dra`` with one request ``device``: exactly
# {deviceClassName, count (when > 1), selectors: one CEL expression per non-empty line of exp-dra-cel-selector},
# and puts the pod claim ``managed-device`` on every pod template (template, worker, prefill's), used by the
# container exp-dra-container-name names (else the first).
_DRA_PREFIX = "serving.kserve.io/exp-dra-"
MANAGED_DRA_CLAIM, MANAGED_DRA_SUFFIX = "managed-device", "-managed-dra"


def managed_dra(annotations: dict[str, Any], name: str) -> tuple[str, dict[str, Any], str] | None:
    """(template name, ResourceClaimSpec, target container or "") of an LLMInferenceService's Managed DRA, or None.

    Raises DeclaredValueError for an annotation KServe's own webhook refuses (ValidateManagedDRAAnnotations).
    """
    device_class = annotations.get(f"{_DRA_PREFIX}device-class")
    if device_class is None:
        return None
    cls = str(device_class).strip()
    if not cls:
        raise DeclaredValueError(f"{_DRA_PREFIX}device-class must not be empty")
    raw_count = str(annotations.get(f"{_DRA_PREFIX}device-count", "")).strip()
    if raw_count and not (raw_count.isdigit() and int(raw_count) >= 1):
        raise DeclaredValueError(f"{_DRA_PREFIX}device-count={raw_count!r}: must be an integer >= 1")
    exactly: dict[str, Any] = {"deviceClassName": cls}
    if raw_count and int(raw_count) > 1:
        exactly["count"] = int(raw_count)
    lines = [ln.strip() for ln in str(annotations.get(f"{_DRA_PREFIX}cel-selector", "")).split("\n") if ln.strip()]
    if lines:
        exactly["selectors"] = [{"cel": {"expression": ln}} for ln in lines]
    # kmeta.ChildName: name + suffix (a longer name is shortened with a hash; the name only ties pod to template).
    template = f"{name}{MANAGED_DRA_SUFFIX}"
    target = str(annotations.get(f"{_DRA_PREFIX}container-name", "")).strip()
    return template, {"devices": {"requests": [{"name": "device", "exactly": exactly}]}}, target


def _inject_managed_dra(pod: dict[str, Any], managed: tuple[str, dict[str, Any], str] | None, warnings: list[str],
                        where: str) -> tuple[tuple[str, dict[str, Any]], ...]:
    """Put the managed claim on one pod spec as injectManagedDRA does; the template it names, for the DRA view."""
    if managed is None:
        return ()
    template, claim_spec, target = managed
    claims = [c for c in as_list(pod.get("resourceClaims")) if isinstance(c, dict)]
    if not any(c.get("name") == MANAGED_DRA_CLAIM for c in claims):
        claims.append({"name": MANAGED_DRA_CLAIM, "resourceClaimTemplateName": template})
    pod["resourceClaims"] = claims
    containers = [c for c in as_list(pod.get("containers")) if isinstance(c, dict)]
    chosen = next((c for c in containers if c.get("name") == target), None) if target else \
        (containers[0] if containers else None)
    if chosen is None:
        warnings.append(f"{where}: {_DRA_PREFIX}container-name {target!r} names no container; KServe puts the "
                        "managed claim on none, so no container gets its devices")
        return ((template, claim_spec),)
    resources = as_dict(chosen.get("resources"))
    refs = [r for r in as_list(resources.get("claims")) if isinstance(r, dict)]
    if not any(r.get("name") == MANAGED_DRA_CLAIM for r in refs):
        refs.append({"name": MANAGED_DRA_CLAIM})
    chosen["resources"] = {**resources, "claims": refs}
    return ((template, claim_spec),)
