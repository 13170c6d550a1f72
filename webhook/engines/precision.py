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
FORMATS = frozenset({"compressed-tensors", "compressed_tensors"})


def resolve_precision(candidates: Iterable[Candidate], spec: ModelSpec | None, workload: Workload,
                      engine: str | None) -> tuple[str, str]:
    """The first candidate vramgate can price, else the engine's or checkpoint's own default; with its source.

    Candidates come in the order the engine obeys them (quantization flag, the model id's quantization,
    ``--dtype``). A value vramgate cannot price is passed over, never an error: the engine accepted it.
    """
    listed = list(candidates)
    ordered = [c for c in listed if not _is_format(c[0])] + [c for c in listed if _is_format(c[0])]
    for value, source in ordered:
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
