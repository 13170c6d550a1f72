"""What a workload needs from GPUs: count per pod, VRAM per GPU, CUDA, tier — from its declaration."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from . import declaration as d
from .catalog import Catalog, ModelSpec, params_from_name
from .config import Config, PlacementMode
from .cuda import CudaVersion, cuda_from_image, parse_cuda
from .precision import ACCEPTED as PRECISIONS_ACCEPTED
from .precision import canonical, is_kv_dtype
from .quantity import QuantityError, parse_count, parse_fraction, parse_positive_int, parse_size_mib
from .vram import Estimate, EstimateRequest, Workload, estimate
from .workload import PodView, WorkloadError

# When nothing declares a context and the model is unknown: llama.cpp's and TGI's historical default.
UNKNOWN_MODEL_CONTEXT = 4096


class DeclarationError(ValueError):
    """A malformed declaration: names the annotation (or env/arg), the value and what is accepted."""

    def __init__(self, where: str, value: str, accepted: str) -> None:
        self.where, self.value, self.accepted = where, value, accepted
        super().__init__(f"{where}: {value!r} is not valid; {accepted}")


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
    cuda: CudaVersion | None = None
    placement: PlacementMode | None = None
    warnings: tuple[str, ...] = field(default=())

    @property
    def per_gpu_mib(self) -> int | None:
        """VRAM each GPU must hold, or None when nothing declares enough to tell."""
        if self.explicit_vram_mib is not None:
            return math.ceil(self.explicit_vram_mib / self.gpus)
        return self.estimate.per_gpu_mib if self.estimate else None

    @property
    def total_mib(self) -> int | None:
        if self.explicit_vram_mib is not None:
            return self.explicit_vram_mib
        return self.estimate.total_mib if self.estimate else None

    @property
    def weights_mib(self) -> float | None:
        return self.estimate.weights_mib if self.estimate else None

    def summary(self) -> str:
        """One human line for the ``vramgate.io/estimate`` annotation and messages."""
        if self.explicit_vram_mib is not None:
            return f"{self.per_gpu_mib / 1024:.1f} GiB per GPU (declared {d.A_VRAM})"  # type: ignore[operator]
        if self.estimate is not None:
            return self.estimate.summary()
        return "no VRAM estimate (declare vramgate.io/model or vramgate.io/vram)"


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
                raise DeclarationError(f"{where} {key}[{resource}]", str(raw), "use a whole number") from None
            if count < 0:
                raise DeclarationError(f"{where} {key}[{resource}]", str(raw), "use a whole number")
            return count
    return 0


def gpu_containers(view: PodView, resource: str) -> tuple[int, list[dict[str, Any]]]:
    """GPUs per pod (max of the app containers' sum and any init container) and the GPU containers."""
    app = init = 0
    found: list[dict[str, Any]] = []
    for key in ("containers", "initContainers"):
        for c in view.spec.get(key) or []:
            if not isinstance(c, dict):
                continue
            n = _gpu_count(c, resource, f"container {c.get('name', '?')}")
            if n:
                found.append(c)
                if key == "containers":
                    app += n
                else:
                    init = max(init, n)
    return max(app, init), found


def _first(annotations: dict[str, str], key: str, *fallbacks: d.Found | None) -> d.Found | None:
    value = annotations.get(key)
    if isinstance(value, str) and value.strip():
        return d.Found(value.strip(), key)
    for fb in fallbacks:
        if fb is not None:
            return fb
    return None


def _parse(found: d.Found | None, parser: Any, accepted: str) -> Any:
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


def read_demand(view: PodView, config: Config, catalog: Catalog) -> Demand | None:
    """The demand of a workload, or None when it asks for no GPU. Raises DeclarationError."""
    try:
        gpus, containers = gpu_containers(view, config.labels.gpu_resource)
    except WorkloadError as exc:
        raise DeclarationError("spec", "", str(exc)) from None
    if gpus == 0:
        return None
    ann = view.annotations
    warnings: list[str] = []
    # The first GPU container that declares something speaks for the pod.
    decls = [d.Declared(c) for c in containers]
    main = next((x for x in decls if x.env_var(d.MODEL_ENVS) or x.model()), decls[0])
    engine = main.engine()

    workload_raw = ann.get(d.A_WORKLOAD, "inference").strip().lower()
    if workload_raw not in ("inference", "training"):
        raise DeclarationError(d.A_WORKLOAD, workload_raw, "use inference or training")
    workload: Workload = "training" if workload_raw == "training" else "inference"
    tier = _tier(view, ann, config)
    placement_raw = ann.get(d.A_PLACEMENT)
    placement: PlacementMode | None = None
    if placement_raw is not None:
        if placement_raw not in ("binpack", "spread"):
            raise DeclarationError(d.A_PLACEMENT, placement_raw, "use binpack or spread")
        placement = "spread" if placement_raw == "spread" else "binpack"

    cuda_found = _first(ann, d.A_CUDA)
    cuda: CudaVersion | None = None
    if cuda_found is not None:
        cuda = parse_cuda(cuda_found.value)
        if cuda is None:
            raise DeclarationError(d.A_CUDA, cuda_found.value, "use a CUDA version such as 12.2")
    else:
        for x in decls:
            cuda = cuda_from_image(str(x.container.get("image") or ""))
            if cuda is None:
                env_cuda = x.env.get("CUDA_VERSION")
                cuda = parse_cuda(env_cuda) if env_cuda else None
            if cuda is not None:
                break

    util_found = _first(ann, d.A_UTIL, main.flag(d.UTIL_FLAGS))
    util_declared = _parse(util_found, parse_fraction, "use a fraction in (0, 1] such as 0.9")

    tp = main.flag(d.TP_FLAGS)
    if tp is not None:
        try:
            tp_n = int(tp.value)
        except ValueError:
            tp_n = -1
        if tp_n != gpus:
            warnings.append(f"{tp.source}={tp.value} but the pod requests {gpus} GPU(s); VRAM is split over {gpus}")

    vram_found = _first(ann, d.A_VRAM)
    explicit = _parse(vram_found, parse_size_mib, "use a size such as 40Gi, 40960Mi or 42GB")
    def done(**kw: Any) -> Demand:
        return Demand(
            view=view, gpus=gpus, gpu_containers=tuple(str(c.get("name", "")) for c in containers),
            workload=workload, tier=tier, engine=engine, cuda=cuda, placement=placement, warnings=tuple(warnings),
            **kw,
        )

    if explicit is not None:
        return done(explicit_vram_mib=explicit, utilization=util_declared or 1.0)

    model_found = _first(ann, d.A_MODEL, main.env_var(d.MODEL_ENVS), main.model())
    params_found = _first(ann, d.A_PARAMS)
    params = _parse(params_found, parse_count, "use a parameter count such as 15B, 7.6b, 350M or 1.5e9")
    spec = catalog.lookup(model_found.value) if model_found else None
    model = model_found.value if model_found else None
    if params is None and spec is not None:
        params = spec.params
    if params is None and model_found is not None:
        params = params_from_name(model_found.value)
        if params is not None:
            warnings.append(f"model {model_found.value!r} is not in the catalog; assumed {params / 1e9:.3g}B "
                            "parameters from its name")
        elif model_found.source == d.A_MODEL:
            raise DeclarationError(
                d.A_MODEL, model_found.value,
                f"it is not in the catalog; set {d.A_PARAMS} (e.g. 15B) or {d.A_VRAM} (e.g. 40Gi), "
                "or add the model to the config's models list",
            )
        else:
            warnings.append(f"model {model_found.value!r} ({model_found.source}) is not in the catalog; "
                            f"set {d.A_PARAMS} or {d.A_VRAM} for a VRAM check")
    if params is None:
        return done(model=model)

    quant = main.flag(d.QUANT_FLAGS)
    dtype = main.env_var(("DTYPE",)) or main.flag(d.DTYPE_FLAGS)
    if dtype is not None and dtype.value.strip().lower() == "auto":
        dtype = None
    in_id = d.quant_in_model_id(model) if model else None
    precision_found = _first(
        ann, d.A_PRECISION, quant, d.Found(in_id, "model id") if in_id else None, dtype,
    )
    if precision_found is not None:
        precision = canonical(precision_found.value)
        if precision is None:
            raise DeclarationError(precision_found.source, precision_found.value, "use one of " + PRECISIONS_ACCEPTED)
    elif spec is not None and spec.dtype == "fp32" and workload == "inference":
        # Engines serve fp32 checkpoints in fp16 (vLLM's --dtype auto); training keeps the checkpoint's dtype.
        precision = "fp16"
    else:
        precision = spec.dtype if spec else "bf16"

    context_found = _first(ann, d.A_CONTEXT, main.flag(d.CONTEXT_FLAGS))
    context = _parse(context_found, parse_positive_int, "use a whole number of tokens such as 8192")
    if context is None:
        context = spec.context if spec else UNKNOWN_MODEL_CONTEXT
        if workload == "training":
            context = min(context, 2048)
    batch_found = _first(ann, d.A_BATCH, main.env_var(("MAX_BATCH_SIZE",)), main.flag(d.BATCH_FLAGS))
    batch = _parse(batch_found, parse_positive_int, "use a whole number of sequences such as 16") or 1

    kv_found = _first(ann, d.A_KV_DTYPE, main.flag(d.KV_DTYPE_FLAGS))
    if kv_found is not None and not is_kv_dtype(kv_found.value):
        raise DeclarationError(kv_found.source, kv_found.value, "use auto, fp16, bf16 or fp8")
    kv_dtype = kv_found.value if kv_found and kv_found.value.lower() != "auto" else None

    est = estimate(EstimateRequest(
        params=params, precision=precision, spec=spec, context=context, batch=batch, gpus=gpus,
        workload=workload, kv_cache_dtype=kv_dtype,
    ))
    util = util_declared or (config.gpu_memory_utilization if workload == "inference" else 1.0)
    return done(model=model, spec=spec, estimate=est, utilization=util)

