"""Kubeflow Trainer v2 (TrainJob, TrainingRuntime, ClusterTrainingRuntime) and Kubeflow PyTorchJob.

Shapes: https://github.com/kubeflow/trainer/blob/master/pkg/apis/trainer/v1alpha1/trainjob_types.go
(``spec.runtimeRef.{name, kind}``, ``spec.trainer.{image, command, args, env, numNodes, resourcesPerNode}``,
``spec.initializer.model.storageUri``: what the runtime's ``model-initializer`` job downloads into
/workspace/model for the trainer, else that job's ``STORAGE_URI`` env — both put on the trainer's pod as the
init container that downloads it, so the model is found where it is stored),
trainingruntime_types.go (``spec.mlPolicy.numNodes``, ``spec.template.spec``: a JobSet spec whose
``node`` job runs the trainer in its ``node`` container — manifests/base/runtimes/torch_distributed.yaml),
and https://github.com/kubeflow/training-operator/blob/master/pkg/apis/kubeflow.org/v1/pytorch_types.go
(``spec.pytorchReplicaSpecs.{Master, Worker}.{replicas, template}``). The nodes of one job together
train one model: the group is the whole job (whether its GPUs shard or replicate the model is the
training parallelism's call).
"""

from __future__ import annotations

from typing import Any

from .jobset import replicated_jobs
from .runtimes import Context
from .view import (
    PodView,
    Role,
    RoleSet,
    WorkloadError,
    as_dict,
    as_list,
    copied,
    count,
    identity,
    inherit_annotations,
    pod_gpus,
    template_parts,
)

# kubeflow/trainer pkg/apis/trainer/v1alpha1/groupversion_info.go: trainer.kubeflow.org; the training-operator's
# PyTorchJob is kubeflow.org (kubeflow/training-operator pkg/apis/kubeflow.org/v1).
GROUP = "trainer.kubeflow.org"
KINDS = frozenset({"TrainJob", "TrainingRuntime", "ClusterTrainingRuntime"})
PYTORCH_GROUP = "kubeflow.org"
PYTORCH_KINDS = frozenset({"PyTorchJob"})
TRAINER_JOB = "node"
TRAINER_CONTAINER = "node"
_ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
MODEL_INITIALIZER = "model-initializer"
MODEL_PATH = "/workspace/model"  # where the runtimes' model-initializer puts the model (torch_distributed.yaml)


def roles(obj: dict[str, Any], ctx: Context) -> RoleSet:
    kind = obj.get("kind")
    if kind == "PyTorchJob":
        return _pytorchjob(obj, ctx)
    if kind == "TrainJob":
        return _trainjob(obj, ctx)
    return _runtime(obj, ctx)


def _is_trainer(job: str, pod_meta: dict[str, Any], rj_meta: dict[str, Any]) -> bool:
    labels = {**as_dict(rj_meta.get("labels")), **as_dict(pod_meta.get("labels"))}
    return labels.get(_ANCESTOR) == "trainer" or job == TRAINER_JOB


def _runtime_jobs(runtime: dict[str, Any], where: str) -> tuple[list[tuple[str, dict[str, Any], dict[str, Any], int]],
                                                                int | None]:
    spec = as_dict(runtime.get("spec"))
    nodes = as_dict(spec.get("mlPolicy")).get("numNodes")
    jobs = replicated_jobs(as_dict(as_dict(spec.get("template")).get("spec")), f"{where}.template.spec")
    return jobs, count(nodes, 1, f"{where}.mlPolicy.numNodes", minimum=1) if nodes is not None else None


def _runtime(obj: dict[str, Any], ctx: Context) -> RoleSet:
    kind = str(obj.get("kind"))
    name, ns, meta = identity(obj, ctx.namespace)
    jobs, nodes = _runtime_jobs(obj, "spec")
    out = []
    for job, pm, pod, pods in jobs:
        trainer = job == TRAINER_JOB or as_dict(pm.get("labels")).get(_ANCESTOR) == "trainer"
        n = nodes if trainer and nodes is not None else pods
        out.append(Role(job, PodView(kind, ns, name, inherit_annotations(pm, meta), pod, job, n if trainer else 1),
                        n if trainer else 1, n))
    return RoleSet(kind, name, tuple(out), grouped=True)


def _trainjob(obj: dict[str, Any], ctx: Context) -> RoleSet:
    kind = str(obj.get("kind"))
    name, ns, meta = identity(obj, ctx.namespace)
    spec = as_dict(obj.get("spec"))
    trainer = as_dict(spec.get("trainer"))
    ref = as_dict(spec.get("runtimeRef"))
    rt_kind = ref.get("kind") if ref.get("kind") in ("TrainingRuntime", "ClusterTrainingRuntime") else \
        "ClusterTrainingRuntime"
    rt_name = ref.get("name")
    runtime = ctx.runtimes.get(str(rt_kind), rt_name, ns) if ctx.runtimes is not None and isinstance(
        rt_name, str) else None
    warnings: list[str] = []
    jobs: list[tuple[str, dict[str, Any], dict[str, Any], int]] = []
    rt_nodes: int | None = None
    if runtime is not None:
        jobs, rt_nodes = _runtime_jobs(runtime, f"{rt_kind}/{rt_name} spec")
    nodes = count(trainer.get("numNodes"), rt_nodes or 1, "spec.trainer.numNodes", minimum=1)
    out: list[Role] = []
    found = False
    uri = _model_uri(spec, jobs)
    for job, pm, pod, pods in jobs:
        if _is_trainer(job, pm, {}) and not found:
            found = True
            pod = _with_model_download(_override(pod, trainer), uri)
            out.append(Role(job, PodView(kind, ns, name, inherit_annotations(pm, meta), pod, job, nodes), nodes,
                            nodes))
        else:
            out.append(Role(job, PodView(kind, ns, name, inherit_annotations(pm, meta), pod, job, 1), 1, pods))
    if not found:
        plain = _override({"containers": [{"name": TRAINER_CONTAINER}]}, trainer)
        pod = _with_model_download(plain, uri)
        if isinstance(rt_name, str) and runtime is None and (ctx.runtimes or pod_gpus(pod, ctx.gpu_resources)):
            warnings.append(f"{kind.lower()}/{name}: {rt_kind} {rt_name!r} is not visible to vramgate here; judged "
                            "from spec.trainer alone")
        if uri is not None and pod is plain:
            warnings.append(f"{kind.lower()}/{name}: the model is {uri} (spec.initializer), but the trainer's command "
                            "is in that runtime: how it trains is unknown here")
        out.append(Role(TRAINER_JOB, PodView(kind, ns, name, inherit_annotations({}, meta), pod, TRAINER_JOB, nodes),
                        nodes, nodes))
    return RoleSet(kind, name, tuple(out), tuple(warnings), grouped=len(out) > 1)


def _model_uri(spec: dict[str, Any], jobs: list[tuple[str, dict[str, Any], dict[str, Any], int]]) -> str | None:
    """The model's URI: the TrainJob's ``initializer.model.storageUri``, else the runtime initializer's STORAGE_URI."""
    uri = as_dict(as_dict(spec.get("initializer")).get("model")).get("storageUri")
    if isinstance(uri, str) and uri.strip():
        return uri.strip()
    for job, pm, pod, _ in jobs:
        if job != MODEL_INITIALIZER and as_dict(pm.get("labels")).get(_ANCESTOR) != MODEL_INITIALIZER:
            continue
        for c in as_list(pod.get("containers")):
            for e in as_list(as_dict(c).get("env")):
                if isinstance(e, dict) and e.get("name") == "STORAGE_URI" and isinstance(e.get("value"), str):
                    return str(e["value"]).strip() or None
    return None


def _with_model_download(pod: dict[str, Any], uri: str | None) -> dict[str, Any]:
    """The trainer pod with the model download as an init container (its own job in Trainer v2, same effect).

    Only where the trainer's command is known: without it (a runtime vramgate cannot see) the recipe, and so
    whether this trains at all and how it shards, is unknown, and a model alone would be judged as served.
    """
    trainer = next((c for c in as_list(pod.get("containers")) if isinstance(c, dict)
                    and c.get("name") == TRAINER_CONTAINER), None)
    if uri is None or trainer is None or not (trainer.get("command") or trainer.get("args")):
        return pod
    init = {"name": MODEL_INITIALIZER, "image": "kubeflow/model-initializer", "args": [uri, MODEL_PATH]}
    return {**pod, "initContainers": [*as_list(pod.get("initContainers")), init]}


def _override(pod: dict[str, Any], trainer: dict[str, Any]) -> dict[str, Any]:
    """The trainer pod with the TrainJob's ``spec.trainer`` applied to its ``node`` container."""
    containers = [c for c in as_list(pod.get("containers")) if isinstance(c, dict)]
    idx = next((i for i, c in enumerate(containers) if c.get("name") == TRAINER_CONTAINER), 0 if containers else None)
    if idx is None:
        containers, idx = [{"name": TRAINER_CONTAINER}], 0
    c = dict(containers[idx])
    for key in ("image", "command", "args"):
        if trainer.get(key) is not None:
            c[key] = copied(trainer[key])
    if isinstance(trainer.get("env"), list):
        names = {str(e.get("name")) for e in trainer["env"] if isinstance(e, dict)}
        c["env"] = [*(e for e in as_list(c.get("env")) if not (isinstance(e, dict) and str(e.get("name")) in names)),
                    *copied(trainer["env"])]
    if isinstance(trainer.get("resourcesPerNode"), dict):
        c["resources"] = copied(trainer["resourcesPerNode"])
    containers[idx] = c
    return {**pod, "containers": containers}


def _pytorchjob(obj: dict[str, Any], ctx: Context) -> RoleSet:
    kind = str(obj.get("kind"))
    name, ns, meta = identity(obj, ctx.namespace)
    specs = as_dict(obj.get("spec")).get("pytorchReplicaSpecs")
    if not isinstance(specs, dict):
        raise WorkloadError("spec.pytorchReplicaSpecs is missing")
    parts = []
    for rtype, rs in specs.items():
        w = f"spec.pytorchReplicaSpecs.{rtype}"
        if not isinstance(rs, dict):
            raise WorkloadError(f"{w} must be a mapping")
        pm, pod = template_parts(rs.get("template"), f"{w}.template")
        parts.append((str(rtype).lower(), pm, pod, count(rs.get("replicas"), 1, f"{w}.replicas")))
    total = max(sum(p[3] for p in parts), 1)
    return RoleSet(kind, name, tuple(
        Role(role, PodView(kind, ns, name, inherit_annotations(pm, meta), pod, role, total), total, n)
        for role, pm, pod, n in parts), grouped=True)
