"""Ollama: the model an ``ollama run|pull`` names anywhere in the pod, its env, and its CPU spill.

Ollama (llm/memory.go ``EstimateGPULayers``) offloads as many layers as fit and runs the rest on the
CPU: a model too large for the GPU is slow, not a failed start. Each of ``OLLAMA_NUM_PARALLEL``
slots holds ``OLLAMA_CONTEXT_LENGTH`` tokens of KV (num_ctx × num_parallel).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..models.catalog import ModelSpec
from ..models.vram import Estimate, EstimateRequest
from .base import Setting, Settings, Version, read_settings, version_of
from .cmdline import Command
from .serving import Costs
from .serving import plan as serving_plan

NAME = "ollama"
IMAGE_REPOS = ("ollama",)
NEWEST: Version = (0, 13, 0)

SETTINGS: Mapping[str, Setting] = {
    "context": Setting((), ("OLLAMA_CONTEXT_LENGTH",)),
    "parallel": Setting((), ("OLLAMA_NUM_PARALLEL",)),
    "kv_dtype": Setting((), ("OLLAMA_KV_CACHE_TYPE",)),
    "flash_attention": Setting((), ("OLLAMA_FLASH_ATTENTION",)),
}


def models_named(commands: Sequence[Command]) -> list[str]:
    """Models an ``ollama run|pull NAME`` in these commands names, in order."""
    out: list[str] = []
    for cmd in commands:
        words = cmd.words
        for i, w in enumerate(words[:-2]):
            if w.rsplit("/", 1)[-1] == "ollama" and words[i + 1] in ("run", "pull") \
                    and not words[i + 2].startswith("-"):
                out.append(words[i + 2])
    return out


def read(image: str, commands: Sequence[Command], env: Mapping[str, str], pod_commands: Sequence[Command] = ()
         ) -> Settings | None:
    """Ollama's settings, or None when the container does not run Ollama."""
    runs = any(c.program == "ollama" for c in commands)
    if not runs and not any(r in image.lower().rsplit(":", 1)[0] for r in IMAGE_REPOS):
        return None
    version = version_of(image, IMAGE_REPOS)
    settings = Settings(NAME, version, f"image {image}" if version else "newest known")
    named = models_named(commands) or models_named(pod_commands)
    if named:
        settings.put("model", named[0], "ollama run|pull")
    return read_settings(settings, SETTINGS, None, env)


def default_context(version: Version | None) -> int:
    """``OLLAMA_CONTEXT_LENGTH`` when unset: 2048 before 0.6.4, 4096 after (envconfig/config.go)."""
    return 4096 if (version or NEWEST) >= (0, 6, 4) else 2048


def default_parallel(version: Version | None) -> int:
    """``OLLAMA_NUM_PARALLEL`` when unset: 1 (0.2–0.3 chose 4 when memory allowed)."""
    return 1


def plan(req: EstimateRequest, spec: ModelSpec | None) -> Estimate:
    """Weights + KV for context × slots on the GPU; the low end is zero because Ollama spills to the CPU."""
    notes = [f"Ollama: {req.slots} slot(s) × {req.context} tokens of KV; layers that do not fit run on the CPU"]
    return serving_plan(req, spec, Costs("ollama", activation_bytes_per_token_hidden=0.0, fixed_mib=512.0,
                                         low_gpu_share=0.0, low_factor=0.5, high_extra_mib=512.0), 0, notes)
