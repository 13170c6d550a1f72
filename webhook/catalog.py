"""The model catalog: architecture facts for widely deployed open models, looked up by name or hub id."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

import yaml

# Suffixes that name a packaging of the same weights (quantization, file format), not another model.
_PACKAGING_SUFFIX = re.compile(
    r"([-_.](awq|gptq(-?int[48])?|int[48]|fp8(-dynamic)?|w8a8|w4a16|gguf|bnb(-4bit)?|4bit|8bit|"
    r"q[2-8]_k(_[sml])?|q[458]_[01]|exl2|mlx|hf))+$",
    re.IGNORECASE,
)
_SIZE_IN_NAME = re.compile(r"(?<![0-9a-z.])(\d+(?:\.\d+)?)\s*([bm])(?![a-z0-9])", re.IGNORECASE)
_MOE_IN_NAME = re.compile(r"(\d+)x(\d+(?:\.\d+)?)b", re.IGNORECASE)


@dataclass(frozen=True)
class ModelSpec:
    """Architecture facts of one model, as in its Hugging Face ``config.json``."""

    name: str
    params: float
    layers: int
    hidden_size: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab_size: int
    context: int
    dtype: str = "bf16"
    tie_embeddings: bool = False
    aliases: tuple[str, ...] = ()
    active_params: float | None = None
    experts: int | None = None
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    sliding_window: int | None = None

    @property
    def embedding_params(self) -> float:
        """Parameters in the token embedding and the output head (one matrix when tied)."""
        matrices = 1 if self.tie_embeddings else 2
        return float(self.vocab_size * self.hidden_size * matrices)

    def kv_elements_per_token(self) -> int:
        """KV-cache values stored per token across all layers (MLA stores one compressed latent)."""
        if self.kv_lora_rank:
            return self.layers * (self.kv_lora_rank + (self.qk_rope_head_dim or 0))
        return 2 * self.layers * self.kv_heads * self.head_dim


_FIELDS = {f for f in ModelSpec.__dataclass_fields__}


def spec_from_mapping(entry: Mapping[str, Any]) -> ModelSpec:
    """Build a ModelSpec from a catalog entry, ignoring bookkeeping keys such as ``verified``."""
    data = {k: v for k, v in entry.items() if k in _FIELDS}
    data["aliases"] = tuple(str(a) for a in data.get("aliases") or ())
    data["params"] = float(data["params"])
    if data.get("active_params") is not None:
        data["active_params"] = float(data["active_params"])
    if not data.get("head_dim"):
        data["head_dim"] = int(data["hidden_size"]) // int(data["heads"])
    if not data.get("kv_heads"):
        data["kv_heads"] = data["heads"]
    return ModelSpec(**data)


def normalize(name: str) -> str:
    """Lower-case a model reference and drop an organisation prefix, a revision and a local path."""
    text = name.strip().strip("/").lower()
    text = text.split("@", 1)[0].split(":", 1)[0] if "/" in text else text
    return text.rsplit("/", 1)[-1]


class Catalog:
    """Immutable index of model specs by every alias, case-insensitively."""

    def __init__(self, specs: Iterable[ModelSpec]) -> None:
        self._specs: list[ModelSpec] = []
        self._index: dict[str, ModelSpec] = {}
        for spec in specs:
            self._add(spec)

    def _add(self, spec: ModelSpec) -> None:
        self._specs.append(spec)
        for key in (spec.name, *spec.aliases):
            # Exact (lower-case) hub ids first; the short form without the organisation as well.
            self._index[key.lower()] = spec
            self._index.setdefault(normalize(key), spec)

    def with_entries(self, entries: Iterable[Mapping[str, Any]]) -> Catalog:
        """A new catalog with config-supplied entries added (they win over built-in ones)."""
        extra = [spec_from_mapping(e) for e in entries]
        return Catalog([*self._specs, *extra])

    def __len__(self) -> int:
        return len(self._specs)

    def __iter__(self) -> Any:
        return iter(self._specs)

    def lookup(self, name: str) -> ModelSpec | None:
        """Find a model by name, alias or hub id; quantization suffixes (``-AWQ``, ``-GGUF``) are ignored."""
        raw = name.strip()
        if not raw:
            return None
        for key in (raw.lower(), raw.lower().split(":", 1)[0], normalize(raw)):
            if key in self._index:
                return self._index[key]
            stripped = _PACKAGING_SUFFIX.sub("", key)
            if stripped != key and stripped in self._index:
                return self._index[stripped]
        return None


def params_from_name(name: str) -> float | None:
    """Guess a parameter count from a model id such as ``acme/coder-13b-chat`` (``8x7b`` is not guessed)."""
    base = normalize(name)
    if _MOE_IN_NAME.search(base):
        return None
    matches = _SIZE_IN_NAME.findall(base)
    if len(matches) != 1:
        return None
    number, unit = matches[0]
    return float(number) * (1e9 if unit.lower() == "b" else 1e6)


@lru_cache(maxsize=1)
def builtin_catalog() -> Catalog:
    """The catalog shipped in ``webhook/data/models.yaml``."""
    text = resources.files("webhook").joinpath("data/models.yaml").read_text(encoding="utf-8")
    data = yaml.safe_load(text) or {}
    return Catalog(spec_from_mapping(e) for e in data.get("models", []))
