"""llmaz (inference.llmaz.io Playground, llmaz.io OpenModel): the model-runner pod a Playground runs.

How llmaz builds it, which this module mirrors (InftyAI/llmaz at 3c13ff3):
- api/inference/v1alpha1/playground_types.go: ``spec.replicas``, ``spec.modelClaim.{modelName, inferenceFlavors}``
  (or ``spec.modelClaims.models[]``, the ``main`` role first), ``spec.backendRuntimeConfig.{backendName
  (default vllm), args, envs, resources}``; api/core/v1alpha1/model_types.go: an OpenModel's
  ``source.modelHub.{modelID, filename}`` or ``source.uri`` and ``inferenceConfig.flavors[].limits``.
- pkg/controller/inference/playground_controller.go ``buildTemplate``: the BackendRuntime's command and its
  ``default`` recommended args (chart/templates/backends/vllm.yaml, sglang.yaml: ``--model {{ .ModelPath }}``,
  ``--model-path {{ .ModelPath }}``), then the Playground's args; resources merged.
- pkg/controller_helper/modelsource/modelhub.go ``ModelPath``: the model loader downloads a hub model into
  ``/workspace/models/models--<org>--<name>`` (``/workspace/models/<filename>`` for one file).
- pkg/controller/inference/service_controller.go ``injectModelFlavor``: the first flavor's (or the claimed
  flavor's) limits overwrite the runner's requests and limits.
"""

from __future__ import annotations

from typing import Any

from .runtimes import Context
from .view import PodView, Role, RoleSet, as_dict, as_list, count, identity, inherit_annotations

MODEL_GROUP = "llmaz.io"  # api/core/v1alpha1/groupversion_info.go
GROUP = "inference.llmaz.io"  # api/inference/v1alpha1/groupversion_info.go
KINDS = frozenset({"Playground"})
MODEL_PATH = "/workspace/models/"  # modelsource CONTAINER_MODEL_PATH
RUNNER = "model-runner"  # modelsource MODEL_RUNNER_CONTAINER_NAME
# The default BackendRuntimes' command and the model flag of their ``default`` args (chart/templates/backends).
BACKENDS: dict[str, tuple[list[str], str]] = {
    "vllm": (["python3", "-m", "vllm.entrypoints.openai.api_server"], "--model"),
    "sglang": (["python3", "-m", "sglang.launch_server"], "--model-path"),
}


def _model_name(spec: dict[str, Any]) -> str | None:
    claim = as_dict(spec.get("modelClaim")).get("modelName")
    if isinstance(claim, str) and claim:
        return claim
    models = [as_dict(m) for m in as_list(as_dict(spec.get("modelClaims")).get("models"))]
    main = next((m for m in models if m.get("role") in (None, "main")), None)
    name = as_dict(main).get("name")
    return name if isinstance(name, str) and name else None


def _flavors(spec: dict[str, Any]) -> list[Any]:
    return as_list(as_dict(spec.get("modelClaim")).get("inferenceFlavors")) or as_list(
        as_dict(spec.get("modelClaims")).get("inferenceFlavors"))


def model_path(model: dict[str, Any]) -> str | None:
    """Where the model loader puts the OpenModel's model (a hub model's cache folder names the model)."""
    source = as_dict(as_dict(model.get("spec")).get("source"))
    hub = as_dict(source.get("modelHub"))
    model_id = hub.get("modelID")
    if isinstance(model_id, str) and model_id:
        filename = hub.get("filename")
        if isinstance(filename, str) and filename:
            return MODEL_PATH + filename
        return MODEL_PATH + "models--" + model_id.replace("/", "--")
    uri = source.get("uri")
    return uri if isinstance(uri, str) and uri else None


def roles(obj: dict[str, Any], ctx: Context) -> RoleSet:
    """The one model-runner role of a Playground (``spec.replicas`` pods)."""
    kind = str(obj.get("kind"))
    name, ns, meta = identity(obj, ctx.namespace)
    spec = as_dict(obj.get("spec"))
    ref = f"{kind.lower()}/{name}"
    where = "in the files given" if ctx.runtimes is not None else "to vramgate at admission"
    model_name = _model_name(spec)
    if model_name is None:
        return RoleSet(kind, name, (), (f"{ref}: nothing to judge: no spec.modelClaim.modelName",))
    model = ctx.runtimes.get("OpenModel", model_name, "", MODEL_GROUP) if ctx.runtimes is not None else None
    if model is None:
        return RoleSet(kind, name, (), (f"{ref}: OpenModel {model_name!r} is not visible {where}: its model and "
                                        f"GPUs are not known (pass its manifest with -f); the pods llmaz creates "
                                        f"are judged when created",))
    brc = as_dict(spec.get("backendRuntimeConfig"))
    backend = str(brc.get("backendName") or "vllm")
    if backend not in BACKENDS:
        return RoleSet(kind, name, (), (f"{ref}: backend {backend!r} is not read here (vllm and sglang are): the "
                                        f"pods llmaz creates are judged when created",))
    command, flag = BACKENDS[backend]
    path = model_path(model)
    args = ([flag, path] if path else []) + ["--served-model-name", model_name]
    args += [str(a) for a in as_list(brc.get("args"))]
    limits: dict[str, Any] = dict(as_dict(as_dict(brc.get("resources")).get("limits")))
    flavors = [as_dict(f) for f in as_list(as_dict(as_dict(model.get("spec")).get("inferenceConfig")).get("flavors"))]
    wanted = next((str(f) for f in _flavors(spec)), None)
    flavor = next((f for f in flavors if wanted is None or f.get("name") == wanted), None)
    limits.update(as_dict(as_dict(flavor).get("limits")))
    container: dict[str, Any] = {"name": RUNNER, "image": backend, "command": list(command), "args": args,
                                 "resources": {"limits": limits, "requests": dict(limits)}}
    envs = [e for e in as_list(brc.get("envs")) if isinstance(e, dict)]
    if envs:
        container["env"] = envs
    pod: dict[str, Any] = {"containers": [container]}
    replicas = count(spec.get("replicas"), 1, "spec.replicas")
    pod_meta = inherit_annotations({}, meta)
    return RoleSet(kind, name, (Role("", PodView(kind, ns, name, pod_meta, pod, "", 1), 1, replicas),))
