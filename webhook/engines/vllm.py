"""vLLM: what its users write (flags, env, image) and how it allocates GPU memory, version by version.

Start-up (vllm/v1/worker/gpu_worker.py ``determine_available_memory``, V0 worker.py
``determine_num_available_blocks``): load the weights, run one profile forward pass of
``max_num_batched_tokens`` tokens (and dummy images through a vision encoder), then
KV pool = gpu_memory_utilization × total − weights − peak activation − non-torch memory.
vLLM refuses to start when the pool cannot hold one ``max_model_len`` sequence
(v1/core/kv_cache_utils.py ``check_enough_kv_cache_memory``; V0: "The model's max seq len (X)
is larger than the maximum number of tokens that can be stored in KV cache"). ``--max-num-seqs``
caps concurrency and reserves nothing. Sources and per-version details: docs/estimation.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from ..catalog import ModelSpec
from ..precision import kv_bytes
from ..vram import MIB, Estimate, EstimateRequest, shape_of, weights_bytes
from .base import Found, Setting, Settings, Version, find_command, read_settings, version_of
from .cmdline import Command, OptionTable, parse_argv
from .layers import layout_of

NAME = "vllm"
IMAGE_REPOS = ("vllm",)
# The newest release whose behaviour is modelled; an image without a version tag gets this one.
NEWEST: Version = (0, 11, 0)

# Options of `vllm serve` (vllm/engine/arg_utils.py EngineArgs.add_cli_args and the OpenAI server's
# own), enough to resolve argparse's unambiguous prefixes the way vLLM does.
_VALUE_OPTIONS = (
    "--model", "--tokenizer", "--revision", "--dtype", "--quantization", "--max-model-len",
    "--tensor-parallel-size", "--pipeline-parallel-size", "--data-parallel-size", "--data-parallel-size-local",
    "--gpu-memory-utilization", "--kv-cache-dtype", "--max-num-seqs", "--max-num-batched-tokens",
    "--block-size", "--swap-space", "--cpu-offload-gb", "--kv-cache-memory-bytes", "--limit-mm-per-prompt",
    "--max-seq-len-to-capture", "--max-logprobs", "--served-model-name", "--host", "--port", "--api-key",
    "--download-dir", "--load-format", "--seed", "--chat-template", "--tool-call-parser", "--reasoning-parser",
    "--max-lora-rank", "--max-loras", "--lora-modules", "--rope-scaling", "--rope-theta", "--hf-overrides",
    "--speculative-config", "--num-scheduler-steps", "--distributed-executor-backend", "--max-parallel-loading-workers",
    "--compilation-config", "--override-generation-config", "--mm-processor-kwargs", "--uvicorn-log-level",
    "--tokenizer-mode", "--config", "--generation-config", "--num-gpu-blocks-override", "--preemption-mode",
    "--scheduling-policy", "--worker-cls", "--device", "--task", "--runner", "--kv-transfer-config",
    "--max-num-partial-prefills", "--long-prefill-token-threshold", "--hf-config-path", "--root-path",
    "--ssl-keyfile", "--ssl-certfile", "--allowed-origins", "--middleware", "--response-role",
    "--quantization-param-path",
)
_FLAG_OPTIONS = (
    "--enforce-eager", "--enable-expert-parallel", "--trust-remote-code", "--enable-prefix-caching",
    "--no-enable-prefix-caching", "--enable-chunked-prefill", "--no-enable-chunked-prefill", "--enable-lora",
    "--disable-log-requests", "--disable-log-stats", "--enable-auto-tool-choice", "--disable-custom-all-reduce",
    "--disable-sliding-window", "--skip-tokenizer-init", "--enable-prompt-tokens-details", "--headless",
    "--disable-frontend-multiprocessing", "--enable-reasoning", "--disable-cascade-attn", "--async-scheduling",
    "--enable-sleep-mode", "--enable-dbo", "--enable-eplb", "--no-enable-log-requests", "--enable-log-requests",
)
OPTIONS = OptionTable(
    names=frozenset(_VALUE_OPTIONS + _FLAG_OPTIONS),
    aliases={"-tp": "--tensor-parallel-size", "-pp": "--pipeline-parallel-size", "-dp": "--data-parallel-size",
             "-q": "--quantization", "-O": "--compilation-config", "-dpl": "--data-parallel-size-local"},
    flags=frozenset(_FLAG_OPTIONS),
)
SETTINGS: Mapping[str, Setting] = {
    "model": Setting(("--model",), ()),
    "quantization": Setting(("--quantization",)),
    "dtype": Setting(("--dtype",)),
    "context": Setting(("--max-model-len",)),
    "tp": Setting(("--tensor-parallel-size",)),
    "pp": Setting(("--pipeline-parallel-size",)),
    "dp": Setting(("--data-parallel-size",)),
    "ep": Setting(("--enable-expert-parallel",)),
    "util": Setting(("--gpu-memory-utilization",)),
    "kv_dtype": Setting(("--kv-cache-dtype",)),
    "max_seqs": Setting(("--max-num-seqs",)),
    "batched_tokens": Setting(("--max-num-batched-tokens",)),
    "enforce_eager": Setting(("--enforce-eager",)),
    "cpu_offload_gb": Setting(("--cpu-offload-gb",)),
    "kv_cache_bytes": Setting(("--kv-cache-memory-bytes",)),
    "mm_limit": Setting(("--limit-mm-per-prompt",)),
    "use_v1": Setting((), ("VLLM_USE_V1",)),
}
_MODULES = ("vllm.entrypoints",)


def argv_words(image: str, commands: Sequence[Command]) -> tuple[list[str], str] | None:
    """The words vLLM parses (after ``serve`` / the module) and how it was started, or None."""
    i = find_command(commands, ("vllm",), _MODULES)
    if i is not None:
        words = list(commands[i].words)
        if commands[i].program == "vllm":
            rest = words[1:]
            if rest and rest[0] == "serve":
                return rest[1:], "vllm serve"
            return rest, "vllm"
        j = words.index("-m")
        return words[j + 2 :], f"python -m {words[j + 1]}"
    if any(r in image.lower() for r in IMAGE_REPOS) and len(commands) <= 1:
        # The image's entrypoint (`vllm serve` or the api_server module) receives `args`.
        words = list(commands[0].words) if commands else []
        if not words or words[0].startswith("-") or "/" in words[0] or words[0][:1].isalnum():
            if words and words[0] == "serve":
                words = words[1:]
            return words, "image entrypoint"
    return None


def read(image: str, commands: Sequence[Command], env: Mapping[str, str]) -> Settings | None:
    """vLLM's settings from a container, or None when the container does not run vLLM."""
    found = argv_words(image, commands)
    if found is None:
        return None
    words, how = found
    argv = parse_argv(words, OPTIONS)
    version = version_of(image, IMAGE_REPOS)
    settings = Settings(NAME, version, f"image {image}" if version else "newest known")
    if argv.positionals and not argv.has("--model"):
        settings.put("model", argv.positionals[0], f"arg {how} <model>")
    read_settings(settings, SETTINGS, argv, env)
    return settings


def is_v1(version: Version | None, env_v1: str | None) -> bool:
    """V1 is the default engine from 0.8.0 (vllm/envs.py VLLM_USE_V1), the only one from 0.10.2."""
    v = version or NEWEST
    if v >= (0, 10, 2):
        return True
    if env_v1 is not None:
        return env_v1.strip() not in ("0", "false", "False")
    return v >= (0, 8, 0)


def default_max_num_seqs(version: Version | None, v1: bool, gpu_mib: float | None = None) -> int:
    """vLLM's default ``max_num_seqs``: 256, raised to 1024 on large GPUs by V1's defaults from 0.9."""
    v = version or NEWEST
    if v1 and v >= (0, 9, 0) and gpu_mib is not None and gpu_mib >= 70 * 1024:
        return 1024
    return 256


def default_batched_tokens(version: Version | None, v1: bool, context: int, gpu_mib: float | None = None) -> int:
    """Tokens of the profile forward pass: chunked prefill's budget, or the whole context without it."""
    v = version or NEWEST
    if v1:
        if v >= (0, 9, 0) and gpu_mib is not None and gpu_mib >= 70 * 1024:
            return 8192
        return 2048 if v >= (0, 9, 0) else 8192
    # V0 enables chunked prefill by default only past 32k contexts (arg_utils.py); otherwise a prefill
    # of the whole max_model_len is profiled.
    if context > 32768:
        return 2048
    return max(context, 2048)


# Peak activation bytes per batched token per unit of hidden size in the profile run. Calibrated
# on Llama-3-8B: 1.23 GiB at 8,192 tokens and hidden 4,096 (vLLM V1 log "torch peak memory increase").
ACTIVATION_BYTES_PER_TOKEN_HIDDEN = 40
# Non-torch memory vLLM measures after loading (NCCL, cuBLAS workspaces): 0.1–0.5 GiB on one GPU,
# more with collective buffers under tensor parallelism.
NON_TORCH_MIB = 256
NON_TORCH_TP_MIB = 768
# CUDA graphs: captured after the KV pool is sized (their memory comes out of the 1 − utilization
# headroom) in every modelled version; typical captures take 0.3–1.5 GiB.
CUDA_GRAPH_MIB = 1024


def plan(req: EstimateRequest, spec: ModelSpec | None) -> Estimate:
    """The memory vLLM needs per GPU to start: weights, profile activations, non-torch, one sequence of KV."""
    g = max(req.gpus, 1)
    shape = shape_of(spec, req.params)
    v1 = is_v1(req.engine_version, "0" if req.legacy_engine else None)
    weights = max(0.0, weights_bytes(req.params, req.precision, shape, spec) - req.cpu_offload_gib * 1024**3 * g)
    value_bytes = kv_bytes(req.precision, req.kv_cache_dtype)
    layout = layout_of(spec, shape.kv_elements_per_token, shape.layers, value_bytes)
    compact = compact_windows(req.engine_version)
    kv_seq = layout.bytes_for(req.context, compact=compact)
    kv_total = kv_seq * req.batch  # only a declared reservation (vramgate.io/batch-size) multiplies it
    tp = max(1, g // max(req.pipeline, 1))
    kv_shards = 1 if shape.mla else max(1, min(tp, shape.kv_heads))
    kv_per_gpu = kv_total / kv_shards / max(req.pipeline, 1)
    if req.kv_cache_bytes is not None:
        kv_per_gpu = float(req.kv_cache_bytes)

    seqs = req.max_num_seqs or default_max_num_seqs(req.engine_version, v1)
    tokens = req.batched_tokens or default_batched_tokens(req.engine_version, v1, req.context)
    hidden = shape.hidden_size
    act = ACTIVATION_BYTES_PER_TOKEN_HIDDEN * tokens * hidden / tp
    vocab = spec.vocab_size if spec else 128_000
    sampler = seqs * vocab * 4 * 2 / tp  # fp32 logits of max_num_seqs rows, and a softmax copy
    vision = _vision_profile(req, spec, tokens, seqs, v1) / tp
    non_torch = (NON_TORCH_TP_MIB if tp > 1 else NON_TORCH_MIB) * MIB
    weights_per_gpu = weights / g
    mid = weights_per_gpu + kv_per_gpu + act + sampler + vision + non_torch
    low = weights_per_gpu + kv_per_gpu + 0.5 * (act + vision) + NON_TORCH_MIB * MIB * 0.5
    high = mid + 2.0 * (act + sampler + vision) + CUDA_GRAPH_MIB * MIB * (0 if req.enforce_eager else 1)
    if not shape.known:
        low *= 0.85
        high *= 1.25
    notes = [f"vLLM {'V1' if v1 else 'V0'}: KV pool must hold one {req.context}-token sequence"
             + (f" × {req.batch} reserved" if req.batch > 1 else ""),
             f"profile run of {tokens} batched tokens, {seqs} sequences"]
    if vision:
        notes.append(f"vision encoder profiled: {vision * tp / MIB / 1024:.1f} GiB")
    return Estimate(
        request=req,
        weights_mib=weights / MIB,
        kv_cache_mib=kv_per_gpu * g / MIB,
        overhead_mib=(non_torch + sampler) * g / MIB,
        gradients_mib=0.0,
        optimizer_mib=0.0,
        activations_mib=(act + vision) * g / MIB,
        per_gpu_mib=math.ceil(mid / MIB),
        total_mib=math.ceil(mid * g / MIB),
        kv_bytes_per_token=layout.bytes_per_token(),
        shape_known=shape.known,
        low_per_gpu_mib=math.ceil(low / MIB),
        high_per_gpu_mib=math.ceil(high / MIB),
        engine=f"vllm {'.'.join(map(str, req.engine_version)) if req.engine_version else 'newest'}",
        notes=tuple(notes),
    )


def compact_windows(version: Version | None) -> bool:
    """Whether sliding-window and chunked-local layers keep only their window (V1's hybrid allocator, 0.10+)."""
    return (version or NEWEST) >= (0, 10, 0)


def _vision_profile(req: EstimateRequest, spec: ModelSpec | None, tokens: int, seqs: int, v1: bool) -> float:
    """Activation bytes of the dummy images a multimodal model's profile run pushes through the encoder."""
    image_tokens = int(getattr(spec, "max_image_tokens", 0) or 0) if spec else 0
    vision_params = float(getattr(spec, "vision_params", 0) or 0) if spec else 0.0
    if not image_tokens or not vision_params or req.mm_items == 0:
        return 0.0
    # V1 fills the encoder budget (max(max_num_batched_tokens, one item)); V0 profiles
    # min(max_num_seqs, batched tokens // item tokens) sequences, each with its images.
    per_prompt = req.mm_items or 1
    if v1:
        items = max(1, tokens // image_tokens) if tokens >= image_tokens else 1
    else:
        items = max(1, min(seqs, tokens // image_tokens)) * per_prompt
    # A ViT keeps ~4 patches per merged LLM token; width from its size (~1280 for a 0.6B tower).
    width = max(1024.0, (vision_params / 32 / 12) ** 0.5)
    return float(items * image_tokens * 4 * width * ACTIVATION_BYTES_PER_TOKEN_HIDDEN)


def kv_pool(req: EstimateRequest, spec: ModelSpec | None, gpu_total_mib: float, utilization: float
            ) -> tuple[float, int, float]:
    """vLLM's KV pool on one GPU: (GiB, tokens, maximum concurrency at ``req.context``)."""
    est = plan(req.but(batch=1), spec)
    g = max(req.gpus, 1)
    non_kv = est.per_gpu_mib - est.kv_cache_mib / g
    pool_mib = gpu_total_mib * utilization - non_kv
    if req.kv_cache_bytes is not None:
        pool_mib = req.kv_cache_bytes / MIB
    per_token_per_gpu = est.kv_bytes_per_token / max(1, min(g, shape_of(spec, req.params).kv_heads))
    tokens = int(max(0.0, pool_mib) * MIB / per_token_per_gpu) if per_token_per_gpu else 0
    seq_bytes_per_gpu = est.kv_cache_mib / g * MIB
    concurrency = max(0.0, pool_mib) * MIB / seq_bytes_per_gpu if seq_bytes_per_gpu else 0.0
    return pool_mib / 1024, tokens, concurrency


def found_int(found: Found | None) -> int | None:
    if found is None:
        return None
    try:
        return int(float(found.value))
    except ValueError:
        return None
