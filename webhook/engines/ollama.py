"""Ollama: the model an ``ollama run|pull`` names anywhere in the pod, its env, and its CPU spill.

Ollama (llm/memory.go@v0.5.7:EstimateGPULayers) offloads as many layers as its estimate says fit and runs
the rest on the CPU: a model too large for the GPU is slow, not a failed start. Each of
``OLLAMA_NUM_PARALLEL`` slots holds ``OLLAMA_CONTEXT_LENGTH`` tokens of KV (num_ctx × num_parallel).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..models.catalog import ModelSpec
from ..models.vram import MIB, Estimate, EstimateRequest, priced, shape_of, weights_bytes
from ..units.precision import kv_bytes
from .base import Setting, Settings, Version, read_settings, version_of
from .cmdline import Command
from .engine import ContextDefault, ContextRead, Engine, IntSetting
from .grammar import ollama_env_uint
from .layers import layout_of
from .llamacpp import parse_log as llamacpp_log
from .startup import line
from .startup import read as read_log

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
    """``OLLAMA_NUM_PARALLEL`` when unset: 1.

    Before 0.10.0 unset meant "auto" (server/sched.go ``defaultParallel``: 4 in 0.2.0–0.6.6, 2 in
    0.6.7–0.9.x), falling back to 1 when that many slots did not fit fully on the GPUs; vramgate
    prices one slot there too (the fallback), which under-states a GPU-resident old Ollama's KV.
    """
    return 1


# discover/gpu.go@v0.5.7: cudaMinimumMemory = rocmMinimumMemory = 457 MiB held back on every GPU.
MINIMUM_MIB = 457.0
# What the driver's context takes before Ollama reads the free memory (23.3–23.4 GiB free of a 24 GiB card).
CONTEXT_MIB = 640.0
# The runner's --batch-size (api/types.go DefaultOptions NumBatch).
BATCH = 512
FIXED_MIB = 512.0  # CUDA context and allocator slack on each GPU that holds layers


@dataclass(frozen=True)
class Offload:
    """Where Ollama's estimate puts a model: layers per GPU (blocks, then the output layer) and the graph."""

    per_gpu: tuple[int, ...]
    model_layers: int  # blocks + the output layer, as Ollama's ``layers.model`` counts them
    graph_bytes: float  # the compute graph each GPU that holds a layer budgets

    @property
    def layers(self) -> int:
        return sum(self.per_gpu)

    @property
    def full(self) -> bool:
        return self.layers >= self.model_layers


def kv_per_layer(req: EstimateRequest, spec: ModelSpec | None) -> float:
    """KV bytes per block as Ollama estimates them (fs/ggml/ggml.go@v0.7.1:GraphSize), averaged over the blocks.

    ``context`` is num_ctx × num_parallel. DeepSeek's GGUFs declare ``head_count_kv`` = heads with
    ``key_length`` = nope + rope and ``value_length`` = v: MLA is stored per head, uncompressed, in the
    estimate and in the runner's cache. Gemma 3's local layers (and later every sliding-window model
    on the Ollama engine) keep num_parallel × window + batch tokens.
    """
    shape = shape_of(spec, req.params)
    per_value = kv_bytes(req.precision, req.kv_cache_dtype)
    tokens = req.context * max(req.slots, 1) * max(req.batch, 1)
    if spec is not None and spec.kv_lora_rank:
        width = spec.heads * ((spec.qk_nope_head_dim or spec.head_dim) + (spec.qk_rope_head_dim or 0)
                              + (spec.v_head_dim or spec.head_dim))
        return width * per_value * tokens * spec.cache_layers / max(spec.layers, 1)
    layout = layout_of(spec, shape.kv_elements_per_token, shape.layers, per_value)
    window_tokens = min(tokens, max(req.slots, 1) * (layout.window or tokens) + BATCH)
    total = (layout.bytes_per_token_layer * (layout.full_layers + layout.chunk_layers) * tokens
             + layout.window_bytes * layout.window_layers * window_tokens)
    return total / max(shape.layers, 1)


def graph_bytes(spec: ModelSpec | None, req: EstimateRequest) -> tuple[float, float]:
    """Ollama's compute-graph budget (partial, full offload): the ``llama`` case of fs/ggml/ggml.go@v0.7.1:GraphSize.

    Other architectures have their own formulas of the same order; the llama one stands in for them.
    """
    shape = shape_of(spec, req.params)
    ctx = req.context * max(req.slots, 1)
    b = min(BATCH, ctx)
    e = shape.hidden_size
    heads = spec.heads if spec else max(1, e // 128)
    kv_heads = spec.kv_heads if spec else shape.kv_heads
    head_dim = spec.head_dim if spec else 128
    vocab = spec.vocab_size if spec else 32000
    full = max(4 * b * (1 + 4 * e + ctx * (1 + heads)), 4 * b * (e + vocab))
    partial = 4 * b * e + max(
        4 * b * (1 + e + max(ctx, e)) + e * e * 9 / 16 + 4 * ctx * (b * heads + head_dim * kv_heads),
        4 * b * (e + vocab) + e * vocab * 105 / 128)
    return float(partial), float(full)


def offload(blocks: Sequence[float], output: float, free: Sequence[float], graph: tuple[float, float],
            minimum: float = MINIMUM_MIB * MIB, overhead: float = 0.0, num_gpu: int = -1) -> Offload:
    """How many layers Ollama's estimate puts on each GPU (llm/memory.go@v0.5.7:EstimateGPULayers).

    ``blocks`` are the per-block sizes (weights + that block's KV), ``free`` each GPU's free bytes. A GPU
    takes part only if it holds ``overhead`` + graph + ``minimum`` + two layers; the blocks go round-robin
    over those while each keeps ``overhead`` + graph free, a GPU leaving the rotation when one does not
    fit; the output layer last. ``num_gpu`` ≥ 0 caps the layers (``num_gpu`` / ``OLLAMA_NUM_GPU``).
    """
    partial, full_graph = graph
    if len(free) > 1:
        full_graph = partial  # several GPUs always budget the partial graph
    worst = max(partial, full_graph)
    first = blocks[0] if blocks else 0.0
    alloc = [0.0] * len(free)
    counts = [0] * len(free)
    usable = [i for i, f in enumerate(free) if f >= overhead + worst + minimum + 2 * first]
    for i in usable:
        alloc[i] = minimum + first
    placed = 0
    for n, size in enumerate(blocks):
        if 0 <= num_gpu <= placed:
            break
        for j in range(len(usable), 0, -1):
            g = usable[n % j]
            if free[g] > overhead + alloc[g] + worst + size:
                alloc[g] += size
                counts[g] += 1
                placed += 1
                break
            usable.pop(n % j)
    if output > 0 and (num_gpu < 0 or placed < num_gpu) and usable:
        g = usable[placed % len(usable)]
        if free[g] > overhead + alloc[g] + worst + output:
            counts[g] += 1
    placed_all = sum(counts) >= len(blocks) + 1
    return Offload(tuple(counts), len(blocks) + 1, full_graph if placed_all else partial)


def _layer_weights(req: EstimateRequest, spec: ModelSpec | None) -> tuple[list[float], float]:
    """Weight bytes of each block and of the output layer (the head, or the tied embedding Ollama counts)."""
    shape = shape_of(spec, req.params)
    total = weights_bytes(req.params, req.precision, shape, spec)
    vocab = float(spec.vocab_size * spec.hidden_size) if spec else shape.embedding_params / 2
    per_param = total / max(req.params, 1.0)
    embed = vocab * per_param
    output = embed
    untied = 0.0 if (spec is None or spec.tie_embeddings) else embed
    body = max(total - embed - untied, 0.0)
    shares = spec.layer_shares() if spec is not None else [1.0 / max(shape.layers, 1)] * shape.layers
    return [body * s for s in shares], output


def _gpu_resident(blocks: Sequence[float], output: float, kv: float, placement: Offload) -> tuple[float, float]:
    """Weights and KV on the fullest GPU: llama.cpp puts the *last* N blocks there (llama-model.cpp ``i_gpu_start``).

    Ollama counts from block 0; on a model whose first blocks are dense and the rest MoE
    (DeepSeek V2/V3) the GPU gets heavier blocks than the estimate budgeted.
    """
    n_blocks = min(placement.layers, len(blocks))
    tail = list(blocks[len(blocks) - n_blocks:])
    best_w = best_kv = 0.0
    start = 0
    for count in placement.per_gpu:
        take = min(count, len(tail) - start)
        part = tail[start:start + max(take, 0)]
        start += max(take, 0)
        w = sum(part) + (output if placement.full and start >= len(tail) and count else 0.0)
        if w + kv * len(part) > best_w + best_kv:
            best_w, best_kv = w, kv * len(part)
    return best_w, best_kv


def _placement(req: EstimateRequest, blocks: Sequence[float], output: float, graph: tuple[float, float]) -> Offload:
    """One GPU when the whole model fits one, else all of them (server/sched.go@v0.9.2:pickBestFullFitByLibrary).

    Without ``OLLAMA_SCHED_SPREAD`` Ollama first looks for a single GPU that holds every layer.
    """
    assert req.gpu_mib is not None
    free = max(req.gpu_mib - CONTEXT_MIB, 0.0) * MIB
    num_gpu = -1 if req.gpu_layers is None else req.gpu_layers
    one = offload(blocks, output, [free], graph, num_gpu=num_gpu)
    if one.full or req.gpus <= 1:
        return Offload(one.per_gpu + (0,) * (max(req.gpus, 1) - 1), one.model_layers, one.graph_bytes)
    return offload(blocks, output, [free] * req.gpus, graph, num_gpu=num_gpu)


def plan(req: EstimateRequest, spec: ModelSpec | None) -> Estimate:
    """Weights, KV and graph of the layers Ollama would place on this GPU; the low end is the CPU spill's.

    Without a known GPU every layer is charged to it. With one, :func:`offload` reproduces Ollama's
    choice of layers, and the GPU is charged for the real sizes of the blocks llama.cpp puts there.
    """
    shape = shape_of(spec, req.params)
    blocks, output = _layer_weights(req, spec)
    kv = kv_per_layer(req, spec)
    partial, full = graph_bytes(spec, req)
    g = max(req.gpus, 1)
    notes = [f"Ollama: {req.slots} slot(s) × {req.context} tokens of KV; layers that do not fit run on the CPU"]
    if req.gpu_mib is None:
        weights = (sum(blocks) + output) / g
        kv_gpu = kv * len(blocks) / g
        graph = full if g == 1 else partial
    else:
        placement = _placement(req, [b + kv for b in blocks], output, (partial, full))
        weights, kv_gpu = _gpu_resident(blocks, output, kv, placement)
        graph = placement.graph_bytes if placement.layers else 0.0
        if not placement.full:
            notes.append(f"Ollama will place only {placement.layers}/{placement.model_layers} layers on "
                         f"{'this GPU' if g == 1 else f'these {g} GPUs'}; the rest run on the CPU (slower)")
    fixed = FIXED_MIB * MIB
    mid = weights + kv_gpu + graph + fixed
    low = 0.5 * fixed  # Ollama offloads fewer layers, down to none, rather than fail
    high = mid + FIXED_MIB * MIB
    if not shape.known:
        high *= 1.25
    per_token = kv * len(blocks) / max(req.context * max(req.slots, 1), 1)
    return priced(req, weights=weights, kv=kv_gpu, overhead=fixed + graph, activations=0.0, mid=mid, low=low,
                  high=high, kv_bytes_per_token=per_token, shape_known=shape.known, engine=NAME, notes=notes)


def kv_total_bytes(req: EstimateRequest, spec: ModelSpec | None) -> float:
    """The whole model's KV as Ollama's log prints it (``memory.required.kv``), GPU and CPU together."""
    return kv_per_layer(req, spec) * shape_of(spec, req.params).layers


def weights_total_bytes(req: EstimateRequest, spec: ModelSpec | None) -> float:
    """Every block and the output layer, wherever they run."""
    blocks, output = _layer_weights(req, spec)
    return sum(blocks) + output


def _default_context(s: Settings, model_context: int, zero_declared: bool) -> ContextDefault:
    return ContextDefault(min(model_context, default_context(s.version)), "Ollama default OLLAMA_CONTEXT_LENGTH")


def _request_changes(req: EstimateRequest, s: Settings, context_annotated: bool,
                     int_setting: IntSetting) -> dict[str, Any]:
    return {"slots": int_setting(s, "parallel") or default_parallel(req.engine_version)}


def _read_context(text: str, version: Version | None) -> ContextRead:
    """``OLLAMA_CONTEXT_LENGTH`` as envconfig.Uint reads it: a value ``strconv.ParseUint`` refuses is ignored with
    a warning and the default is used (Ollama never refuses to start over it)."""
    read = ollama_env_uint("OLLAMA_CONTEXT_LENGTH", text, version)
    if read.fell_back:
        return ContextRead(0, default=True, note="Ollama cannot read it (strconv.ParseUint) and uses its default")
    if not isinstance(read.value, int) or read.value == 0:
        return ContextRead(0, default=True)
    return ContextRead(read.value)



# Start-up lines: the offload plan Ollama logs (llm/memory.go, "offload to cuda" / msg=offload) and the llama.cpp
# runner's own lines (engines/llamacpp.py), under the names tests/fixtures/accuracy gives Ollama's records.
_UNIT = r"(?P<unit>GiB|MiB)"
LOG_LINES = (
    line("layers_model", r"layers\.model={N}"),
    line("layers_offload", r"layers\.offload={N}"),
    *(line(f"{key}_{{unit}}", rf'{field}="{{N}} {_UNIT}"') for key, field in (
        ("required_full", r"memory\.required\.full"), ("required_partial", r"memory\.required\.partial"),
        ("required_kv", r"memory\.required\.kv"), ("weights_total", r"memory\.weights\.total"),
        ("weights_repeating", r"memory\.weights\.repeating"),
        ("weights_nonrepeating", r"memory\.weights\.nonrepeating"), ("graph_full", r"memory\.graph\.full"),
        ("graph_partial", r"memory\.graph\.partial"), ("projector_weights", r"projector\.weights"),
        ("projector_graph", r"projector\.graph"))),
)
_AVAILABLE = re.compile(r'memory\.available="\[([^\]]*)\]"')


def parse_log(text: str) -> dict[str, float]:
    """Ollama's start-up figures in ``text`` (engines/startup.py): its offload plan and its runner's lines."""
    figures = read_log(text, LOG_LINES)
    found = _AVAILABLE.search(text)
    gib = [float(v) for v in re.findall(r"([\d.]+) GiB", found.group(1))] if found else []
    for i, v in enumerate(gib):
        figures[f"available_gib_gpu{i}"] = v
    if len(gib) == 1:
        figures["available_gib"] = gib[0]
    elif gib and len(set(gib)) == 1:
        figures["available_gib_per_gpu"] = gib[0]
    runner = llamacpp_log(text)
    if "compute_buffer_mib_gpu0" in runner and "compute_buffer_mib_gpu1" not in runner:
        runner["compute_buffer_mib"] = runner["compute_buffer_mib_gpu0"]
    if "output_buffer_mib_host" in runner:
        runner["output_buffer_mib"] = runner["output_buffer_mib_host"]
    return {**runner, **figures}


ENGINE = Engine(
    read_context=_read_context,
    name=NAME, read=read, plan=plan, settings=SETTINGS, newest=NEWEST,
    parse_log=parse_log,
    suggestions={"context": "OLLAMA_CONTEXT_LENGTH={n}", "kv_fp8": "OLLAMA_KV_CACHE_TYPE=q8_0"},
    default_utilization=lambda version, tp: 1.0, default_context=_default_context,
    request_changes=_request_changes, fixed_slots=True, model_in_pod_commands=True, spills_to_host=True,
    fix_adds={"context": ("env", "OLLAMA_CONTEXT_LENGTH", "{n}"), "kv_dtype": ("env", "OLLAMA_KV_CACHE_TYPE", "q8_0")},
    fix_values={"kv_dtype": "q8_0"},
)
