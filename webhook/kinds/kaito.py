"""KAITO (kaito.sh): Workspace and InferenceSet — the pod template when one is given, else KAITO's own sizing.

Shape from kaito-project/kaito api/v1beta1/workspace_types.go: top-level ``resource.{instanceType, count,
labelSelector}``, ``inference.{preset.name, template (a PodTemplateSpec), config}``, ``tuning.{preset, method}``;
inferenceset_types.go: ``spec.{replicas, template.{resource, inference}}``. With a preset, KAITO's NodesEstimator
picks the node count and the engine flags for the model and provisions ``instanceType`` nodes that may not
exist yet: judging it against today's nodes could reject what KAITO will create. So an inference preset with an
``instanceType`` is judged on that instance type (its GPUs from the cloud tables, ``count`` nodes), and only
ever warned about (decide/provisioned.py); without one (nodes named by ``labelSelector``), or for tuning, a
warning says KAITO sizes it. The pods KAITO creates are judged by the pod webhook, with the model in their
command lines. A ``template`` is the pod, judged as written.
"""

from __future__ import annotations

from typing import Any

import yaml

from ..units.bounds import CONFIG_FILES
from .runtimes import Context
from .view import (
    PodView,
    Role,
    RoleSet,
    WorkloadError,
    as_dict,
    count,
    engine_flags,
    identity,
    inherit_annotations,
    template_parts,
)

GROUP = "kaito.sh"
KINDS = frozenset({"Workspace", "InferenceSet"})


CONFIG_KEY = "inference_config.yaml"  # KAITO's inference ConfigMap: its ``vllm:`` section holds engine arguments


def config_ref(obj: Any) -> str | None:
    """The inference ConfigMap a Workspace (or an InferenceSet's template) names, for admission to read."""
    if not isinstance(obj, dict) or not str(obj.get("apiVersion", "")).startswith(f"{GROUP}/"):
        return None
    body = as_dict(as_dict(obj.get("spec")).get("template")) if obj.get("kind") == "InferenceSet" else obj
    name = as_dict(body.get("inference")).get("config")
    return name if isinstance(name, str) and name else None


def _config_flags(name: Any, ctx: Context, ref: str) -> tuple[list[str], list[str]]:
    """vLLM flags from the ``vllm:`` section of the inference ConfigMap, and warnings when it cannot be read."""
    if not isinstance(name, str) or not name:
        return [], []
    text = ctx.runtimes.configmap(name, CONFIG_KEY) if ctx.runtimes is not None else None
    if text is None:
        return [], [f"{ref}: inference ConfigMap {name} ({CONFIG_KEY}) is not readable here; its vLLM arguments "
                    "are not known"]
    try:
        doc = CONFIG_FILES.load(text, f"ConfigMap {name} key {CONFIG_KEY}")
    except yaml.YAMLError:
        return [], [f"{ref}: inference ConfigMap {name}: {CONFIG_KEY} is not YAML; its vLLM arguments are not known"]
    return engine_flags(as_dict(as_dict(doc).get("vllm"))), []


# KAITO's legacy preset names and the hub ids it runs for them (kaito-project/kaito pkg/utils/plugin:
# LegacyBuiltinToCatalog, looked up lower-cased by ResolveHFModelID); any other name is a hub id already.
LEGACY_PRESETS = {
    "phi-4": "microsoft/phi-4", "phi-4-mini-instruct": "microsoft/phi-4-mini-instruct",
    "llama-3.1-8b-instruct": "meta-llama/llama-3.1-8b-instruct",
    "llama-3.3-70b-instruct": "meta-llama/llama-3.3-70b-instruct",
    "deepseek-r1-distill-llama-8b": "deepseek-ai/deepseek-r1-distill-llama-8b",
    "deepseek-r1-distill-qwen-14b": "deepseek-ai/deepseek-r1-distill-qwen-14b",
    "deepseek-r1-0528": "deepseek-ai/deepseek-r1-0528", "deepseek-v3-0324": "deepseek-ai/deepseek-v3-0324",
    "phi-3-mini-4k-instruct": "microsoft/phi-3-mini-4k-instruct",
    "phi-3-mini-128k-instruct": "microsoft/phi-3-mini-128k-instruct",
    "phi-3-medium-4k-instruct": "microsoft/phi-3-medium-4k-instruct",
    "phi-3-medium-128k-instruct": "microsoft/phi-3-medium-128k-instruct",
    "phi-3.5-mini-instruct": "microsoft/phi-3.5-mini-instruct",
    "qwen2.5-coder-7b-instruct": "qwen/qwen2.5-coder-7b-instruct",
    "qwen2.5-coder-32b-instruct": "qwen/qwen2.5-coder-32b-instruct",
    "gpt-oss-20b": "openai/gpt-oss-20b", "gpt-oss-120b": "openai/gpt-oss-120b",
    "gemma-3-4b-instruct": "google/gemma-3-4b-it", "gemma-3-27b-instruct": "google/gemma-3-27b-it",
    "mistral-7b": "mistralai/mistral-7b-v0.3", "mistral-7b-instruct": "mistralai/mistral-7b-instruct-v0.3",
    "ministral-3-3b-instruct": "mistralai/ministral-3-3b-instruct-2512",
    "ministral-3-8b-instruct": "mistralai/ministral-3-8b-instruct-2512",
    "ministral-3-14b-instruct": "mistralai/ministral-3-14b-instruct-2512",
    "mistral-large-3-675b-instruct": "mistralai/mistral-large-3-675b-instruct-2512",
}


def hub_id_of_preset(preset: str) -> str:
    """The hub id KAITO runs for a preset name: its legacy short names mapped, anything else as given."""
    return LEGACY_PRESETS.get(preset.lower(), preset)


def roles(obj: dict[str, Any], ctx: Context) -> RoleSet:
    """The inference template as one role; a preset (or tuning) only as a warning."""
    kind = str(obj.get("kind"))
    name, ns, meta = identity(obj, ctx.namespace)
    if kind == "InferenceSet":
        spec = as_dict(obj.get("spec"))
        body, where = as_dict(spec.get("template")), "spec.template"
        replicas = count(spec.get("replicas"), 1, "spec.replicas")
    else:
        body, where, replicas = obj, "", 1
    resource = as_dict(body.get("resource"))
    instance = resource.get("instanceType") if isinstance(resource.get("instanceType"), str) else ""
    inference = as_dict(body.get("inference"))
    ref = f"{kind.lower()}/{name}"
    prefix = f"{where}." if where else ""
    if inference.get("template") is not None:
        pod_meta, pod = template_parts(inference["template"], f"{prefix}inference.template")
        view = PodView(kind, ns, name, inherit_annotations(pod_meta, meta), pod, "inference", 1)
        return RoleSet(kind, name, (Role("inference", view, 1, replicas),))
    preset = as_dict(inference.get("preset")).get("name") or as_dict(as_dict(body.get("tuning")).get("preset")).get(
        "name")
    field = f"{kind} {prefix}{'inference' if as_dict(inference.get('preset')).get('name') else 'tuning'}.preset.name"
    if isinstance(preset, str):
        field = f"{field} {preset}"
        preset = hub_id_of_preset(preset)
    partition = as_dict(resource.get("partition"))
    if isinstance(preset, str) and preset and partition and not instance and not body.get("tuning"):
        selector = as_dict(as_dict(obj.get("spec")).get("labelSelector")) if kind == "InferenceSet" else \
            as_dict(resource.get("labelSelector"))
        return _partitioned(kind, ns, name, meta, preset, partition, selector, inference, ctx, replicas, prefix,
                            field)
    if isinstance(preset, str) and preset and instance and not body.get("tuning"):
        # KAITO's preset pods run the model with vLLM over every GPU of each node it provisions (TP = GPUs per
        # node, PP over the nodes): judged on that instance type, never against today's nodes.
        nodes = count(resource.get("count"), 1, f"{prefix}resource.count", minimum=1)
        flags, warnings = _config_flags(inference.get("config"), ctx, ref)
        pod = {"containers": [{"name": "inference", "image": "mcr.microsoft.com/aks/kaito/kaito-base",
                               "command": ["vllm", "serve", preset, *flags]}],
               "nodeSelector": {"node.kubernetes.io/instance-type": instance}}
        view = PodView(kind, ns, name, inherit_annotations({}, meta), pod, "inference", nodes, provisioned=instance,
                       named_model=(preset, field))
        return RoleSet(kind, name, (Role("inference", view, nodes, replicas * nodes),), tuple(warnings))
    on = f"on {instance} nodes" if instance else "on the nodes its labelSelector names"
    what = "tuning" if body.get("tuning") else "inference"
    warning = (f"{ref}: KAITO preset {preset or '?'} ({what}) {on}: KAITO sizes the nodes and the engine flags "
               "itself; vramgate judges the pods it creates")
    return RoleSet(kind, name, (), (warning,))


# resource.partition (kaito-project/kaito at 056b828; BYO nodes only, validatePartition): api/v1beta1/
# workspace_types.go PartitionSpec {mode: mig|accelerator, profile, count}; pkg/workspace/inference/
# preset_inferences.go: getGPUConfig (mig: utils.GetMIGGPUConfig, one slice; accelerator: the node's config scaled
# to count GPUs, sku.ScaleGPUConfigToCount) and the preset pod's resources — ``nvidia.com/mig-<profile>``
# (mig.MIGResourceName, the device plugin's mixed strategy) or ``nvidia.com/gpu`` — with a required node
# affinity on the labelSelector's matchLabels (SanitizedMatchLabels); pkg/model/interface.go
# buildVLLMInferenceCommand: ``--max-model-len auto``, ``--gpu-memory-utilization 0.84``; configureParallelism:
# data parallel when one GPU holds the model, else tensor parallel over the GPUs (judged as TP: the weaker need).
_MIG_PREFIX = "nvidia.com/mig-"  # KAITO's mig.MIGResourcePrefix
_KAITO_UTILIZATION = "0.84"  # defaultGPUMemoryUtilization


def _partitioned(kind: str, ns: str, name: str, meta: dict[str, Any], preset: str, partition: dict[str, Any],
                 selector: dict[str, Any], inference: dict[str, Any], ctx: Context, replicas: int,
                 prefix: str, field: str) -> RoleSet:
    """A preset on a partition of today's (BYO) nodes: the vLLM pod KAITO runs there, judged on those nodes."""
    ref = f"{kind.lower()}/{name}"
    mode = partition.get("mode")
    where = f"{prefix}resource.partition"
    if mode == "mig":
        profile = partition.get("profile")
        if not isinstance(profile, str) or not profile:
            raise WorkloadError(f"{where}.profile: a MIG profile (1g.10gb, 2g.20gb, …) is required with mode mig")
        resource, gpus = f"{_MIG_PREFIX}{profile}", 1
    elif mode == "accelerator":
        resource, gpus = "nvidia.com/gpu", count(partition.get("count"), 1, f"{where}.count", minimum=1)
    else:
        raise WorkloadError(f"{where}.mode={mode!r}: KAITO supports mig and accelerator")
    flags, warnings = _config_flags(inference.get("config"), ctx, ref)
    command = ["vllm", "serve", preset, "--max-model-len", "auto", "--gpu-memory-utilization", _KAITO_UTILIZATION]
    if gpus > 1:
        command += ["--tensor-parallel-size", str(gpus)]
    pod: dict[str, Any] = {"containers": [{"name": "inference", "image": "mcr.microsoft.com/aks/kaito/kaito-base",
                                           "command": [*command, *flags],
                                           "resources": {"limits": {resource: str(gpus)}}}]}
    labels = {str(k): str(v) for k, v in as_dict(selector.get("matchLabels")).items()}
    if labels:
        pod["nodeSelector"] = labels
    view = PodView(kind, ns, name, inherit_annotations({}, meta), pod, "inference", 1, named_model=(preset, field))
    return RoleSet(kind, name, (Role("inference", view, 1, replicas),), tuple(warnings))
