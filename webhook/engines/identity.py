"""Which model a reference names: hub ids, ``hf://``/``pvc://`` URIs, local paths, GGUF files, Ollama tags."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from ..models.catalog import Catalog, ModelSpec
from ..units.declaration import quant_in_model_id

_URI = re.compile(r"^[a-z][a-z0-9+.-]*://", re.IGNORECASE)
_GGUF_QUANT = re.compile(r"[-_.](i?q[2-8]_(?:k_[sml]|k|[01])|f16|bf16|fp16)(?:\.gguf)?$", re.IGNORECASE)
_OLLAMA_TAG_QUANT = re.compile(r"-(q[2-8]_(?:k_[sml]|k|[01])|fp16|q8_0)$", re.IGNORECASE)
_OLLAMA_HOSTS = ("registry.ollama.ai/library/", "ollama.com/library/", "ollama://")


@dataclass(frozen=True)
class Identity:
    """A model reference resolved: the catalog entry (if any), the quantization the name carries, the name used."""

    spec: ModelSpec | None
    quantization: str | None
    name: str
    how: str


def _strip(reference: str) -> str:
    text = reference.strip().strip('"\'')
    for host in _OLLAMA_HOSTS:
        if text.startswith(host):
            text = text[len(host):]
    if _URI.match(text):
        text = _URI.sub("", text)
        # hf://org/model → org/model; pvc://claim/path/model, s3://bucket/…/model → the last components
        parts = [p for p in text.split("/") if p]
        text = "/".join(parts[-2:]) if len(parts) >= 2 else (parts[0] if parts else "")
    return text.rstrip("/")


@lru_cache(maxsize=2048)
def identify(catalog: Catalog, reference: str, engine: str | None = None) -> Identity:
    """Resolve a model reference as engines and people write it; never raises.

    Cached per catalog (catalogs are immutable; a reloaded config builds a new one): admission asks for
    the same few references over and over.
    """
    name = _strip(reference)
    quant = quant_in_model_id(name)
    resolve = getattr(catalog, "resolve", None)
    if callable(resolve):
        resolved = resolve(name)
        if resolved is not None:
            return Identity(resolved.spec, resolved.quantization or quant, name, str(resolved.how))
    candidates = [name]
    base = name.rsplit("/", 1)[-1]
    if base.lower().endswith(".gguf"):
        m = _GGUF_QUANT.search(base)
        if m:
            quant = quant or m.group(1).lower()
            candidates.append(base[: m.start()])
        candidates.append(re.sub(r"\.gguf$", "", base, flags=re.IGNORECASE))
    if ":" in name and "/" not in name.split(":", 1)[1]:
        model, tag = name.split(":", 1)
        m = _OLLAMA_TAG_QUANT.search(tag)
        if m:
            quant = quant or m.group(1).lower()
            tag = tag[: m.start()]
        candidates += [f"{model}:{tag}", model]
    if "/" in name:
        # A local path or checkpoint directory: try each component, deepest first. A hub id's first part is
        # its organisation, never a model: "Qwen/Qwen3.5-4B" must not become Ollama's "qwen" (Qwen1.5-7B).
        parts = [p for p in name.split("/") if p]
        if len(parts) == 2 and not name.startswith("/"):
            parts = parts[1:]
        candidates += list(reversed(parts))
        # A hub id flattened into one folder name (`meta-llama--Meta-Llama-3.1-8B-Instruct`, as caches and
        # buckets store it): the organisation and the repository again.
        candidates += [p.replace("--", "/", 1) for p in reversed(parts) if "--" in p and not p.startswith("models--")]
    for c in candidates:
        spec = catalog.lookup(c)
        if spec is not None:
            return Identity(spec, quant, name, "catalog" if c == name else f"catalog via {c!r}")
    return Identity(None, quant, name, "unknown")
