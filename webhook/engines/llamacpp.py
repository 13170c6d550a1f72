"""llama.cpp server: its flags and ``LLAMA_ARG_*`` env twins, GGUF weights, layers offloaded, one shared context.

``llama-server`` (tools/server, common/arg.cpp) allocates the KV cache for ``--ctx-size`` tokens in
total, shared by the ``--parallel`` slots; ``--n-gpu-layers`` decides how many layers (and their
KV) live on the GPU; a CUDA allocation that fails at start-up ends the process.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..models.catalog import ModelSpec
from ..models.vram import Estimate, EstimateRequest, shape_of
from .base import Setting, Settings, Version, find_command, read_settings
from .cmdline import Command, OptionTable, parse_argv
from .engine import ContextDefault, ContextRead, Engine, IntSetting
from .grammar import MODEL, llamacpp_ctx_size
from .serving import Costs
from .serving import plan as serving_plan

NAME = "llama.cpp"
IMAGE_REPOS = ("llama.cpp", "llama-cpp")
# llama-server's default --ctx-size (common/common.h n_ctx) before 0 came to mean "the model's".
DEFAULT_CONTEXT = 4096

_VALUES = (
    "--model", "--hf-repo", "--hf-file", "--ctx-size", "--n-gpu-layers", "--parallel", "--cache-type-k",
    "--cache-type-v", "--batch-size", "--ubatch-size", "--host", "--port", "--threads", "--alias", "--tensor-split",
    "--split-mode", "--main-gpu", "--flash-attn", "--n-predict", "--rope-scaling", "--chat-template", "--api-key",
    "--model-url", "--lora", "--override-tensor", "--jinja",
)
_FLAGS = ("--mlock", "--no-mmap", "--cont-batching", "--embedding", "--embeddings", "--metrics", "--kv-unified",
          "--no-kv-offload", "--jinja", "--verbose")
OPTIONS = OptionTable(
    names=frozenset(_VALUES + _FLAGS),
    aliases={"-m": "--model", "-hf": "--hf-repo", "-hfr": "--hf-repo", "-hff": "--hf-file", "-c": "--ctx-size",
             "-ngl": "--n-gpu-layers", "--gpu-layers": "--n-gpu-layers", "-np": "--parallel",
             "-ctk": "--cache-type-k", "-ctv": "--cache-type-v", "-b": "--batch-size", "-ub": "--ubatch-size",
             "-t": "--threads", "-a": "--alias", "-ts": "--tensor-split", "-sm": "--split-mode", "-fa": "--flash-attn",
             "-mu": "--model-url", "-ot": "--override-tensor", "-kvu": "--kv-unified", "-nkvo": "--no-kv-offload"},
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
    read_settings(settings, SETTINGS, parse_argv(words, OPTIONS), env)
    hf_file = parse_argv(words, OPTIONS).get("--hf-file")
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
    # With -ngl unset older releases keep every layer on the CPU: the low end cannot assume offload.
    low_share = 0.0 if req.gpu_layers is None else share
    return serving_plan(req, spec, Costs("llama.cpp", activation_bytes_per_token_hidden=0.0, fixed_mib=512.0,
                                         gpu_share=share, low_gpu_share=low_share, high_extra_mib=512.0,
                                         low_factor=0.5, compute_bytes=compute, low_compute_bytes=low_compute),
                        0, notes)


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


ENGINE = Engine(
    read_context=_read_context,
    name=NAME, read=read, plan=plan, settings=SETTINGS, aliases=("llamacpp", "llama-cpp"),
    suggestions={"context": "-c {n}", "kv_fp8": "-ctk q8_0 -ctv q8_0 -fa"},
    zero_context_is_model=True, default_utilization=lambda version, tp: 1.0,
    default_context=_default_context, request_changes=_request_changes, fixed_slots=True,
    fix_adds={"context": ("arg", "--ctx-size", "{n}")},
)
