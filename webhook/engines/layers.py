"""Per-layer KV-cache geometry: full, sliding-window, chunked-local and state-only layers of a model."""

from __future__ import annotations

from dataclasses import dataclass

from ..models.catalog import ModelSpec


@dataclass(frozen=True)
class KVLayout:
    """How many layers keep KV for the whole context, for a window, for a chunk, or none at all."""

    bytes_per_token_layer: float  # one token, one layer, at the KV dtype (K and V, or the MLA latent)
    full_layers: int
    window: int | None = None
    window_layers: int = 0
    chunk: int | None = None
    chunk_layers: int = 0

    @property
    def layers(self) -> int:
        return self.full_layers + self.window_layers + self.chunk_layers

    def bytes_for(self, tokens: int, compact: bool = True) -> float:
        """KV bytes one sequence of ``tokens`` keeps; ``compact`` stores windowed layers at window size."""
        if not compact:
            return self.bytes_per_token_layer * self.layers * tokens
        full = self.full_layers * tokens
        win = self.window_layers * (min(tokens, self.window) if self.window else tokens)
        chk = self.chunk_layers * (min(tokens, self.chunk) if self.chunk else tokens)
        return self.bytes_per_token_layer * (full + win + chk)

    def bytes_per_token(self) -> float:
        """KV bytes per token over every KV layer (the figure vLLM's block size is made of)."""
        return self.bytes_per_token_layer * self.layers


def layout_of(spec: ModelSpec | None, kv_elements_per_token: int, layers: int, value_bytes: float) -> KVLayout:
    """The KV layout of a catalog model (windows and chunks from its config) or a uniform one."""
    if spec is None:
        return KVLayout(kv_elements_per_token / max(layers, 1) * value_bytes, layers)
    kv_layers = spec.cache_layers
    if kv_layers <= 0:
        return KVLayout(0.0, 0)  # encoders (embedding and reranker models) keep no KV cache
    per_layer = spec.kv_elements_per_token() / kv_layers * value_bytes
    window = spec.sliding_window
    window_layers = min(spec.sliding_window_layers or 0, kv_layers) if window else 0
    chunk = spec.attention_chunk_size
    chunk_layers = min(spec.chunked_layers or 0, kv_layers - window_layers) if chunk else 0
    return KVLayout(
        bytes_per_token_layer=per_layer,
        full_layers=kv_layers - window_layers - chunk_layers,
        window=int(window) if window else None,
        window_layers=window_layers,
        chunk=int(chunk) if chunk else None,
        chunk_layers=chunk_layers,
    )
