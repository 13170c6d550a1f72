"""Serving engines and trainers: one module each reads what its users write and knows what it allocates."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import orjson

from ..models.catalog import ModelSpec
from ..models.vram import Estimate, EstimateRequest
from ..models.vram import estimate as generic_estimate
from ..models.vram import max_context as vram_max_context
from . import llamacpp, nim, ollama, sglang, tgi, trainers, vllm
from .base import Found, Settings, Version, parse_version
from .cmdline import Command, commands_of, container_env

__all__ = [
    "ENGINES",
    "ContainerReading",
    "Found",
    "Settings",
    "Version",
    "engine_env_names",
    "estimate",
    "max_context",
    "parse_version",
    "read_container",
    "suggest",
]

ENGINES = ("vllm", "sglang", "tgi", "llama.cpp", "ollama", "nim", "trainer")
_PLANS: Mapping[str, Callable[[EstimateRequest, ModelSpec | None], Estimate]] = {
    "vllm": vllm.plan, "sglang": sglang.plan, "tgi": tgi.plan, "llama.cpp": llamacpp.plan,
    "ollama": ollama.plan, "nim": nim.plan, "trainer": trainers.plan,
}
NEWEST: Mapping[str, Version] = {"vllm": vllm.NEWEST, "tgi": tgi.NEWEST, "sglang": sglang.NEWEST,
                                 "ollama": ollama.NEWEST}

ConfigMapLookup = Callable[[str, str], str | None]


@dataclass
class ContainerReading:
    """One container as its program sees it: env, commands, and the engine settings read from them."""

    container: dict[str, Any]
    env: dict[str, str]
    commands: list[Command]
    settings: Settings | None
    unknown_env: list[str] = field(default_factory=list)
    command_text: str = ""  # command and args as written (before expansion), for "via env NAME" and warnings

    @property
    def engine(self) -> str | None:
        return self.settings.engine if self.settings else None


def _image(container: Mapping[str, Any]) -> str:
    image = container.get("image")
    return image if isinstance(image, str) else ""


def read_container(container: dict[str, Any], pod_commands: Sequence[Command] = (),
                   lookup: ConfigMapLookup | None = None,
                   runtime_env: Mapping[str, str] | None = None) -> ContainerReading:
    """Read a container: expand its env and command line, find its engine and the settings it declares.

    ``runtime_env`` holds variables a controller injects into the running container (LeaderWorkerSet's
    ``LWS_GROUP_SIZE``) whose values are known from the workload; the container's own env overrides them.
    A pure function of its arguments: the pods of one template are read once, then served from a
    bounded cache keyed by the container's canonical JSON. Readings that consulted ConfigMaps are not
    cached (those change).
    """
    runtime = tuple(sorted(runtime_env.items())) if runtime_env else ()
    if lookup is not None:
        return _read_container(container, pod_commands, lookup, runtime)
    try:
        key = orjson.dumps(container, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # not JSON (a test's odd object): read it directly
        return _read_container(container, pod_commands, None, runtime)
    return _cached_reading(key, tuple(c.words for c in pod_commands), runtime)


@lru_cache(maxsize=2048)
def _cached_reading(key: bytes, pod_words: tuple[tuple[str, ...], ...],
                    runtime: tuple[tuple[str, str], ...]) -> ContainerReading:
    return _read_container(orjson.loads(key), [Command(w) for w in pod_words], None, runtime)


def _read_container(container: dict[str, Any], pod_commands: Sequence[Command],
                    lookup: ConfigMapLookup | None, runtime: tuple[tuple[str, str], ...] = ()) -> ContainerReading:
    own, unknown = container_env(container, lookup)
    env = {**dict(runtime), **own} if runtime else own
    commands = commands_of(container, env)
    image = _image(container)
    settings = (
        vllm.read(image, commands, env)
        or sglang.read(image, commands, env)
        or tgi.read(image, commands, env)
        or llamacpp.read(image, commands, env)
        or ollama.read(image, commands, env, pod_commands)
        or nim.read(image, commands, env)
        or trainers.read(image, commands, env)
    )
    parts = [container.get("command"), container.get("args")]
    text = " ".join(str(t) for part in parts if isinstance(part, list) for t in part if isinstance(t, str))
    return ContainerReading(container, env, commands, settings, unknown, text)


_SETTING_TABLES = {"vllm": vllm.SETTINGS, "sglang": sglang.SETTINGS, "tgi": tgi.SETTINGS,
                   "llama.cpp": llamacpp.SETTINGS, "ollama": ollama.SETTINGS, "nim": nim.SETTINGS,
                   "trainer": trainers.SETTINGS}


@lru_cache(maxsize=16)
def engine_env_names(engine: str | None) -> frozenset[str]:
    """The env variables an engine reads its settings from (TGI's twins, ``LLAMA_ARG_*``, ``OLLAMA_*`` …)."""
    table = _SETTING_TABLES.get(engine or "", {})
    return frozenset(name for setting in table.values() for name in setting.envs)


def lifecycle_commands(pod_spec: Mapping[str, Any]) -> list[Command]:
    """Commands of lifecycle hooks and init containers (where ``ollama pull`` often hides)."""
    out: list[Command] = []
    for key in ("initContainers", "containers"):
        for c in pod_spec.get(key) or []:
            if not isinstance(c, dict):
                continue
            env, _ = container_env(c)
            if key == "initContainers":
                out.extend(commands_of(c, env))
            hooks = c.get("lifecycle")
            if isinstance(hooks, dict):
                for hook in hooks.values():
                    exec_ = hook.get("exec") if isinstance(hook, dict) else None
                    if isinstance(exec_, dict):
                        out.extend(commands_of({"command": exec_.get("command")}, env))
    return out


# How each engine's users say what a suggestion changes ({n} is the value), for "Try:" lines.
_SUGGEST: Mapping[str, Mapping[str, str]] = {
    "vllm": {"context": "--max-model-len {n}", "tp": "--tensor-parallel-size {n}", "kv_fp8": "--kv-cache-dtype fp8",
             "max_seqs": "--max-num-seqs {n}", "fp8": "--quantization fp8 (quantized at load)"},
    "nim": {"context": "NIM_MAX_MODEL_LEN={n}", "tp": "NIM_TENSOR_PARALLEL_SIZE={n}"},
    "tgi": {"context": "--max-total-tokens {n} (MAX_TOTAL_TOKENS)", "tp": "--num-shard {n} (NUM_SHARD)",
            "kv_fp8": "--kv-cache-dtype fp8_e5m2", "fp8": "--quantize fp8"},
    "sglang": {"context": "--context-length {n}", "tp": "--tp {n}", "kv_fp8": "--kv-cache-dtype fp8_e5m2",
               "fp8": "--quantization fp8"},
    "llama.cpp": {"context": "-c {n}", "kv_fp8": "-ctk q8_0 -ctv q8_0 -fa"},
    "ollama": {"context": "OLLAMA_CONTEXT_LENGTH={n}", "kv_fp8": "OLLAMA_KV_CACHE_TYPE=q8_0"},
    "trainer": {"context": "--max_seq_length {n}"},
}


def suggest(engine: str | None, key: str, n: int | None = None) -> str | None:
    """The engine's own way to say a change (``--max-model-len 24576``), or None when it has none."""
    text = _SUGGEST.get(engine or "", {}).get(key)
    return text.format(n=n) if text is not None else None


def max_context(req: EstimateRequest, usable_mib: float) -> int | None:
    """The largest context (tokens per sequence) whose expected per-GPU need fits in ``usable_mib``."""
    return vram_max_context(req, usable_mib, estimate)


@lru_cache(maxsize=4096)
def estimate(req: EstimateRequest) -> Estimate:
    """The estimate by the engine model of ``req.engine`` (the engine-agnostic one when None).

    Pure and cached: a request (frozen, hashable) always prices the same.
    """
    plan = _PLANS.get(req.engine or "")
    if plan is None:
        return generic_estimate(req)
    if req.params <= 0 or req.context <= 0 or req.batch <= 0 or req.gpus <= 0:
        raise ValueError("params, context, batch and gpus must be positive")
    return plan(req, req.spec)
