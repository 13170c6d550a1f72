"""The memory arithmetic serving engines share: weights, KV for the sequences held, a prefill's activations."""

from __future__ import annotations

from dataclasses import dataclass

from ..models.catalog import ModelSpec
from ..models.vram import MIB, Estimate, EstimateRequest, priced, shape_of, weights_bytes, weights_per_gpu
from ..units.precision import kv_bytes
from .layers import layout_of


@dataclass(frozen=True)
class Costs:
    """Engine-specific constants of the shared arithmetic."""

    engine: str
    activation_bytes_per_token_hidden: float = 40.0
    fixed_mib: float = 512.0  # CUDA context, workspaces, allocator slack per GPU
    compact_windows: bool = False  # sliding-window layers keep only the window
    low_factor: float = 1.0  # share of the activations and fixed cost the low end keeps
    high_extra_mib: float = 1024.0
    gpu_share: float = 1.0  # share of weights and KV on the GPU (llama.cpp -ngl, Ollama's split)
    low_gpu_share: float | None = None  # the share the low end assumes (an engine that spills: 0)
    low_kv_share: float = 1.0  # an engine that shortens sequences to its pool needs little KV to start
    compute_bytes: float = 0.0  # a compute buffer reserved per GPU whatever the prefill (llama.cpp's graph)
    low_compute_bytes: float | None = None  # the buffer the low end assumes (None: ``compute_bytes``)


def plan(req: EstimateRequest, spec: ModelSpec | None, costs: Costs, tokens: int, notes: list[str]) -> Estimate:
    """Need per GPU: weights + KV of ``req.context`` × ``req.slots`` × ``req.batch`` + a prefill of ``tokens``."""
    g = max(req.gpus, 1)
    shape = shape_of(spec, req.params)
    weights = weights_bytes(req.params, req.precision, shape, spec) * costs.gpu_share
    # Weights kept in host memory: what the engine's flags move off the GPUs (llama.cpp -ot/--cpu-moe, for the
    # whole instance) and ``--cpu-offload-gb`` (SGLang: per GPU, each rank's own offloader budget).
    moved = min(weights, req.host_weights_mib * MIB)
    weights -= moved
    per_gpu_offload = min(weights / g, req.cpu_offload_gib * 1024**3)
    weights -= per_gpu_offload * g
    host = moved + per_gpu_offload * g
    layout = layout_of(spec, shape.kv_elements_per_token, shape.layers, kv_bytes(req.precision, req.kv_cache_dtype))
    kv = layout.bytes_for(req.context, compact=costs.compact_windows) * req.slots * req.batch * costs.gpu_share
    kv_shards = 1 if shape.mla else max(1, min(g, shape.kv_heads))
    kv_per_gpu = kv / kv_shards / max(req.kv_split, 1)
    if spec is not None and spec.hybrid:
        # Each sequence held also keeps one recurrent state per state layer, split over TP like its heads.
        kv_per_gpu += spec.state_bytes_per_sequence(g) * req.slots * req.batch * costs.gpu_share
    act = costs.activation_bytes_per_token_hidden * tokens * shape.hidden_size / g + costs.compute_bytes
    fixed = costs.fixed_mib * MIB
    w_gpu = weights_per_gpu(req, weights, spec)
    mid = w_gpu + kv_per_gpu + act + fixed
    low_share = costs.gpu_share if costs.low_gpu_share is None else costs.low_gpu_share
    share_ratio = low_share / costs.gpu_share if costs.gpu_share else 0.0
    low_compute = costs.compute_bytes if costs.low_compute_bytes is None else costs.low_compute_bytes
    low = share_ratio * (w_gpu + kv_per_gpu * costs.low_kv_share) \
        + costs.low_factor * (act - costs.compute_bytes + low_compute + fixed)
    high = mid + act + costs.high_extra_mib * MIB
    if not shape.known:
        low *= 0.85
        high *= 1.25
    return priced(req, weights=w_gpu, kv=kv_per_gpu, overhead=fixed, activations=act, mid=mid, low=low,
                  high=high, kv_bytes_per_token=layout.bytes_per_token(), shape_known=shape.known,
                  engine=costs.engine, notes=notes, host_weights=host)
