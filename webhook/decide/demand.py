"""What a workload needs from GPUs: count per pod, VRAM per GPU, CUDA, tier — from its declaration."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from ..cluster.accelerators import (
    NVIDIA,
    PARTITION_PREFIX,
    generic_model_note,
    is_partition_name,
    resource_of,
    vendors,
)
from ..cluster.dra import DraView, Request, claims_vendor, pod_claims, with_templates
from ..cluster.dra_extended import extended_request, gpu_resources
from ..cluster.mig import is_profile, profile_of
from ..config import Config, PlacementMode
from ..engines import (
    ENGINES,
    ConfigMapLookup,
    ContainerReading,
    Found,
    ParallelRead,
    Settings,
    UtilRule,
    engine_env_names,
    engine_named,
    estimate,
    lifecycle_commands,
    read_container,
    training_engine,
)
from ..engines.base import Version, parse_version
from ..engines.cmdline import Command
from ..engines.grammar import GrammarError
from ..engines.identity import identify
from ..engines.precision import resolve_precision
from ..kinds import PodView, WorkloadError
from ..kinds.view import is_placeholder
from ..models.catalog import Catalog, ModelSpec, params_from_name
from ..models.hub import repo_id
from ..models.vram import Estimate, EstimateRequest, Workload
from ..units import declaration as d
from ..units.cuda import CudaVersion, cuda_from_image, parse_cuda
from ..units.declaration import DeclarationError
from ..units.precision import ACCEPTED as PRECISIONS_ACCEPTED
from ..units.precision import PRECISIONS, canonical, is_kv_dtype
from ..units.quantity import QuantityError, parse_count, parse_fraction, parse_positive_int, parse_size_mib
from .model_source import described, make_known, with_operator_field
from .shares import Share, mib_amount
from .slices import slice_pods
from .storage import downloaded_model, is_location, mounted_file, stored_model

# When nothing declares a context and the model is unknown: llama.cpp's and TGI's historical default.
UNKNOWN_MODEL_CONTEXT = 4096
# Sequence length a training run uses when nothing declares one (LLaMA-Factory's cutoff_len default).
TRAINING_CONTEXT = 2048


_NO_DRA = DraView()


@dataclass(frozen=True)
class Demand:
    """A GPU workload's need, as admission, the extender and the CLI all see it."""

    view: PodView
    gpus: int
    gpu_containers: tuple[str, ...]
    workload: Workload
    tier: str
    model: str | None = None
    spec: ModelSpec | None = None
    engine: str | None = None
    estimate: Estimate | None = None
    explicit_vram_mib: int | None = None
    utilization: float = 1.0
    # Where the engine sets its share by the GPU's memory (SGLang): ``utilization`` is then the unknown-GPU figure.
    util_rule: UtilRule | None = None
    cuda: CudaVersion | None = None
    placement: PlacementMode | None = None
    warnings: tuple[str, ...] = field(default=())
    # Where each input came from: ("context", "arg --max-model-len"), ("model", "env MODEL_ID via $(MODEL_ID)").
    sources: tuple[tuple[str, str], ...] = field(default=())
    group_size: int = 1  # pods that together hold one model instance (LWS size, --nnodes)
    # GPUs asked for with DRA ResourceClaims (then ``gpus`` counts their devices): judged on nodes' devices.
    claims: tuple[Request, ...] = ()
    # A model named but not in the catalog (judged without it): what a hub lookup may add.
    unknown_model: str | None = None
    # GPUs asked as a plain extended resource that a DeviceClass serves (extendedResourceName): on nodes without
    # a device plugin for it, the scheduler allocates devices of that class (placement.for_extended).
    extended: tuple[Request, ...] = ()
    # MIG slices asked for under the mixed strategy (then ``gpus`` counts them): (profile, slices), e.g.
    # (("1g.10gb", 1),). Judged on the nodes' slices of each profile, at the profile's memory.
    mig: tuple[tuple[str, int], ...] = ()
    # The engine picks its context once it knows its GPU (``--max-model-len auto``): the estimate is at its least.
    auto_context: bool = False
    # The context the engine will pick on the smallest GPU that holds the pod, and that GPU (set by the verdict).
    picked_context: tuple[int, str] | None = None
    # Whose GPUs it asks: "nvidia" (config.labels.gpu_resource), else a vendor of webhook/data/accelerators.yaml.
    vendor: str = NVIDIA
    # The resource its pods ask for that vendor's GPUs (``amd.com/gpu``; the config's for NVIDIA): what
    # suggestions and mutations name.
    gpu_resource: str = "nvidia.com/gpu"
    # The vendor's finer resource the pod asks instead of devices (aws.amazon.com/neuroncore): ``gpus`` then counts
    # cores, judged on each node's cores at a core's share of its device's memory. "" for devices.
    unit: str = ""
    # The share of each GPU the pod states to a GPU-sharing system (HAMi, Volcano vGPU, KAI): then ``estimate`` is
    # its model's on whole GPUs and the share places it (decide/shares.py).
    share: Share | None = None

    @property
    def per_gpu_mib(self) -> int | None:
        """VRAM each GPU must hold (the estimate's middle), or None when nothing declares enough to tell."""
        if self.explicit_vram_mib is not None:
            return math.ceil(self.explicit_vram_mib / self.gpus)
        return self.estimate.per_gpu_mib if self.estimate else None

    @property
    def min_per_gpu_mib(self) -> int | None:
        """The low end of the estimate's band: below it the workload surely cannot start."""
        if self.explicit_vram_mib is not None:
            return self.per_gpu_mib
        return self.estimate.low_per_gpu_mib if self.estimate else None

    @property
    def total_mib(self) -> int | None:
        if self.explicit_vram_mib is not None:
            return self.explicit_vram_mib
        return self.estimate.total_mib if self.estimate else None

    @property
    def weights_mib(self) -> float | None:
        return self.estimate.weights_mib if self.estimate else None

    @property
    def host_weights_mib(self) -> float:
        """Weights the engine keeps in host memory instead of on the GPUs (MiB, whole instance): 0 when none."""
        return self.estimate.host_weights_mib if self.estimate else 0.0

    def summary(self) -> str:
        """One human line for the ``vramgate.io/estimate`` annotation and messages."""
        if self.explicit_vram_mib is not None:
            said = next((v for k, v in self.sources if k == "vram"), d.A_VRAM)
            return f"{self.per_gpu_mib / 1024:.1f} GiB per GPU (declared {said})"  # type: ignore[operator]
        if self.estimate is not None:
            if self.picked_context is not None:
                tokens, where = self.picked_context
                return (f"{self.estimate.summary()}; context chosen by {self.engine}: {tokens} tokens on {where} "
                        "(more on larger GPUs)")
            return self.estimate.summary()
        return "no VRAM estimate (declare vramgate.io/model or vramgate.io/vram)"

    def explain(self) -> list[str]:
        """Where every input came from, one ``name: source`` line each."""
        return [f"{k}: {v}" for k, v in self.sources]


def _gpu_count(container: dict[str, Any], resource: str, where: str) -> int:
    resources = container.get("resources") or {}
    if not isinstance(resources, dict):
        return 0
    for key in ("limits", "requests"):
        section = resources.get(key) or {}
        if isinstance(section, dict) and resource in section:
            raw = section[resource]
            try:
                count = int(str(raw))
            except ValueError:
                if isinstance(raw, str) and is_placeholder(raw):
                    return 1  # an unfilled template value (`$GPU_PER_NODE`): at least one GPU, size unknown
                raise DeclarationError(f"{where} {key}[{resource}]", str(raw), "use a whole number") from None
            if count < 0:
                raise DeclarationError(f"{where} {key}[{resource}]", str(raw), "use a whole number")
            return count
    return 0


def gpu_containers(view: PodView, resource: str | tuple[str, ...]) -> tuple[int, list[dict[str, Any]]]:
    """GPUs per pod (max of the app containers' sum and any init container) and the GPU containers.

    ``resource`` is the GPU resource name, or several (``nvidia.com/gpu``, ``nvidia.com/gpu.shared`` …), summed.
    """
    names = (resource,) if isinstance(resource, str) else resource
    app = init = 0
    found: list[dict[str, Any]] = []
    for key in ("containers", "initContainers"):
        for c in view.spec.get(key) or []:
            if not isinstance(c, dict):
                continue
            where = f"container {c.get('name', '?')}"
            n = sum(_gpu_count(c, name, where) for name in names)
            if n:
                found.append(c)
                if key == "containers":
                    app += n
                else:
                    init = max(init, n)
    return max(app, init), found


def _extended(view: PodView, gpus: int, containers: list[dict[str, Any]], config: Config, vendor: str,
              dra: DraView) -> tuple[int, list[dict[str, Any]], tuple[Request, ...]]:
    """GPUs, GPU containers and the DRA requests of what the pod asks as extended resources a DeviceClass serves.

    ``nvidia.com/gpu`` (or the vendor's resource) already counted in ``gpus`` keeps its count; with none, a GPU
    class's own name (``deviceclass.resource.kubernetes.io/gpu.nvidia.com``, or a custom ``extendedResourceName``)
    asked in ``resources`` makes the pod a GPU pod too.
    """
    served = gpu_resources(dra)
    if not served:
        return gpus, containers, ()
    if gpus:
        names = ((config.labels.gpu_resource, *config.labels.gpu_resource_aliases) if vendor == NVIDIA
                 else next((tuple(v.device_resources) for v in vendors() if v.name == vendor), ()))
    else:
        names = tuple(served)
    requests: list[Request] = []
    found: list[dict[str, Any]] = []
    total = 0
    for name in names:
        dc = served.get(name)
        if dc is None:
            continue
        count, users = gpu_containers(view, name)
        if count:
            requests.append(extended_request(name, count, dc))
            total += count
            found.extend(c for c in users if not any(c is f for f in found))
    if not requests:
        return gpus, containers, ()
    return (gpus, containers, tuple(requests)) if gpus else (total, found, tuple(requests))


def mig_containers(view: PodView, prefix: str, is_name: Callable[[str], bool] = is_profile
                   ) -> tuple[tuple[tuple[str, int], ...], list[dict[str, Any]]]:
    """MIG slices per pod by profile (``nvidia.com/mig-1g.10gb: 1``): the app containers' sum, or the largest init
    container's, and the containers that ask them."""
    app: dict[str, int] = {}
    init: dict[str, int] = {}
    found: list[dict[str, Any]] = []
    for key in ("containers", "initContainers"):
        for c in view.spec.get(key) or []:
            if not isinstance(c, dict):
                continue
            resources = c.get("resources")
            names = {str(r) for section in ("limits", "requests")
                     if isinstance(resources, dict) and isinstance(amounts := resources.get(section), dict)
                     for r in amounts}
            asked = False
            for name in sorted(names):
                profile = profile_of(name, prefix, is_name)
                if profile is None:
                    continue
                n = _gpu_count(c, name, f"container {c.get('name', '?')}")
                if not n:
                    continue
                asked = True
                if key == "containers":
                    app[profile] = app.get(profile, 0) + n
                else:
                    init[profile] = max(init.get(profile, 0), n)
            if asked:
                found.append(c)
    chosen = app if sum(app.values()) >= sum(init.values()) else init
    return tuple(sorted(chosen.items())), found


def _gpu_memory_resource(view: PodView, names: list[str]) -> tuple[int, dict[str, Any], str] | None:
    """(MiB per GPU, container, resource) where a container states its GPU memory as a resource (HAMi gpumem)."""
    for c in view.containers():
        resources = c.get("resources")
        for section in ("limits", "requests"):
            amounts = resources.get(section) if isinstance(resources, dict) else None
            if not isinstance(amounts, dict):
                continue
            for name in names:
                if name in amounts:
                    # In canonical form from kube-apiserver: 8000 arrives as "8k".
                    return mib_amount(amounts[name], f"container {c.get('name', '?')} {section}[{name}]"), c, name
    return None


def _annotation(annotations: dict[str, str], key: str) -> Found | None:
    value = annotations.get(key)
    if isinstance(value, str) and value.strip():
        return Found(value.strip(), key)
    return None


# GKE's samples label a serving pod with the model it runs (ai.gke.io/model: gemma-3-27b-it), also when the
# engine loads a local checkpoint of it.
GKE_MODEL_LABEL = "ai.gke.io/model"


def _label(meta: dict[str, Any], key: str) -> str | None:
    labels = meta.get("labels")
    value = labels.get(key) if isinstance(labels, dict) else None
    return value.strip() if isinstance(value, str) and value.strip() else None


_SERVED_FLAG = re.compile(r"--served[-_]model[-_]name[=\s]+['\"]?([\w.-]+/[\w.-]+)")


def _served_name(main: ContainerReading) -> tuple[str, str] | None:
    """A hub id (org/name) the container serves its model as, and where it says so; None for a bare alias."""
    served = repo_id(main.env.get("NIM_SERVED_MODEL_NAME", ""))
    if served is not None:
        return served, "env NIM_SERVED_MODEL_NAME"
    found = _SERVED_FLAG.search(main.command_text)
    served = repo_id(found.group(1)) if found else None
    return (served, "--served-model-name") if served else None


def _first(*candidates: Found | None) -> Found | None:
    return next((c for c in candidates if c is not None), None)


def _parse(found: Found | None, parser: Any, accepted: str) -> Any:
    if found is None:
        return None
    try:
        return parser(found.value)
    except (QuantityError, ValueError):
        raise DeclarationError(found.source, found.value, accepted) from None


def _tier(view: PodView, annotations: dict[str, str], config: Config) -> str:
    declared = annotations.get(d.A_TIER)
    if declared:
        if declared not in config.admission.tiers:
            raise DeclarationError(d.A_TIER, declared, "use one of " + ", ".join(config.admission.tiers))
        return declared
    kinds = set(config.admission.batch_kinds)
    return "batch" if view.kind in kinds or view.owner_kinds & kinds else "production"


def _bool(found: Found | None, default: bool) -> bool:
    if found is None:
        return default
    value = found.value.strip().lower()
    if value in ("true", "1", "yes", "on"):
        return True
    if value in ("false", "0", "no", "off"):
        return False
    raise DeclarationError(found.source, found.value, "use true or false")


def _mm_items(found: Found | None) -> int | None:
    """Images per prompt from ``--limit-mm-per-prompt``: ``image=4`` or ``{"image": 4}``."""
    if found is None:
        return None
    text = found.value.strip()
    try:
        data = json.loads(text)
        if isinstance(data, dict):
            value = data.get("image")
            return int(value) if isinstance(value, int | float) else None
    except ValueError:
        pass
    match = re.search(r"image\s*=\s*(\d+)", text)
    return int(match.group(1)) if match else None


def _int_setting(s: Settings, key: str) -> int | None:
    found = s.get(key)
    if found is None or _unresolved(found.value):
        return None  # `--nnodes $(LWS_GROUP_SIZE)`, `$NUM_NODES`: filled in at run time, unknown here
    return _parse(found, parse_positive_int, "use a whole number")


def _batched_tokens(s: Settings) -> int | None:
    """The tokens one forward pass batches; a value ≤ 0 is SGLang's ``--chunked-prefill-size -1`` (chunked
    prefill off, grammar.sglang_chunked_prefill_size), read as the engine's default, never refused."""
    found = s.get("batched_tokens")
    if found is not None and re.fullmatch(r"\s*-\d+\s*|\s*0+\s*", found.value):
        return None
    return _int_setting(s, "batched_tokens")


def _set_at_run_time(s: Settings, key: str) -> bool:
    found = s.get(key)
    return found is not None and _unresolved(found.value)


def _unresolved(value: str) -> bool:
    return "$(" in value or "${" in value or is_placeholder(value)


def _main(readings: list[ContainerReading]) -> ContainerReading:
    """The GPU container that speaks for the pod: the first that names a model, else one running an engine."""
    for r in readings:
        if r.settings is not None and r.settings.get("model") is not None:
            return r
    for r in readings:
        if any(r.env.get(n) for n in d.MODEL_ENVS) or r.settings is not None:
            return r
    return readings[0]


# LeaderWorkerSet injects these into every container of a group's pods (pkg/utils/pod AddLWSVariables):
# the group size from the pod's size annotation, the worker index from its label.
LWS_SIZE_ANNOTATION = "leaderworkerset.sigs.k8s.io/size"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"


def runtime_env(view: PodView) -> dict[str, str]:
    """Variables a controller sets in the running containers that the workload already tells: the group size.

    LeaderWorkerSet's ``LWS_GROUP_SIZE`` (also on a pod, from its size annotation), and RoleBasedGroup's
    ``RBG_LWP_GROUP_SIZE`` for a leader-worker pattern; both only where a group is known.
    """
    size = view.annotations.get(LWS_SIZE_ANNOTATION)
    if view.group_size > 1 or (view.kind == "LeaderWorkerSet" and view.group_size >= 1):
        size = str(view.group_size)
    if size is None or not size.strip().isdigit():
        return {}
    env = {"LWS_GROUP_SIZE": size.strip(), "RBG_LWP_GROUP_SIZE": size.strip()}
    index = view.labels.get(LWS_WORKER_INDEX_LABEL)
    if index is not None and index.strip().isdigit():
        env["LWS_WORKER_INDEX"] = index.strip()
    return env


_MODEL_FLAG = re.compile(r"(?:^|\s)--model(?:[-_](?:path|id|name))?(?:=|\s)")


def _runs(container: Any) -> str:
    """The start of what a container runs (command, then args), for a message, where it passes a model flag to an
    engine no reader claimed; "" otherwise (a sleep, an image's own entrypoint)."""
    if not isinstance(container, dict):
        return ""
    words = [str(w) for key in ("command", "args") for w in (container.get(key) or []) if isinstance(w, str | int)]
    text = " ".join(words).strip()
    if not _MODEL_FLAG.search(text):
        return ""
    return text if len(text) <= 60 else text[:57] + "..."


def read_demand(view: PodView, config: Config, catalog: Catalog, lookup: ConfigMapLookup | None = None,
                dra: DraView | None = None) -> Demand | None:
    """The demand of a workload, or None when it asks for no GPU. Raises DeclarationError.

    GPUs come from ``nvidia.com/gpu`` limits, else from the pod's ResourceClaims (their templates or
    claims looked up in ``dra``).
    """
    try:
        gpus, containers = gpu_containers(view, (config.labels.gpu_resource, *config.labels.gpu_resource_aliases))
        vendor, unit = NVIDIA, ""
        if not gpus:
            for v in vendors():
                gpus, containers = gpu_containers(view, v.device_resources)
                if not gpus and v.cores:
                    gpus, containers = gpu_containers(view, v.cores)
                    unit = v.cores if gpus else ""
                if gpus:
                    vendor = v.name
                    break
        mig, mig_found = mig_containers(view, config.labels.mig_resource_prefix)
        if not mig and not gpus:
            # AMD's mixed naming (amd.com/cpx_nps4): partitions of one mode, judged as MIG slices are.
            mig, mig_found = mig_containers(view, PARTITION_PREFIX, is_partition_name)
            vendor = "amd" if mig else vendor
        mig_warning = None
        if mig:
            if gpus:
                mig_warning = (f"asks both {config.labels.gpu_resource} and MIG slices "
                               f"({', '.join(config.labels.mig_resource_prefix + p for p, _ in mig)}): "
                               "judged on the MIG slices")
            # A CUDA process sees one MIG device; the model sits on the slice(s) the pod gets.
            gpus, containers = sum(n for _, n in mig), mig_found
        memory_mib = _gpu_memory_resource(view, config.labels.gpu_memory_resources)
        if memory_mib is not None and gpus == 0:
            # HAMi: a share of one GPU's memory, asked without a GPU count, gets one GPU.
            gpus, containers = 1, [memory_mib[1]]
        extended: tuple[Request, ...] = ()
        if not mig and memory_mib is None and not unit:
            gpus, containers, extended = _extended(view, gpus, containers, config, vendor, dra or _NO_DRA)
    except WorkloadError as exc:
        raise DeclarationError("spec", "", str(exc)) from None
    claimed = None
    if gpus == 0 and view.spec.get("resourceClaims"):
        # The templates an operator makes from its own fields are read as if they were in the cluster already.
        seen = with_templates(dra or _NO_DRA, view.namespace or "", view.claim_templates)
        claimed = pod_claims(view.spec, view.namespace or "", seen, dict(view.generated_claims))
    if claimed is not None:
        gpus, containers = claimed.gpus, list(claimed.containers)
        vendor = claims_vendor(claimed.requests) or vendor
    if gpus == 0:
        return None
    ann = view.annotations
    warnings: list[str] = list(claimed.warnings) if claimed else []
    if mig_warning:
        warnings.append(mig_warning)
    sources: list[tuple[str, str]] = []
    runtime = runtime_env(view)
    readings = [read_container(c, (), lookup, runtime) for c in containers]
    if any(r.settings is not None and r.settings.get("model") is None
           and (e := engine_named(r.engine)) is not None and e.model_in_pod_commands for r in readings):
        # Ollama's model is often pulled by a lifecycle hook or an init container.
        pod_commands: list[Command] = lifecycle_commands(view.spec)
        readings = [read_container(c, pod_commands, lookup, runtime) for c in containers]
    main = _main(readings)
    settings = main.settings or Settings("unknown")
    reader = engine_named(settings.engine)
    config_file = settings.value("config") if reader is not None and reader.read_config_file else None
    if config_file and lookup is not None and reader is not None and reader.read_config_file is not None:
        # The trainer's YAML (axolotl, LLaMA-Factory) mounted from a ConfigMap: what its command leaves unsaid.
        # Readings made with a lookup are never cached, so filling these settings changes no one else's.
        mounted = mounted_file(view.spec, main.container, config_file, lookup)
        if mounted is not None and not reader.read_config_file(settings, mounted[0], mounted[1]):
            warnings.append(f"{mounted[1]} is not a YAML mapping; the trainer's settings in it are not known")
    engine = _engine_of(ann, settings)
    # LWS_WORKER_INDEX and the like arrive by fieldRef, but the workload already tells their value.
    unknown = [n for n in _relevant_unknown_env(main) if n not in runtime]
    if unknown:
        warnings.append(f"container {main.container.get('name')}: env {', '.join(unknown)} comes from a "
                        "ConfigMap or Secret vramgate cannot read here; values it sets are not known")

    workload_found = _annotation(ann, d.A_WORKLOAD)
    workload_raw = workload_found.value.lower() if workload_found else (
        "training" if reader is not None and reader.trains else "inference")
    if workload_raw not in ("inference", "training"):
        raise DeclarationError(d.A_WORKLOAD, workload_raw, "use inference or training")
    workload: Workload = "training" if workload_raw == "training" else "inference"
    if workload == "training":
        engine = training_engine().name
    # vLLM on Gaudi, vLLM TPU, Neuron: vramgate has no engine plan there; an estimate says which model it used.
    generic = generic_model_note(vendor, engine) if vendor != NVIDIA else None
    tier = _tier(view, ann, config)
    placement_raw = ann.get(d.A_PLACEMENT)
    placement: PlacementMode | None = None
    if placement_raw is not None:
        if placement_raw not in ("binpack", "spread"):
            raise DeclarationError(d.A_PLACEMENT, placement_raw, "use binpack or spread")
        placement = "spread" if placement_raw == "spread" else "binpack"

    cuda = _cuda(ann, readings)
    util_found = _first(_annotation(ann, d.A_UTIL), settings.get("util"))
    util_declared = _parse(util_found, parse_fraction, "use a fraction in (0, 1] such as 0.9")
    if util_found:
        sources.append(("gpu-memory-utilization", util_found.source))

    group = max(1, int(getattr(view, "group_size", 1) or 1))
    nnodes = _int_setting(settings, "nnodes")
    if group == 1 and nnodes and nnodes > 1:
        # SGLang --nnodes, torchrun --nnodes, accelerate --num_machines: one instance spans that many pods.
        group = nnodes
        nn = settings.get("nnodes")
        sources.append(("group", f"{nn.source if nn else 'nnodes'}: the model spans {nnodes} pods"))
    spans = slice_pods(view, vendor, gpus) if group == 1 and vendor != NVIDIA else None
    if spans is not None:
        # A multi-host TPU slice: its hosts' pods run one program over all its chips.
        group = spans[0]
        sources.append(("group", f"slice topology {spans[1]}: {gpus * group} chips over {group} pods of {gpus}"))
    tp = _int_setting(settings, "tp")
    pp = _int_setting(settings, "pp") or 1
    model_gpus = gpus * group
    dp = _int_setting(settings, "dp")
    dp_unknown = dp is None and _set_at_run_time(settings, "dp")
    # Data parallel: the pod's GPUs hold several engine ranks, each priced on its own TP × PP GPUs (below).
    eng = engine_named(engine)
    distributed = eng is not None and eng.layout is not None and ((dp or 1) > 1 or dp_unknown)
    # Only where the engine's own command line is in view: an image run with no arguments may get its
    # parallelism from somewhere vramgate cannot see.
    saw_cmdline = any(f.source.startswith("arg ") for f in settings.values.values())
    one_gpu_default = (eng is not None and eng.one_gpu_unless is not None and tp is None
                       and settings.value("pp") is None
                       and settings.value("launcher") is None and saw_cmdline
                       and workload_found_is_inference(ann, settings))
    if one_gpu_default and model_gpus > 1:
        # vLLM and SGLang default to --tensor-parallel-size 1: the model sits on one GPU (the others idle
        # or hold data-parallel replicas).
        model_gpus = 1
    if tp is not None and not distributed:
        tp_found = settings.get("tp")
        assert tp_found is not None
        if tp * pp < model_gpus:
            warnings.append(f"{tp_found.source}={tp}" + (f" × pipeline {pp}" if pp > 1 else "")
                            + f" but the pod{'s of the group' if group > 1 else ''} request{'s' if group == 1 else ''} "
                            f"{model_gpus} GPU(s); VRAM is split over {tp * pp}")
            model_gpus = tp * pp
        elif tp * pp > model_gpus:
            # More GPUs than the pod has: it starts only where the rest come from other pods (a Ray cluster's
            # workers, vLLM/SGLang multi-node), and then each GPU holds 1/(TP × PP). Priced so — rejecting it on
            # the pod's own GPUs would refuse a deployment that works (the KubeRay and AIBrix TP-over-Ray samples).
            warnings.append(f"{tp_found.source}={tp}" + (f" × pipeline {pp}" if pp > 1 else "")
                            + f" = {tp * pp} GPUs, but the pod{'s of the group' if group > 1 else ''} "
                            f"request{'s' if group == 1 else ''} {model_gpus}: it starts only if the others come from "
                            f"more pods (a Ray cluster, multi-node); priced over {tp * pp}")
            model_gpus = tp * pp

    vram_found = _annotation(ann, d.A_VRAM)
    explicit = _parse(vram_found, parse_size_mib, "use a size such as 40Gi, 40960Mi or 42GB")
    if explicit is None and memory_mib is not None:
        explicit = memory_mib[0] * gpus
        vram_found = Found(str(explicit), f"resource {memory_mib[2]} ({memory_mib[0]} MiB per GPU)")

    unknown_model: str | None = None

    def done(**kw: Any) -> Demand:
        return Demand(
            view=view, gpus=gpus, gpu_containers=tuple(str(c.get("name", "")) for c in containers),
            workload=workload, tier=tier, engine=engine, cuda=cuda, placement=placement, warnings=tuple(warnings),
            sources=tuple(sources), group_size=group, claims=claimed.requests if claimed else (),
            unknown_model=unknown_model, mig=mig, vendor=vendor, unit=unit, extended=extended,
            gpu_resource=unit or resource_of(vendor, config.labels.gpu_resource), **kw,
        )

    if explicit is not None:
        sources.append(("vram", vram_found.source if vram_found else d.A_VRAM))
        return done(explicit_vram_mib=explicit, utilization=util_declared or 1.0)

    model_found = with_operator_field(
        view, _first(_annotation(ann, d.A_MODEL), settings.get("model"), _env_model(main)))
    if model_found is not None:
        # Said once, where it was found (the variable, its ConfigMap key, the script's command), before any hop.
        model_found = Found(model_found.value, described(main, model_found, lookup))
    params_found = _annotation(ann, d.A_PARAMS)
    params = _parse(params_found, parse_count, "use a parameter count such as 15B, 7.6b, 350M or 1.5e9")
    model = model_found.value if model_found else None
    ident = identify(catalog, model, engine) if model else None
    spec = ident.spec if ident else None
    stored = None
    if model and spec is None and is_location(model):
        stored = stored_model(catalog, view.spec, main.container, model, engine)
    elif model_found is None and params_found is None:
        stored = downloaded_model(catalog, view.spec, engine)
        if stored is not None:
            model = stored.identity.name
            model_found = Found(model, "the model an init container downloads")
    if stored is not None:
        ident, spec = stored.identity, stored.identity.spec
    if spec is None and model_found is not None and params_found is None and is_location(model_found.value):
        # A local checkpoint (a post-trained copy) whose pod labels name the model it was made from, as GKE's
        # published samples do: sized as that model, said in a warning. Only a label naming a catalog entry.
        # Else the name it is served under, where that is a hub id the catalog knows (NIM_SERVED_MODEL_NAME,
        # --served-model-name beside a path): a bare alias ("chat") names nothing and is never taken.
        named, where = _label(view.meta, GKE_MODEL_LABEL), f"pod label {GKE_MODEL_LABEL}"
        if named is None and (served := _served_name(main)) is not None:
            named, where = served
        hinted = identify(catalog, named, engine) if named else None
        if hinted is not None and hinted.spec is not None:
            ident, spec = hinted, hinted.spec
            warnings.append(f"model {model_found.value} is a local checkpoint: sized as {spec.name}, the model its "
                            f"{where} names (set {d.A_MODEL} to say it outright)")
            model_found = Found(model_found.value, f"{model_found.source}, sized by {where}")
    if model_found:
        hop = f" → {stored.where}" if stored else ""
        sources.append(("model", f"{model_found.source}{hop}" + (f" → catalog {spec.name}" if spec else "")))
        if stored is not None and spec is not None:
            place = f"where {model} is stored" if model_found.source != "the model an init container downloads" \
                else "what an init container downloads"
            warnings.append(f"model read from {place}: {stored.where} → catalog {spec.name} "
                            f"(set {d.A_MODEL} to say it outright)")
    if params is None and spec is not None:
        params = spec.params
    if params_found:
        sources.append(("params", d.A_PARAMS))
    if params is None and model_found is not None:
        params = params_from_name(ident.name if ident else model_found.value)
        unknown_model = model_found.value
        if params is not None:
            warnings.append(f"model {model_found.value!r} is not in the catalog; assumed {params / 1e9:.3g}B "
                            f"parameters from its name (set {d.A_MODEL} to a catalog name or {d.A_PARAMS}); "
                            f"{make_known(model_found.value)}")
        elif model_found.source == d.A_MODEL and not (config.hub.enabled and repo_id(model_found.value)):
            # With the hub on, an unknown hub id is asked for (serve/hub.py) and judged once it is known.
            raise DeclarationError(
                d.A_MODEL, model_found.value,
                f"it is not in the catalog; set {d.A_PARAMS} (e.g. 15B) or {d.A_VRAM} (e.g. 40Gi); "
                f"{make_known(model_found.value)}",
            )
        else:
            warnings.append(f"model {model_found.value!r} ({model_found.source}) is not in the catalog; "
                            f"no VRAM check: set {d.A_MODEL} to a catalog model, or {d.A_PARAMS} or {d.A_VRAM}; "
                            f"{make_known(model_found.value)}")
    if params is None:
        runs = _runs(main.container) if main.settings is None else ""
        if model_found is None and runs:
            # Not "no model named": the model may well be in the flags of an engine whose grammar vramgate lacks
            # (ROCm's ATOM, python -m atom.entrypoints.openai_server --model=...); its flags are not guessed at.
            warnings.append(f"container {main.container.get('name')} runs `{runs}`, an engine vramgate does not "
                            f"model: its flags, the model among them, are not read; no VRAM check: set the "
                            f"{d.A_MODEL} annotation (or {d.A_VRAM})")
        elif model_found is None:
            warnings.append(f"no model named anywhere in the pod; no VRAM check: set the {d.A_MODEL} annotation "
                            f"(or {d.A_VRAM})")
        return done(model=model)

    precision = _precision(ann, settings, ident.quantization if ident else None, spec, workload, engine, sources)
    context, auto_context = _context(ann, settings, spec, workload, engine, sources, warnings)
    batch = _batch(ann, settings, main, engine, workload, sources)
    kv_dtype = _kv_dtype(ann, settings, engine, warnings)
    split: dict[str, int] = {}
    if eng is not None and eng.layout is not None and workload == "inference":
        layout = eng.layout(settings, ParallelRead(tp, pp, dp, dp_unknown, gpus, group, spec.is_moe if spec else None),
                            _int_setting)
        if layout.distributed:
            model_gpus = layout.rank_gpus
            one_gpu_default = False  # the pod's GPUs are the data-parallel ranks
            split = {"expert_split": layout.expert_split, "attention_split": layout.attention_split,
                     "kv_split": layout.dcp}
            if eng.layout_extras is not None:
                extra, why = eng.layout_extras(settings, layout)
                split.update(extra)
                sources.extend(why)
            warnings.extend(f"{view.ref}: {w}" for w in layout.warnings)
            sources.extend(layout.sources)
    req = EstimateRequest(
        params=params, precision=precision, spec=spec, context=context, batch=batch, gpus=model_gpus,
        # No plan of this engine on this vendor (vLLM TPU, vLLM on Gaudi or Neuron): the generic arithmetic, as said.
        workload=workload, kv_cache_dtype=kv_dtype,
        engine=engine if engine != "unknown" and generic is None else None,
        engine_version=_version(ann, settings), pipeline=pp,
    )
    if split:
        req = req.but(**split)
    req = _engine_specifics(req, ann, settings, workload, warnings)
    if one_gpu_default and gpus * group > 1:
        flag = eng.one_gpu_unless if eng is not None else None
        warnings.append(f"{engine} puts the model on one GPU unless told otherwise: priced on one GPU; add "
                        f"{flag} {gpus * group} to split it over all {gpus * group} GPUs")
    est = estimate(req)
    if generic is not None:
        warnings.append(generic)
        said = f"no {engine} plan on {vendor}" if engine and engine != "unknown" else vendor
        sources.insert(0, ("memory model", f"generic ({said})"))
        # The generic overheads are a guess for an engine not modelled here: only the weights and KV cache, which
        # it must hold whatever its runtime, are grounds to reject on (the band's low end).
        floor = math.ceil((est.weights_mib + est.kv_cache_mib) / max(req.gpus, 1))
        est = replace(est, low_per_gpu_mib=min(est.low_per_gpu_mib, floor))
    util = util_declared or default_util(engine, config, workload, tp or model_gpus, req.engine_version)
    rule = None
    if eng is not None and eng.utilization_rule is not None and not util_declared and workload != "training":
        # SGLang sets its share by the GPU's memory: judged per node (the TP table is the unknown-GPU figure).
        rule = eng.utilization_rule(req.engine_version, tp or model_gpus, pp, dp or 1, settings)
    return done(model=model, spec=spec, estimate=est, utilization=util, util_rule=rule, auto_context=auto_context)


def workload_found_is_inference(ann: dict[str, str], settings: Settings) -> bool:
    declared = (ann.get(d.A_WORKLOAD) or "").strip().lower()
    reader = engine_named(settings.engine)
    return declared != "training" and not (reader is not None and reader.trains)


def _engine_of(ann: dict[str, str], settings: Settings) -> str:
    declared = ann.get(d.A_ENGINE)
    if declared:
        found = engine_named(declared.strip().lower())
        if found is None:
            raise DeclarationError(d.A_ENGINE, declared, "use one of " + ", ".join(ENGINES))
        return found.name
    return settings.engine


def _version(ann: dict[str, str], settings: Settings) -> tuple[int, ...] | None:
    declared = ann.get(d.A_ENGINE_VERSION)
    if declared:
        version = parse_version(declared)
        if version is None:
            raise DeclarationError(d.A_ENGINE_VERSION, declared, "use a version such as 0.8.5")
        return version
    return settings.version


def _relevant_unknown_env(main: ContainerReading) -> list[str]:
    """Unreadable env (Secrets, ConfigMaps not in view) that could change the estimate.

    A variable the command line refers to, a model variable, or an env twin of the engine's settings;
    a whole ``envFrom`` source counts only when the engine reads its settings from env. An HF token
    from a Secret is none of these and is not worth a warning on every apply.
    """
    if not main.unknown_env:
        return []
    text = " ".join(" ".join(c.words) for c in main.commands) + " " + main.command_text
    twins = engine_env_names(main.engine) | set(d.MODEL_ENVS)
    out = []
    for name in main.unknown_env:
        if name.startswith("envFrom "):
            if twins - set(d.MODEL_ENVS) or "$" in text:
                out.append(name)
        elif name in twins or f"$({name})" in text or f"${name}" in text or f"${{{name}" in text:
            out.append(name)
    return out


def _env_model(main: ContainerReading) -> Found | None:
    for name in d.MODEL_ENVS:
        value = main.env.get(name)
        if value:
            return Found(value, f"env {name}")
    return None


def _cuda(ann: dict[str, str], readings: list[ContainerReading]) -> CudaVersion | None:
    found = _annotation(ann, d.A_CUDA)
    if found is not None:
        cuda = parse_cuda(found.value)
        if cuda is None:
            raise DeclarationError(d.A_CUDA, found.value, "use a CUDA version such as 12.2")
        return cuda
    for r in readings:
        cuda = cuda_from_image(str(r.container.get("image") or ""))
        if cuda is None:
            env_cuda = r.env.get("CUDA_VERSION")
            cuda = parse_cuda(env_cuda) if env_cuda else None
        if cuda is not None:
            return cuda
    return None


def _precision(ann: dict[str, str], s: Settings, in_id: str | None, spec: ModelSpec | None, workload: Workload,
               engine: str, sources: list[tuple[str, str]]) -> str:
    dtype = s.get("dtype")
    if dtype is not None and dtype.value.strip().lower() == "auto":
        dtype = None
    quant = s.get("quantization")
    if quant is not None and canonical(quant.value) is None and quant.source != d.A_PRECISION:
        # An engine quantization vramgate does not know (e.g. a new kernel name): the id or dtype decides.
        quant = None
    eng = engine_named(engine)
    if workload == "training" and eng is not None and eng.training_quantization is not None:
        quant = eng.training_quantization(s) or quant
    declared = _annotation(ann, d.A_PRECISION)
    if declared is not None:
        precision = canonical(declared.value)
        if precision is None:
            raise DeclarationError(declared.source, declared.value, "use one of " + PRECISIONS_ACCEPTED)
        sources.append(("precision", declared.source))
        return precision
    precision, source = resolve_precision(
        ((f.value, f.source) for f in (quant, Found(in_id, "model id") if in_id else None, dtype) if f is not None),
        spec, workload, engine)
    sources.append(("precision", source))
    return precision


def _context(ann: dict[str, str], s: Settings, spec: ModelSpec | None, workload: Workload, engine: str,
             sources: list[tuple[str, str]], warnings: list[str]) -> tuple[int, bool]:
    """Tokens per sequence, and whether the engine picks its context itself (``--max-model-len auto``)."""
    found = _first(_annotation(ann, d.A_CONTEXT), s.get("context"))
    eng = engine_named(engine)
    zero_is_model = eng is not None and eng.zero_context_is_model
    zero_declared = False  # a declared 0 that means the model's own context (llama.cpp -c 0)
    if found is not None and found.source != d.A_CONTEXT and _unresolved(found.value):
        # `--max-model-len $(MAX_LEN)` from a ConfigMap not in view: known only at run time. Priced at the
        # engine's default rather than refused (refusing would reject a deployment that may well work).
        warnings.append(f"{found.source}={found.value} is set at run time; priced at the engine's default context")
        found = None
    if found is not None and found.source != d.A_CONTEXT and eng is not None and eng.read_context is not None:
        # The engine's own flag, read by the engine's own grammar (engines/grammar.py).
        try:
            read = eng.read_context(found.value, s.version)
        except GrammarError as exc:
            raise DeclarationError(found.source, found.value, exc.rule) from None
        if read.note:
            warnings.append(f"{found.source}={found.value}: {read.note}")
        if read.auto:
            sources.append(("context", f"{found.source} {found.value}: {engine} picks the largest context that "
                                       f"fits; priced at its least ({read.tokens} tokens)"))
            return read.tokens, True
        if read.tokens > 0 and not read.default:
            sources.append(("context", found.source))
            return read.tokens, False
        if not read.default and not zero_is_model:
            raise DeclarationError(found.source, found.value, "use a whole number of tokens such as 8192")
        zero_declared = not read.default
    else:
        context = _parse(found, parse_positive_int, "use a whole number of tokens such as 8192")
        if context is not None and found is not None:
            if found.source != d.A_CONTEXT and zero_is_model and context == 0:
                zero_declared = True  # llama.cpp: -c 0 means the model's own context
            else:
                sources.append(("context", found.source))
                return int(context), False
        if found is not None and context == 0 and not zero_is_model:
            raise DeclarationError(found.source, found.value, "use a whole number of tokens such as 8192")
    model_ctx = spec.context if spec else UNKNOWN_MODEL_CONTEXT
    if workload == "training":
        sources.append(("context", f"training default {TRAINING_CONTEXT}"))
        return min(model_ctx, TRAINING_CONTEXT), False
    if eng is not None and eng.default_context is not None:
        default = eng.default_context(s, model_ctx, zero_declared)
        sources.append(("context", default.source))
        return default.tokens, False
    sources.append(("context", "the model's full context (engine default max_model_len)" if spec
                    else f"unknown model: {UNKNOWN_MODEL_CONTEXT}"))
    return model_ctx, False


def _batch(ann: dict[str, str], s: Settings, main: ContainerReading, engine: str, workload: Workload,
           sources: list[tuple[str, str]]) -> int:
    found = _annotation(ann, d.A_BATCH)
    if found is None and workload == "training":
        found = s.get("micro_batch")
    if found is None and engine == "unknown":
        value = main.env.get("MAX_BATCH_SIZE")
        found = Found(value, "env MAX_BATCH_SIZE") if value else None
    batch = _parse(found, parse_positive_int, "use a whole number of sequences such as 16")
    if found is not None:
        sources.append(("batch", found.source))
    return int(batch or 1)


def _kv_dtype(ann: dict[str, str], s: Settings, engine: str, warnings: list[str]) -> str | None:
    declared = _annotation(ann, d.A_KV_DTYPE)
    if declared is not None:
        if not is_kv_dtype(declared.value):
            raise DeclarationError(declared.source, declared.value, "use auto, fp16, bf16 or fp8")
        return declared.value if declared.value.lower() != "auto" else None
    found = s.get("kv_dtype")
    if found is None or found.value.lower() == "auto":
        return None
    if not is_kv_dtype(found.value):
        warnings.append(f"{found.source}={found.value}: KV-cache dtype not modelled; priced as 16-bit")
        return None
    return found.value


def _engine_specifics(req: EstimateRequest, ann: dict[str, str], s: Settings, workload: Workload,
                      warnings: list[str]) -> EstimateRequest:
    """Fill the request with what the engine's settings say about its memory behaviour."""
    if workload == "training":
        trainer = training_engine()
        ft_found = _annotation(ann, d.A_FINETUNE)
        finetune = ft_found.value.lower() if ft_found else (trainer.finetune_of(s) if trainer.finetune_of else None)
        if finetune is not None and finetune not in ("full", "lora", "qlora"):
            raise DeclarationError(d.A_FINETUNE, finetune, "use full, lora or qlora")
        if finetune == "qlora" and req.precision in ("bf16", "fp16", "fp32"):
            req = req.but(precision="nf4")
        if finetune is None:
            finetune = "qlora" if PRECISIONS[req.precision].quantized else "full"
        par_found = _annotation(ann, d.A_PARALLELISM)
        par = par_found.value.lower() if par_found else (
            (trainer.parallelism_of(s) if trainer.parallelism_of else None) or "ddp")
        if par not in ("ddp", "fsdp", "zero1", "zero2", "zero3"):
            raise DeclarationError(d.A_PARALLELISM, par, "use ddp, fsdp, zero1, zero2 or zero3")
        ckpt = _bool(_first(_annotation(ann, d.A_GRAD_CKPT), s.get("gradient_checkpointing")), True)
        rank = _int_setting(s, "lora_r") or 16
        optim = (s.value("optim") or "").lower()
        return req.but(engine=trainer.name, finetune=finetune, parallelism=par, gradient_checkpointing=ckpt,
                       lora_rank=rank, optimizer_bits=8 if "8bit" in optim else 32)
    changes: dict[str, Any] = {}
    if (seqs := _int_setting(s, "max_seqs")) is not None:
        changes["max_num_seqs"] = seqs
    if (tokens := _batched_tokens(s)) is not None:
        changes["batched_tokens"] = tokens
    if s.flag("enforce_eager"):
        changes["enforce_eager"] = True
    if (offload := s.number("cpu_offload_gb")) is not None and offload > 0:
        changes["cpu_offload_gib"] = offload
    if s.get("kv_cache_bytes") is not None:
        try:
            changes["kv_cache_bytes"] = int(parse_size_mib(s.value("kv_cache_bytes") or "") * 1024 * 1024)
        except QuantityError:
            warnings.append(f"{s.get('kv_cache_bytes').source}: not a size; ignored")  # type: ignore[union-attr]
    if (items := _mm_items(s.get("mm_limit"))) is not None:
        changes["mm_items"] = items
    if s.value("use_v1") in ("0", "false", "False"):
        changes["legacy_engine"] = True
    if (layers := s.number("gpu_layers")) is not None:
        changes["gpu_layers"] = int(layers)
    eng = engine_named(req.engine)
    if eng is not None and eng.request_changes is not None:
        changes.update(eng.request_changes(req, s, d.A_CONTEXT in ann, _int_setting))
    return req.but(**changes) if changes else req


def default_util(engine: str, config: Config, workload: Workload, tp: int, version: Version | None = None) -> float:
    """The share of each GPU the engine lets itself use when nothing says: the engine version's own default.

    ``config.gpu_memory_utilization``, when set, replaces the vLLM/NIM default for every version.
    """
    if workload == "training":
        return 1.0
    eng = engine_named(engine)
    if eng is not None and eng.config_utilization and config.gpu_memory_utilization is not None:
        return config.gpu_memory_utilization
    if eng is not None and eng.default_utilization is not None:
        return eng.default_utilization(version, tp)
    return config.gpu_memory_utilization or 0.9
