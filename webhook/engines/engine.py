"""The `Engine` object: everything one serving engine or trainer knows, as the core may ask it.

Each engine module defines one ``ENGINE`` and ``engines/__init__.py`` registers it in one table (as
``kinds/__init__.py:_BY_KIND`` does for workload kinds, and kueue's ``RegisterIntegration`` for job
frameworks). ``decide/``, ``advise/``, ``audit/`` and ``serve/`` ask the registry for an engine by name and
call what it offers; none of them names an engine module, and no engine code switches on another engine.
A field left at its default means the engine has nothing of its own to say there: the core's engine-agnostic
rule applies.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..models.catalog import ModelSpec
from ..models.vram import Estimate, EstimateRequest
from .base import Found, Setting, Settings, Version
from .cmdline import Command
from .parallel import Layout


class Reader(Protocol):
    """Finds the engine in a container: its settings from image, commands and env, or None when it is another."""

    def __call__(self, image: str, commands: Sequence[Command], env: Mapping[str, str],
                 pod_commands: Sequence[Command] = ()) -> Settings | None: ...


class UtilRule(Protocol):
    """An engine's usable share of a GPU by its memory (MiB), and the smallest GPU that holds a need."""

    def __call__(self, gpu_mib: float) -> float: ...

    def floor_mib(self, per_gpu_mib: float) -> int: ...


@dataclass(frozen=True)
class ParallelRead:
    """What a container declares about parallelism, as the core read it (``None``: not declared)."""

    tp: int | None
    pp: int
    dp: int | None
    dp_unknown: bool  # --data-parallel-size computed at run time
    pod_gpus: int
    group: int
    moe: bool | None


@dataclass(frozen=True)
class ContextDefault:
    """The context an engine allocates when nothing declares one: tokens and where that figure comes from."""

    tokens: int
    source: str


@dataclass(frozen=True)
class ContextRead:
    """A context flag's value as the engine's own parser reads it.

    ``auto``: the engine picks the largest context that fits once it knows its GPU (vLLM's ``--max-model-len
    auto``); ``tokens`` is then what the engine needs at the least to start (one KV block). ``tokens`` 0: the
    model's own context where the engine says so (llama.cpp ``-c 0``). ``note``: what the reader should be told
    (a version that may not know the spelling, a value the engine ignores).
    """

    tokens: int
    auto: bool = False
    note: str | None = None
    default: bool = False  # the engine ignores the value and uses its default (Ollama, on a value it cannot read)


Plan = Callable[[EstimateRequest, ModelSpec | None], Estimate]
IntSetting = Callable[[Settings, str], int | None]


@dataclass(frozen=True)
class Engine:
    """One engine (vLLM, SGLang, TGI, llama.cpp, Ollama, NIM, trainers …) as one registered object."""

    name: str
    read: Reader
    plan: Plan | None = None
    settings: Mapping[str, Setting] = field(default_factory=dict)
    newest: Version | None = None
    aliases: tuple[str, ...] = ()
    # How its users say a change ({n} is the value): keys context, tp, kv_fp8, max_seqs, fp8.
    suggestions: Mapping[str, str] = field(default_factory=dict)
    serves: bool = True  # an inference server (``vramgate fit`` plans for it); False for trainers
    trains: bool = False  # the training model: a training workload is priced by it
    tensor_parallel: bool = False  # splits one model over a pod's GPUs by a TP size
    # Puts the model on one GPU unless a TP flag says otherwise (vLLM, SGLang); the flag to add.
    one_gpu_unless: str | None = None
    # Sizes its KV pool from the share it is given and the autofit may lower it (vLLM).
    tunes_utilization: bool = False
    # ``-c 0`` and the like: a declared context of zero means the model's own context.
    zero_context_is_model: bool = False
    # Whether ``config.gpu_memory_utilization`` replaces the engine's own default share.
    config_utilization: bool = False
    # The engine's own share of each GPU when nothing declares it: (version, TP GPUs) → fraction.
    default_utilization: Callable[[Version | None, int], float] | None = None
    # The share set by the GPU's memory (SGLang's mem_fraction_static), judged per node.
    utilization_rule: Callable[[Version | None, int, int, int, Settings], UtilRule] | None = None
    # Its own grammar for its context flag: (value, version) → ContextRead; raises GrammarError (the engine's rule).
    read_context: Callable[[str, Version | None], ContextRead] | None = None
    # The context it allocates when nothing declares one: (settings, the model's context, a zero declared).
    default_context: Callable[[Settings, int, bool], ContextDefault] | None = None
    # Its parallel layout (DP, EP, DP attention) from the parallelism read; None: TP × PP only.
    layout: Callable[[Settings, ParallelRead, IntSetting], Layout] | None = None
    # Extra request fields its layout implies (vLLM's EPLB redundant experts) and why.
    layout_extras: Callable[[Settings, Layout], tuple[dict[str, int], list[tuple[str, str]]]] | None = None
    # Layouts one instance may span several pods with: (layout, estimate fields, launch flags).
    spanning: Callable[[bool, int | None, int, int], list[tuple[str, dict[str, int], str]]] | None = None
    # The request fields its settings change (sampler, slots, warm-up sizes …), beyond the shared ones.
    request_changes: Callable[[EstimateRequest, Settings, bool, IntSetting], dict[str, Any]] | None = None
    # The KV pool on one GPU: (GiB, tokens, concurrency at the request's context); None: the generic arithmetic.
    kv_pool: Callable[[EstimateRequest, ModelSpec | None, float, float], tuple[float, int, float]] | None = None
    # Runs what does not fit on the CPU instead of failing (Ollama): a tight fit is slow, not a failed start.
    spills_to_host: bool = False
    fixed_slots: bool = False  # concurrency is a fixed number of slots (llama.cpp -np, OLLAMA_NUM_PARALLEL)
    # Pod-wide commands (lifecycle hooks, init containers) may name its model (``ollama pull``).
    model_in_pod_commands: bool = False
    # A config file its settings name (axolotl, LLaMA-Factory YAML): fills settings from the file's text.
    read_config_file: Callable[[Settings, str, str], bool] | None = None
    # Training: the quantization its flags load the weights in (``--load_in_4bit``: nf4).
    training_quantization: Callable[[Settings], Found | None] | None = None
    # Training: full, lora or qlora, and fsdp or zero1–3, as its flags say (None: they do not).
    finetune_of: Callable[[Settings], str | None] | None = None
    parallelism_of: Callable[[Settings], str | None] | None = None
    # How fixes add a setting it was not given (keys context, tp, kv_dtype, max_seqs, precision, utilization):
    # ("arg", flag, value) or ("env", NAME, value), {n} the value; its env twins where no command line is in
    # view (clap ``env``); and the values it spells differently from vramgate (kv_dtype fp8 → fp8_e5m2).
    fix_adds: Mapping[str, tuple[str, str, str]] = field(default_factory=dict)
    fix_env_twins: Mapping[str, tuple[str, str, str]] = field(default_factory=dict)
    fix_values: Mapping[str, str] = field(default_factory=dict)
    # A launch command given a node's GPUs where it declares none (the provisioned instance type's count).
    give_gpus: Callable[[list[str], int, int], list[str] | None] | None = None
    # Its start-up log lines: a log's text → the figures it printed of what it allocated (engines/startup.py), the
    # names of tests/fixtures/accuracy's ``reported``. None: no lines known.
    parse_log: Callable[[str], dict[str, float]] | None = None

    @property
    def env_names(self) -> frozenset[str]:
        """The env variables it reads its settings from (TGI's twins, ``LLAMA_ARG_*``, ``OLLAMA_*`` …)."""
        return frozenset(name for setting in self.settings.values() for name in setting.envs)

    def suggest(self, key: str, n: int | None = None) -> str | None:
        """Its own way to say a change (``--max-model-len 24576``), or None when it has none."""
        text = self.suggestions.get(key)
        return text.format(n=n) if text is not None else None
