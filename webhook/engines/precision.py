"""Which weight precision a workload runs: one resolver for admission, estimate, fit and check."""

from __future__ import annotations

from collections.abc import Iterable

from ..models.catalog import ModelSpec
from ..models.vram import Workload
from ..units.precision import canonical
from . import ollama

# A candidate is a value as written and where it was written ("arg --quantization", "model id").
Candidate = tuple[str | None, str]

# Checkpoint formats that hold several widths (compressed-tensors: w4a16, w8a8, fp8): they say less than a
# model id's "-w4a16" or "-FP8", so they are read only when nothing else names a width.
# ``--quantization modelopt`` is one too: vLLM serves what the checkpoint's quant_algo says, whatever the flag
# (vllm==0.33.0 model_executor/layers/quantization/modelopt.py ``override_quantization_method``: FP8 ->
# modelopt, NVFP4/FP4 -> modelopt_fp4, MIXED_PRECISION -> modelopt_mixed).
FORMATS = frozenset({"compressed-tensors", "compressed_tensors", "modelopt", "auto_round", "auto-round", "autoround"})
MODELOPT = "modelopt"


def resolve_precision(candidates: Iterable[Candidate], spec: ModelSpec | None, workload: Workload,
                      engine: str | None) -> tuple[str, str]:
    """The first candidate vramgate can price, else the engine's or checkpoint's own default; with its source.

    Candidates come in the order the engine obeys them (quantization flag, the model id's quantization,
    ``--dtype``). A value vramgate cannot price is passed over, never an error: the engine accepted it.
    """
    listed = list(candidates)
    ordered = [c for c in listed if not _is_format(c[0])] + [c for c in listed if _is_format(c[0])]
    for value, source in ordered:
        if value and value.strip().lower() == MODELOPT:
            if (algo := checkpoint_modelopt(spec)) is not None and spec is not None:
                return algo, f"{source} (the checkpoint's quant_algo {spec.quant_algo or spec.dtype})"
            # vLLM's own `modelopt` method is ModelOpt FP8; an NVFP4 checkpoint would need about half.
            return "fp8", f"{source} (modelopt: FP8 assumed, the checkpoint's quant_algo is not known)"
        if value and (precision := canonical(value)) is not None:
            return precision, source
    if engine == ollama.NAME:
        return "q4_k_m", "Ollama library tag default (q4_k_m)"
    if spec is not None and spec.dtype == "fp32" and workload == "inference":
        # Engines serve fp32 checkpoints in fp16 (vLLM's --dtype auto); training keeps the checkpoint's dtype.
        return "fp16", "fp32 checkpoint served in fp16 (--dtype auto)"
    if spec is not None:
        return spec.dtype, "catalog native dtype"
    return "bf16", "default bf16"


def _is_format(value: str | None) -> bool:
    return value is not None and value.strip().lower() in FORMATS


def modelopt_precision(quant_algo: str | None) -> str | None:
    """The weight precision a ModelOpt ``quant_algo`` stores (vLLM's modelopt.py config classes).

    FP8 (and FP8_PER_CHANNEL_PER_TOKEN, FP8_PB_WO): fp8. NVFP4 / W4A16_NVFP4 / any FP4: nvfp4. MIXED_PRECISION
    (NVIDIA's MoE checkpoints: NVFP4 routed experts, FP8 attention): nvfp4, the experts being nearly all the bytes.
    MXFP8: fp8. Anything else: None (not priced from the algo).
    """
    algo = (quant_algo or "").strip().upper()
    if "FP4" in algo or algo == "MIXED_PRECISION":
        return "nvfp4"
    if algo.startswith("FP8") or algo == "MXFP8":
        return "fp8"
    return None


def checkpoint_modelopt(spec: ModelSpec | None) -> str | None:
    """What ``--quantization modelopt`` serves for this catalog entry: its quant_algo, or its native ModelOpt dtype."""
    if spec is None:
        return None
    if (algo := modelopt_precision(spec.quant_algo)) is not None:
        return algo
    return spec.dtype if spec.quant_algo is None and spec.dtype == "nvfp4" else None
