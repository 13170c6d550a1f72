"""llama.cpp server: its flags and ``LLAMA_ARG_*`` env twins, GGUF weights, layers offloaded, one shared context.

``llama-server`` (tools/server, common/arg.cpp) allocates the KV cache for ``--ctx-size`` tokens in
total, shared by the ``--parallel`` slots; ``--n-gpu-layers`` decides how many layers (and their
KV) live on the GPU; a CUDA allocation that fails at start-up ends the process.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..models.catalog import ModelSpec
from ..models.vram import MIB, Estimate, EstimateRequest, shape_of, weights_bytes
from ..units.precision import PRECISIONS
from .base import Found, Setting, Settings, Version, find_command, read_settings
from .cmdline import Command, OptionTable, parse_argv
from .engine import ContextDefault, ContextRead, Engine, IntSetting
from .grammar import MODEL, GrammarError, llamacpp_ctx_size, llamacpp_n_cpu_moe, llamacpp_override_tensor
from .serving import Costs
from .serving import plan as serving_plan
from .startup import line
from .startup import read as read_log

NAME = "llama.cpp"
IMAGE_REPOS = ("llama.cpp", "llama-cpp")
# llama-server's default --ctx-size (common/common.h n_ctx) before 0 came to mean "the model's".
DEFAULT_CONTEXT = 4096

_VALUES = (
    "--model", "--hf-repo", "--hf-file", "--ctx-size", "--n-gpu-layers", "--parallel", "--cache-type-k",
    "--cache-type-v", "--batch-size", "--ubatch-size", "--host", "--port", "--threads", "--alias", "--tensor-split",
    "--split-mode", "--main-gpu", "--flash-attn", "--n-predict", "--rope-scaling", "--chat-template", "--api-key",
    "--model-url", "--lora", "--override-tensor", "--jinja", "--n-cpu-moe",
)
_FLAGS = ("--mlock", "--no-mmap", "--cont-batching", "--embedding", "--embeddings", "--metrics", "--kv-unified",
          "--no-kv-offload", "--jinja", "--verbose", "--cpu-moe")
OPTIONS = OptionTable(
    names=frozenset(_VALUES + _FLAGS),
    aliases={"-m": "--model", "-hf": "--hf-repo", "-hfr": "--hf-repo", "-hff": "--hf-file", "-c": "--ctx-size",
             "-ngl": "--n-gpu-layers", "--gpu-layers": "--n-gpu-layers", "-np": "--parallel",
             "-ctk": "--cache-type-k", "-ctv": "--cache-type-v", "-b": "--batch-size", "-ub": "--ubatch-size",
             "-t": "--threads", "-a": "--alias", "-ts": "--tensor-split", "-sm": "--split-mode", "-fa": "--flash-attn",
             "-mu": "--model-url", "-ot": "--override-tensor", "-kvu": "--kv-unified", "-nkvo": "--no-kv-offload",
             "-cmoe": "--cpu-moe", "-ncmoe": "--n-cpu-moe"},
    flags=frozenset(_FLAGS), abbreviations=False, underscores=False,
)
SETTINGS: Mapping[str, Setting] = {
    "model": Setting(("--model", "--hf-repo", "--model-url"), ("LLAMA_ARG_MODEL", "LLAMA_ARG_HF_REPO")),
    "context": Setting(("--ctx-size",), ("LLAMA_ARG_CTX_SIZE",)),
    "gpu_layers": Setting(("--n-gpu-layers",), ("LLAMA_ARG_N_GPU_LAYERS",)),
    "parallel": Setting(("--parallel",), ("LLAMA_ARG_N_PARALLEL",)),
    "kv_dtype": Setting(("--cache-type-k",), ("LLAMA_ARG_CACHE_TYPE_K",)),
    "batched_tokens": Setting(("--ubatch-size",), ("LLAMA_ARG_UBATCH",)),
    "flash_attention": Setting(("--flash-attn",), ("LLAMA_ARG_FLASH_ATTN",)),
    # Weights kept in host memory (common/arg.cpp: -ot/--override-tensor, -cmoe/--cpu-moe, -ncmoe/--n-cpu-moe).
    "override_tensor": Setting(("--override-tensor",), ("LLAMA_ARG_OVERRIDE_TENSOR",)),
    "cpu_moe": Setting(("--cpu-moe",), ("LLAMA_ARG_CPU_MOE",)),
    "n_cpu_moe": Setting(("--n-cpu-moe",), ("LLAMA_ARG_N_CPU_MOE",)),
}
# common/common.h n_ubatch: the tokens of the worst-case graph llama.cpp reserves its compute buffer for.
UBATCH = 512
F32 = 4
F16 = 2


def read(image: str, commands: Sequence[Command], env: Mapping[str, str],
         pod_commands: Sequence[Command] = ()) -> Settings | None:
    """llama.cpp's settings, or None when the container does not run llama-server."""
    i = find_command(commands, ("llama-server", "server", "llama-cli"))
    if i is not None and (commands[i].program != "server" or any(r in image.lower() for r in IMAGE_REPOS)):
        words = list(commands[i].words[1:])
    elif any(r in image.lower() for r in IMAGE_REPOS) and len(commands) <= 1:
        words = list(commands[0].words) if commands else []
    else:
        return None
    settings = Settings(NAME, None, "image")
    argv = parse_argv(words, OPTIONS)
    read_settings(settings, SETTINGS, argv, env)
    overrides = [v for v in argv.options.get("--override-tensor", []) if v.strip()]
    if len(overrides) > 1:
        # Each -ot appends its items to the same list (common/arg.cpp: parse_tensor_buffer_overrides).
        spelled = argv.spelled.get("--override-tensor", "--override-tensor")
        settings.values["override_tensor"] = Found(",".join(overrides), f"arg {spelled} (every one)")
    hf_file = argv.get("--hf-file")
    if hf_file and "model" in settings.values and "gguf" not in settings.values["model"].value.lower():
        settings.values["model"] = type(settings.values["model"])(
            f"{settings.values['model'].value}/{hf_file}", settings.values["model"].source + " + --hf-file")
    return settings


def gpu_share(gpu_layers: int | None, layers: int) -> float:
    """Share of the layers on the GPU; ``-ngl`` of the layer count or more offloads all (and the output)."""
    if gpu_layers is None or gpu_layers < 0:
        return 1.0
    return min(1.0, gpu_layers / max(layers, 1))


def flash_attention(value: str | None) -> bool | None:
    """``--flash-attn``'s value as on/off; None when unset or ``auto`` (the build and the GPU decide).

    Older builds take ``-fa`` as a bare flag, read here as an empty value: on.
    """
    if value is None:
        return None
    word = value.strip().lower()
    if word in ("", "on", "1", "true", "enabled", "yes"):
        return True
    if word in ("off", "0", "false", "disabled", "no"):
        return False
    return None


def compute_buffer_bytes(spec: ModelSpec | None, req: EstimateRequest, flash: bool) -> float:
    """The compute buffer llama.cpp reserves on a GPU for its worst-case graph: one ubatch over the whole cache.

    src/llama.cpp@b3000:llama_new_context_with_model (src/llama-context.cpp@b5000:llama_context ctor,
    graph_reserve) builds the graph for ``n_ubatch`` tokens (and as many outputs) against every cell of
    the cache and sizes each backend's buffer with ggml_backend_sched_reserve; ggml-alloc reuses a
    tensor's memory once its last consumer ran, so the buffer is the larger of two phases:

    - attention: without flash attention the f32 scores ``n_kv × n_ubatch × n_head`` (the softmax runs
      in place) and the f32 mask ``n_kv × n_ubatch``; with it no scores, an f16 mask only;
    - output: the f32 logits ``n_vocab × n_ubatch``;

    each beside a few f32 ``n_ubatch × n_embd`` activations. ``n_kv`` is the whole ``--ctx-size``
    (every slot's cells: the unified cache), padded to 256 cells with flash attention, 32 without
    (llama_kv_cache_get_padding). Published logs match to the MiB: Mistral 7B at 2048/32768 tokens
    164/2144 MiB, Llama 3 8B at 512/8192 tokens 258.5/560 MiB.

    Read here: the padding rule (``llama_kv_cache_get_padding`` in src/llama.cpp: ``flash_attn ? 256 : 32``).
    Not read here (the llama.cpp mirror exceeds the fetch limit): the graph-reserve code named above; the
    phases are what those published figures reproduce exactly.
    """
    shape = shape_of(spec, req.params)
    ctx = max(req.context * max(req.slots, 1), 1)
    pad = 256 if flash else 32
    n_kv = -(-ctx // pad) * pad
    ubatch = min(req.batched_tokens or UBATCH, ctx)
    hidden = shape.hidden_size
    heads = spec.heads if spec else max(1, hidden // 128)
    vocab = spec.vocab_size if spec else 32000
    row = ubatch * hidden * F32
    if flash:
        attention = n_kv * ubatch * F16 + 4 * row
    else:
        attention = n_kv * ubatch * heads * F32 + n_kv * ubatch * F32 + 4 * row
    output = vocab * ubatch * F32 + row
    return float(max(attention, output))


def plan(req: EstimateRequest, spec: ModelSpec | None) -> Estimate:
    """GGUF weights and the KV of ``--ctx-size`` on the GPU for the offloaded layers, plus the compute buffer.

    Flash attention unset: older builds ran without it, builds since ``-fa auto`` became the default
    (common/arg.cpp, Aug 2025) with it where the GPU has the kernels, so the expected figure prices
    the scores matrix and the low end does not. A partially offloaded model still reserves the same
    graph on the GPU: its attention runs there, and large batches of the CPU layers' matmuls are
    offloaded to it (ggml-backend.cpp offload_op), which only adds to the figure.
    """
    layers = shape_of(spec, req.params).layers
    share = gpu_share(req.gpu_layers, layers)
    compute = compute_buffer_bytes(spec, req, bool(req.flash_attention))
    low_compute = compute_buffer_bytes(spec, req, req.flash_attention is not False)
    notes = [f"llama.cpp: {req.context * max(req.slots, 1)} tokens of KV shared by all slots; {share:.0%} of the "
             f"layers on the GPU; compute buffer {compute / 2**20:.0f} MiB"
             + ("" if req.flash_attention else " (without flash attention: n_ctx × n_ubatch × n_head f32 scores)")]
    if req.host_weights_mib:
        notes.append(f"llama.cpp: {req.host_weights_mib / 1024:.1f} GiB of weights kept in host memory "
                     "(-ot/--cpu-moe/--n-cpu-moe), not on the GPU")
    # With -ngl unset older releases keep every layer on the CPU: the low end cannot assume offload.
    low_share = 0.0 if req.gpu_layers is None else share
    return serving_plan(req, spec, Costs("llama.cpp", activation_bytes_per_token_hidden=0.0, fixed_mib=512.0,
                                         gpu_share=share, low_gpu_share=low_share, high_extra_mib=512.0,
                                         low_factor=0.5, compute_bytes=compute, low_compute_bytes=low_compute),
                        0, notes)


# common/common.h LLM_FFN_EXPS_REGEX: the routed experts' tensors (llama_ffn_exps_cpu_override is this regex on the
# CPU buffer type: --cpu-moe; llm_ffn_exps_block_regex(i) prefixes ``blk\\.i``: --n-cpu-moe N pushes i < N).
FFN_EXPS_REGEX = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"


def gguf_tensors(spec: ModelSpec) -> list[tuple[str, int | None, float]]:
    """The GGUF tensors of a catalog model as llama.cpp names them (src/llama-arch.cpp): (name, block, parameters).

    ``token_embd``, ``output_norm``, ``output`` (absent when tied), and per block ``blk.N.``: ``attn_norm``,
    ``attn_q``/``attn_k``/``attn_v``/``attn_output`` (MLA: ``attn_q_a``, ``attn_q_b``, ``attn_kv_a_mqa``,
    ``attn_kv_b``), ``ffn_norm``, then the dense ``ffn_gate``/``ffn_up``/``ffn_down`` (leading dense blocks), or
    the MoE block's router ``ffn_gate_inp``, routed experts ``ffn_gate_exps``/``ffn_up_exps``/``ffn_down_exps`` and
    shared experts ``ffn_*_shexp``. Sizes come from the config fields the catalog's parameter check uses.
    """
    h = spec.hidden_size
    out: list[tuple[str, int | None, float]] = [("token_embd.weight", None, float(spec.vocab_size * h)),
                                                ("output_norm.weight", None, float(h))]
    if not spec.tie_embeddings:
        out.append(("output.weight", None, float(spec.vocab_size * h)))
    if spec.kv_lora_rank:
        nope = spec.qk_nope_head_dim or spec.head_dim
        rope = spec.qk_rope_head_dim or 0
        v = spec.v_head_dim or spec.head_dim
        qk = spec.heads * (nope + rope)
        queries = [("attn_q_a", h * spec.q_lora_rank), ("attn_q_b", spec.q_lora_rank * qk)] if spec.q_lora_rank \
            else [("attn_q", h * qk)]
        attention: list[tuple[str, int]] = [*queries, ("attn_kv_a_mqa", h * (spec.kv_lora_rank + rope)),
                     ("attn_kv_b", spec.kv_lora_rank * spec.heads * (nope + v)), ("attn_output", spec.heads * v * h)]
    else:
        q = h * spec.heads * spec.head_dim
        kv = h * spec.kv_heads * spec.head_dim
        attention = [("attn_q", q), ("attn_k", kv), ("attn_v", kv), ("attn_output", q)]
    # Hybrids keep attention in ``cache_layers`` of their blocks only: spread over all blocks.
    attention_share = spec.cache_layers / max(spec.layers, 1)
    mats = ("gate", "up", "down") if spec.mlp == "gated" else ("up", "down")
    moe_blocks = (spec.moe_layers if spec.moe_layers is not None else spec.layers - (spec.first_dense_layers or 0)) \
        if spec.experts else 0
    first_moe = spec.layers - moe_blocks
    expert_size = spec.moe_intermediate_size or spec.intermediate_size or 0
    shared_size = spec.shared_expert_intermediate_size or expert_size
    for i in range(spec.layers):
        block = [("attn_norm", h), *((name, n * attention_share) for name, n in attention), ("ffn_norm", h)]
        if i < first_moe:
            block += [(f"ffn_{m}", h * (spec.intermediate_size or 0)) for m in mats]
        else:
            block.append(("ffn_gate_inp", h * (spec.experts or 0)))
            block += [(f"ffn_{m}_exps", (spec.experts or 0) * h * expert_size) for m in mats]
            if spec.shared_experts:
                block += [(f"ffn_{m}_shexp", spec.shared_experts * h * shared_size) for m in mats]
        out += [(f"blk.{i}.{name}.weight", i, float(n)) for name, n in block]
    return out


def host_buffer(buft: str) -> bool:
    """Whether a buffer type keeps its tensors in host memory: ``CPU`` (and its ``CPU_*`` repacked/mapped kinds), and
    a backend's pinned ``*_Host`` (``CUDA_Host``); ``CUDA0``, ``Vulkan1`` … are devices."""
    word = buft.strip().upper()
    return word.startswith("CPU") or word.endswith("_HOST")


def host_overrides(s: Settings) -> list[tuple[str, str]]:
    """The tensor buffer-type overrides the settings add, in llama.cpp's order of precedence (the first match wins).

    common/arg.cpp: ``-ot/--override-tensor <tensor name pattern>=<buffer type>,...`` appends each item to
    ``tensor_buft_overrides``; ``-cmoe/--cpu-moe`` appends ``llm_ffn_exps_cpu_override()``; ``-ncmoe/--n-cpu-moe N``
    appends ``llm_ffn_exps_block_regex(i)`` on the CPU buffer type for i < N. The loader (src/llama-model.cpp,
    ``create_tensor``) gives a tensor the buffer type of the first pattern ``std::regex_search`` finds in its name.
    The flags' relative order is not kept here: ``-ot`` items come first (they are usually written so, and upstream
    says "if you use --override-tensor before these options, your overrides will take priority").
    Unreadable values are left out: llama.cpp refuses to start on them, and leaving them out prices the GPU.
    """
    out: list[tuple[str, str]] = []
    if (text := s.value("override_tensor")) is not None:
        with contextlib.suppress(GrammarError):
            out += llamacpp_override_tensor(text)
    if s.flag("cpu_moe"):
        out.append((FFN_EXPS_REGEX, "CPU"))
    if (n := s.value("n_cpu_moe")) is not None:
        try:
            blocks = llamacpp_n_cpu_moe(n)
        except GrammarError:
            blocks = 0
        out += [(rf"blk\.{i}{FFN_EXPS_REGEX}", "CPU") for i in range(blocks)]
    return out


def host_share(spec: ModelSpec, overrides: Sequence[tuple[str, str]], gpu_layers: int | None) -> float:
    """The share of the model's weights the overrides keep in host memory that would otherwise be on a GPU.

    Only the blocks ``-ngl`` puts on the GPU count (llama.cpp offloads the last ``n_gpu_layers`` blocks, and the
    output with more than the block count; the rest is on the CPU already, and priced so by ``gpu_share``).
    """
    compiled: list[tuple[re.Pattern[str], bool]] = []
    for text, buft in overrides:
        try:
            compiled.append((re.compile(text), host_buffer(buft)))
        except re.error:
            continue  # std::regex would throw at start-up; nothing moves
    if not any(host for _, host in compiled):
        return 0.0
    tensors = gguf_tensors(spec)
    whole = sum(n for _, _, n in tensors)
    on_gpu_from = 0 if gpu_layers is None or gpu_layers < 0 else max(0, spec.layers - gpu_layers)
    moved = 0.0
    for name, block, n in tensors:
        if block is not None and block < on_gpu_from:
            continue
        if block is None and on_gpu_from > 0:
            continue
        for pattern, host in compiled:
            if pattern.search(name):
                moved += n if host else 0.0
                break
    return moved / whole if whole else 0.0


def host_weights_bytes(req: EstimateRequest, spec: ModelSpec | None, s: Settings) -> float:
    """Bytes of the model's weights that ``-ot``/``--cpu-moe``/``--n-cpu-moe`` keep in host memory.

    The moved tensors' share of the parameters at the bytes per parameter the routed experts have, as
    ``weights_per_gpu`` prices them: a GGUF K-quant's average bits per weight (its experts carry the file's mix of
    Q4_K and Q6_K rows), else the precision's own bits (an MXFP4 checkpoint's experts at 4.25 bits while its
    attention stays 16-bit: the file's average would move too much off the GPU).
    """
    if spec is None or not req.params:
        return 0.0
    overrides = host_overrides(s)
    if not overrides:
        return 0.0
    layers = s.number("gpu_layers")
    share = host_share(spec, overrides, int(layers) if layers is not None else None)
    total = weights_bytes(req.params, req.precision, shape_of(spec, req.params), spec)
    p = PRECISIONS[req.precision]
    per_param = total / req.params if p.gguf else p.bits / 8
    return min(total, share * req.params * per_param)


def _default_context(s: Settings, model_context: int, zero_declared: bool) -> ContextDefault:
    # `-c 0` is the model's own context; nothing declared is llama-server's default --ctx-size.
    return ContextDefault(model_context if zero_declared else min(model_context, DEFAULT_CONTEXT),
                          "llama-server default --ctx-size")


def _request_changes(req: EstimateRequest, s: Settings, context_annotated: bool,
                     int_setting: IntSetting) -> dict[str, Any]:
    changes: dict[str, Any] = {}
    if (slots := int_setting(s, "parallel")) and slots > 1 and s.get("context") is not None \
            and not context_annotated:
        # llama-server splits --ctx-size over its --parallel slots: each sequence gets ctx / np tokens.
        changes["context"] = max(1, req.context // slots)
        changes["slots"] = slots
    if s.get("flash_attention") is not None:
        changes["flash_attention"] = flash_attention(s.value("flash_attention"))
    if (host := host_weights_bytes(req, req.spec, s)) > 0:
        changes["host_weights_mib"] = host / MIB
    return changes


def _read_context(text: str, version: Version | None) -> ContextRead:
    """``-c``/``--ctx-size`` as llama.cpp reads it: ``std::stoi`` (a trailing ``k`` is ignored: ``8k`` is 8
    tokens), 0 the model's own context (common/arg.cpp)."""
    n = llamacpp_ctx_size(text)
    if n is MODEL:
        return ContextRead(0)
    note = None
    if not text.strip().lstrip("+-").isdigit():
        note = f"llama.cpp reads it as {n} tokens (std::stoi stops at the first non-digit)"
    return ContextRead(n, note=note)



# Start-up lines (src/llama-model.cpp llm_load_tensors / load_tensors, src/llama-kv-cache*.cpp, src/llama-context.cpp;
# llama_new_context_with_model before 2025). One figure per device (CUDA0, CUDA1 …; ROCm0 on AMD).
_DEV = r"(?:CUDA|ROCm)(?P<dev>\d+)"
LOG_LINES = (
    line("layers_offloaded", r"offloaded {N}/\d+ layers to GPU"),
    line("layers_total", r"offloaded \d+/{N} layers to GPU"),
    line("model_buffer_mib_gpu{dev}", _DEV + r" (?:model )?buffer size =\s*{N} MiB"),
    line("model_buffer_mib_cpu_mapped", r"CPU_Mapped model buffer size =\s*{N} MiB"),
    line("model_buffer_mib_cpu", r"\bCPU (?:model )?buffer size =\s*{N} MiB"),
    line("kv_buffer_mib_gpu{dev}", _DEV + r" KV buffer size =\s*{N} MiB"),
    line("kv_self_mib", r"KV self size\s*=\s*{N} MiB"),
    line("compute_buffer_mib_gpu{dev}", _DEV + r" compute buffer size =\s*{N} MiB"),
    line("host_compute_buffer_mib", r"CUDA_Host compute buffer size =\s*{N} MiB"),
    line("output_buffer_mib_host", r"CUDA_Host\s+output buffer size =\s*{N} MiB"),
)
# Per-device figures that a one-GPU log also names without the index.
_ONE_GPU = {"kv_buffer_mib_gpu": "kv_buffer_mib", "compute_buffer_mib_gpu": "compute_buffer_mib_gpu",
            "model_buffer_mib_gpu": "model_buffer_mib_gpu"}


def parse_log(text: str) -> dict[str, float]:
    """llama.cpp's start-up figures in ``text`` (engines/startup.py)."""
    figures = read_log(text, LOG_LINES)
    for stem, name in _ONE_GPU.items():
        if f"{stem}0" in figures and f"{stem}1" not in figures:
            figures.setdefault(name, figures[f"{stem}0"])
    return figures


ENGINE = Engine(
    read_context=_read_context,
    name=NAME, read=read, plan=plan, settings=SETTINGS, aliases=("llamacpp", "llama-cpp"),
    parse_log=parse_log,
    suggestions={"context": "-c {n}", "kv_fp8": "-ctk q8_0 -ctv q8_0 -fa"},
    zero_context_is_model=True, default_utilization=lambda version, tp: 1.0,
    default_context=_default_context, request_changes=_request_changes, fixed_slots=True,
    fix_adds={"context": ("arg", "--ctx-size", "{n}")},
)
