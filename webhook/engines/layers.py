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
    # One token in one sliding-window layer where it differs from a full layer (Gemma 4: 256-wide local heads,
    # 512-wide global ones); None: the same.
    window_bytes_per_token_layer: float | None = None

    @property
    def layers(self) -> int:
        return self.full_layers + self.window_layers + self.chunk_layers

    @property
    def window_bytes(self) -> float:
        """One token in one sliding-window layer."""
        if self.window_bytes_per_token_layer is None:
            return self.bytes_per_token_layer
        return self.window_bytes_per_token_layer

    def bytes_for(self, tokens: int, compact: bool = True) -> float:
        """KV bytes one sequence of ``tokens`` keeps; ``compact`` stores windowed layers at window size."""
        win_tokens = min(tokens, self.window) if compact and self.window else tokens
        chk_tokens = min(tokens, self.chunk) if compact and self.chunk else tokens
        rest = self.full_layers * tokens + self.chunk_layers * chk_tokens
        return self.bytes_per_token_layer * rest + self.window_bytes * self.window_layers * win_tokens

    def bytes_per_token(self) -> float:
        """KV bytes per token over every KV layer (the figure vLLM's block size is made of)."""
        return (self.bytes_per_token_layer * (self.full_layers + self.chunk_layers)
                + self.window_bytes * self.window_layers)


def layout_of(spec: ModelSpec | None, kv_elements_per_token: int, layers: int, value_bytes: float) -> KVLayout:
    """The KV layout of a catalog model (windows and chunks from its config) or a uniform one."""
    if spec is None:
        return KVLayout(kv_elements_per_token / max(layers, 1) * value_bytes, layers)
    kv_layers = spec.cache_layers
    if kv_layers <= 0:
        return KVLayout(0.0, 0)  # encoders (embedding and reranker models) keep no KV cache
    if spec.compressed_kv:
        # DeepSeek-V4: every layer's compressed caches, priced at their mean bytes a token (ModelSpec
        # compressed_entry_bytes); its window cache is the engine's to add (engines/vllm.py).
        return KVLayout(spec.kv_elements_per_token() / kv_layers * value_bytes, kv_layers)
    full, window_layers, chunk_layers = spec.cache_layer_split()
    window = spec.sliding_window
    chunk = spec.attention_chunk_size
    local = spec.kv_width(local=True)
    return KVLayout(
        bytes_per_token_layer=spec.kv_width() * value_bytes,
        full_layers=full,
        window=int(window) if window else None,
        window_layers=window_layers,
        chunk=int(chunk) if chunk else None,
        chunk_layers=chunk_layers,
        window_bytes_per_token_layer=local * value_bytes if local != spec.kv_width() else None,
    )
