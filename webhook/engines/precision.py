"""Which weight precision a workload runs: one resolver for admission, estimate, fit and check."""

from __future__ import annotations

from collections.abc import Iterable

from ..models.catalog import ModelSpec
from ..models.vram import Workload
from ..units.precision import canonical
from . import ollama

# A candidate is a value as written and where it was written ("arg --quantization", "model id").
Candidate = tuple[str | None, str]


def resolve_precision(candidates: Iterable[Candidate], spec: ModelSpec | None, workload: Workload,
                      engine: str | None) -> tuple[str, str]:
    """The first candidate vramgate can price, else the engine's or checkpoint's own default; with its source.

    Candidates come in the order the engine obeys them (quantization flag, the model id's quantization,
    ``--dtype``). A value vramgate cannot price is passed over, never an error: the engine accepted it.
    """
    for value, source in candidates:
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
