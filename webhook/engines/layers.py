"""Per-layer KV-cache geometry: full, sliding-window, chunked-local and state-only layers of a model."""

from __future__ import annotations

from dataclasses import dataclass

from ..catalog import ModelSpec


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
    per_layer = kv_elements_per_token / max(layers, 1) * value_bytes
    if spec is None:
        return KVLayout(per_layer, layers)
    kv_layers = int(getattr(spec, "kv_layers", None) or layers)
    window = spec.sliding_window
    window_layers = int(getattr(spec, "sliding_window_layers", None) or (kv_layers if window else 0))
    chunk = getattr(spec, "attention_chunk_size", None)
    chunk_layers = int(getattr(spec, "chunked_layers", None) or 0) if chunk else 0
    window_layers = min(window_layers, kv_layers)
    chunk_layers = min(chunk_layers, kv_layers - window_layers)
    # Per-layer bytes are of the layers that keep KV (a hybrid's linear layers keep none).
    per_layer = kv_elements_per_token / max(layers, 1) * value_bytes
    return KVLayout(
        bytes_per_token_layer=per_layer,
        full_layers=kv_layers - window_layers - chunk_layers,
        window=int(window) if window else None,
        window_layers=window_layers,
        chunk=int(chunk) if chunk else None,
        chunk_layers=chunk_layers,
    )
