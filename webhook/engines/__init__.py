"""Serving engines and trainers: one module each reads what its users write and knows what it allocates."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import orjson

from ..models.vram import Estimate, EstimateRequest
from ..models.vram import estimate as generic_estimate
from ..models.vram import max_context as vram_max_context
from . import llamacpp, nim, ollama, sglang, tgi, trainers, trtllm, vllm
from .base import Found, Settings, Version, parse_version
from .cmdline import Command, commands_of, container_env
from .engine import ContextDefault, Engine, IntSetting, ParallelRead, UtilRule

__all__ = [
    "ENGINES",
    "REGISTRY",
    "ContainerReading",
    "ContextDefault",
    "Engine",
    "Found",
    "IntSetting",
    "ParallelRead",
    "Settings",
    "UtilRule",
    "Version",
    "engine_env_names",
    "engine_named",
    "engines",
    "estimate",
    "max_context",
    "parse_version",
    "read_container",
    "suggest",
    "training_engine",
]

# Each engine module defines one Engine (``ENGINE``), registered once here; the rest of vramgate asks the
# registry (engine_named, engines) and never imports an engine module by name (tests/unit/test_layout.py).
# Adding an engine is one module and one line in this table. The order is the order a container is tried
# in: the first engine that recognises it reads it.
REGISTRY: Mapping[str, Engine] = {e.name: e for e in (
    vllm.ENGINE, sglang.ENGINE, tgi.ENGINE, trtllm.ENGINE, llamacpp.ENGINE, ollama.ENGINE, nim.ENGINE, trainers.ENGINE,
)}
ENGINES = tuple(REGISTRY)
_ALIASES: Mapping[str, str] = {alias: e.name for e in REGISTRY.values() for alias in e.aliases}


def engine_named(name: str | None) -> Engine | None:
    """The registered engine of that name or alias (``llamacpp``, ``text-generation-inference``), or None."""
    if not name:
        return None
    return REGISTRY.get(name) or REGISTRY.get(_ALIASES.get(name, ""))


def engines() -> tuple[Engine, ...]:
    """Every registered engine, in the order containers are tried."""
    return tuple(REGISTRY.values())


def training_engine() -> Engine:
    """The engine that prices training workloads."""
    return next(e for e in REGISTRY.values() if e.trains)


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
    settings = next((found for e in REGISTRY.values()
                     if (found := e.read(image, commands, env, pod_commands)) is not None), None)
    parts = [container.get("command"), container.get("args")]
    text = " ".join(str(t) for part in parts if isinstance(part, list) for t in part if isinstance(t, str))
    return ContainerReading(container, env, commands, settings, unknown, text)


@lru_cache(maxsize=16)
def engine_env_names(engine: str | None) -> frozenset[str]:
    """The env variables an engine reads its settings from (TGI's twins, ``LLAMA_ARG_*``, ``OLLAMA_*`` …)."""
    found = engine_named(engine)
    return found.env_names if found else frozenset()


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


def suggest(engine: str | None, key: str, n: int | None = None) -> str | None:
    """The engine's own way to say a change (``--max-model-len 24576``), or None when it has none."""
    found = engine_named(engine)
    return found.suggest(key, n) if found else None


def max_context(req: EstimateRequest, usable_mib: float) -> int | None:
    """The largest context (tokens per sequence) whose expected per-GPU need fits in ``usable_mib``."""
    return vram_max_context(req, usable_mib, estimate)


@lru_cache(maxsize=4096)
def estimate(req: EstimateRequest) -> Estimate:
    """The estimate by the engine model of ``req.engine`` (the engine-agnostic one when None).

    Pure and cached: a request (frozen, hashable) always prices the same.
    """
    found = engine_named(req.engine)
    plan = found.plan if found else None
    if plan is None:
        return generic_estimate(req)
    if req.params <= 0 or req.context <= 0 or req.batch <= 0 or req.gpus <= 0:
        raise ValueError("params, context, batch and gpus must be positive")
    return plan(req, req.spec)
