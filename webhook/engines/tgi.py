"""Text Generation Inference: launcher flags and their env twins, and its warm-up memory rule.

The launcher (launcher/src/main.rs, clap ``#[clap(long, env)]``) reads every flag from the env
variable of the same name in upper snake case. Warm-up (server/text_generation_server/models/
flash_causal_lm.py ``warmup``) runs one prefill of ``max_batch_prefill_tokens`` and sizes the KV
blocks from the memory left (× ``cuda_memory_fraction``); the router then refuses to start when
they cannot hold ``max_total_tokens`` ("Not enough memory to handle N total tokens").
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..models.catalog import ModelSpec
from ..models.vram import Estimate, EstimateRequest
from .base import Setting, Settings, Version, find_command, read_settings, version_of
from .cmdline import Command, OptionTable, parse_argv
from .engine import ContextDefault, ContextRead, Engine, IntSetting
from .grammar import tgi_tokens
from .serving import Costs
from .serving import plan as serving_plan
from .startup import line
from .startup import read as read_log

NAME = "tgi"
IMAGE_REPOS = ("text-generation-inference", "huggingface/tgi")
NEWEST: Version = (3, 3, 0)

_VALUES = (
    "--model-id", "--revision", "--num-shard", "--quantize", "--dtype", "--max-input-tokens", "--max-input-length",
    "--max-total-tokens", "--max-batch-prefill-tokens", "--max-batch-total-tokens", "--max-batch-size",
    "--max-concurrent-requests", "--cuda-memory-fraction", "--kv-cache-dtype", "--port", "--hostname",
    "--shard-uds-path", "--master-addr", "--master-port", "--huggingface-hub-cache", "--weights-cache-override",
    "--rope-scaling", "--rope-factor", "--max-best-of", "--max-stop-sequences", "--max-top-n-tokens",
    "--waiting-served-ratio", "--max-waiting-tokens", "--speculate", "--lora-adapters", "--payload-limit",
    "--json-output", "--otlp-endpoint", "--cuda-graphs", "--max-client-batch-size", "--tokenizer-config-path",
    "--prefix-caching", "--attention",
)
_FLAGS = ("--sharded", "--trust-remote-code", "--disable-custom-kernels", "--disable-grammar-support",
          "--enable-prefill-logprobs")
OPTIONS = OptionTable(
    names=frozenset(_VALUES + _FLAGS), aliases={}, flags=frozenset(("--trust-remote-code", "--disable-custom-kernels",
                                                                     "--disable-grammar-support")),
    abbreviations=False, underscores=False,
)
SETTINGS: Mapping[str, Setting] = {
    "model": Setting(("--model-id",), ("MODEL_ID",)),
    "quantization": Setting(("--quantize",), ("QUANTIZE",)),
    "dtype": Setting(("--dtype",), ("DTYPE",)),
    "context": Setting(("--max-total-tokens",), ("MAX_TOTAL_TOKENS",)),
    "input_tokens": Setting(("--max-input-tokens", "--max-input-length"), ("MAX_INPUT_TOKENS", "MAX_INPUT_LENGTH")),
    "prefill_tokens": Setting(("--max-batch-prefill-tokens",), ("MAX_BATCH_PREFILL_TOKENS",)),
    "batch_total_tokens": Setting(("--max-batch-total-tokens",), ("MAX_BATCH_TOTAL_TOKENS",)),
    "tp": Setting(("--num-shard",), ("NUM_SHARD",)),
    "sharded": Setting(("--sharded",), ("SHARDED",)),
    "util": Setting(("--cuda-memory-fraction",), ("CUDA_MEMORY_FRACTION",)),
    "kv_dtype": Setting(("--kv-cache-dtype",), ("KV_CACHE_DTYPE",)),
    "max_seqs": Setting(("--max-batch-size", "--max-concurrent-requests"), ("MAX_BATCH_SIZE",)),
}


def read(image: str, commands: Sequence[Command], env: Mapping[str, str],
         pod_commands: Sequence[Command] = ()) -> Settings | None:
    """TGI's settings from a container, or None when it does not run TGI."""
    i = find_command(commands, ("text-generation-launcher",))
    if i is not None:
        words = list(commands[i].words[1:])
    elif any(r in image.lower() for r in IMAGE_REPOS) and len(commands) <= 1:
        words = list(commands[0].words) if commands else []
    else:
        return None
    version = version_of(image, IMAGE_REPOS)
    settings = Settings(NAME, version, f"image {image}" if version else "newest known")
    return read_settings(settings, SETTINGS, parse_argv(words, OPTIONS), env)


def default_context(version: Version | None) -> int | None:
    """``max_total_tokens`` when unset: 2048 in 1.x, min(model, 4096) in 2.0–2.4.0; then sized from free memory.

    launcher/src/main.rs@v1.4.5 (clap default 2048); @v2.0.0 ``max_default = 4096`` caps the model's
    positions; @v2.4.1 and 3.x leave it to the server's warm-up. The caller caps it at the model's context.
    """
    v = version or NEWEST
    if v < (2, 0, 0):
        return 2048
    return 4096 if v < (2, 4, 1) else None


def default_input_tokens(version: Version | None, context: int, spec: ModelSpec | None) -> int:
    """``max_input_tokens`` when unset: 1024 before 2.0; min(model positions, 4096) − 1 in 2.0–2.4.0; then context − 1.

    launcher/src/main.rs@v1.4.5 (clap default 1024); @v2.0.4 ``max_position_embeddings - 1`` with the
    positions capped at 4096 (``max_default``); @v2.4.1 and 3.x leave it to the server, which takes
    ``max_total_tokens - 1`` (models/flash_causal_lm.py@v3.2.1 ``warmup``).
    """
    v = version or NEWEST
    if v < (2, 0, 0):
        return min(1024, context - 1)
    if v < (2, 4, 1):
        positions = min(spec.context if spec else 4096, 4096)
        return max(1, min(positions - 1, context - 1))
    return max(1, context - 1)


def default_prefill_tokens(version: Version | None, input_tokens: int) -> int:
    """``max_batch_prefill_tokens`` when unset: 4096 before 2.0, ``max_input_tokens + 50`` in 2.0–2.4.0.

    launcher/src/main.rs@v1.4.5 (clap default 4096), @v2.0.4 (``max_input_tokens + 50``). 2.4.1 takes
    min(4096, positions); 3.x a compute-optimal size (4096 when it cannot tell; 8000 for Gemma 3) capped by
    free memory (launcher/src/main.rs@v3.2.1 ``compute_optimal``/``vram_maximum``): both priced at one
    sequence, ``max_input_tokens + 1``, as before.
    """
    v = version or NEWEST
    if v < (2, 0, 0):
        return 4096
    if v < (2, 4, 1):
        return input_tokens + 50
    return input_tokens + 1


@dataclass(frozen=True)
class Warmup:
    """The batch the router sends to warm up (backends/v3/src/client/grpc_client.rs@v3.2.1 ``warmup``)."""

    tokens: int  # max_batch_prefill_tokens, split into requests of at most max_input_tokens
    longest: int  # the longest request's prompt
    requests: int
    kv_tokens: int  # tokens of KV blocks the batch holds: each request reserves max_total_tokens since 1.1.1


def warmup_batch(req: EstimateRequest, spec: ModelSpec | None) -> Warmup:
    """The warm-up batch: requests of ``max_input_tokens`` until ``max_batch_prefill_tokens`` are sent."""
    inputs = req.input_tokens or default_input_tokens(req.engine_version, req.context, spec)
    tokens = req.prefill_tokens or default_prefill_tokens(req.engine_version, inputs)
    longest = max(1, min(inputs, tokens))
    requests = -(-tokens // longest)
    # router/client/src/client.rs@v1.1.1 ``warmup``: max_new_tokens = max_total_tokens - truncate (2 before).
    per_request = req.context if (req.engine_version or NEWEST) >= (1, 1, 1) else longest + 2
    return Warmup(tokens, longest, requests, max(req.context, requests * per_request))


def prefill_logits_bytes(req: EstimateRequest, spec: ModelSpec | None, warm: Warmup) -> tuple[float, float]:
    """Before 3.0 the warm-up keeps every prompt token's logits and their log-softmax: (certain, expected) bytes.

    The router asks for ``prefill_logprobs`` (router/client/src/client.rs@v2.0.4 ``warmup``), so the server
    runs the head over all tokens and takes ``torch.log_softmax(out, -1)`` beside them
    (models/flash_causal_lm.py@v2.0.4 ``generate_token``): two tokens × vocabulary tensors in the 16-bit
    model dtype. Sharded, the head gathers the whole vocabulary on every GPU and returns it transposed
    (layers/tensor_parallel.py@v2.0.4, utils/layers.py@v1.0.0 ``TensorParallelHead.forward``), so the
    softmax first makes a contiguous copy: a third tensor, expected but left out of the low end. 3.0 drops
    prefill logprobs unless ``REQUEST_LOGPROBS`` is set (server/text_generation_server/models/globals.py@v3.0.0).
    """
    if spec is None or (req.engine_version or NEWEST) >= (3, 0, 0):
        return 0.0, 0.0
    one = float(warm.tokens) * spec.vocab_size * 2
    return 2 * one, (3 if req.gpus > 1 else 2) * one


def dense_mask_bytes(req: EstimateRequest, spec: ModelSpec | None, warm: Warmup) -> tuple[float, float]:
    """Gemma 3 on TGI 3.2.x: the warm-up image turns prefill attention into SDPA with a dense mask.

    The first warm-up request carries an image (backends/v3/src/client/grpc_client.rs@v3.2.1 ``warmup``);
    then models/custom_modeling/flash_gemma3_modeling.py@v3.2.1 builds a [batch, 1, S, S] mask in the
    model dtype (``get_attention_mask``) and calls ``F.scaled_dot_product_attention`` on padded
    [batch, heads, S, S] inputs; with a float mask and ``enable_gqa`` that is expected to run PyTorch's math
    kernel, which holds the scores and their softmax. (certain, expected) bytes: the mask is certain, the
    kernel choice is not, so the scores stay out of the low end. 3.3.0 moved Gemma 3 prefill to
    FlashInfer (#3167).
    """
    v = req.engine_version or NEWEST
    if spec is None or spec.family != "gemma3" or not spec.vision_params or not (3, 2, 0) <= v < (3, 3, 0):
        return 0.0, 0.0
    heads = max(1, spec.heads // max(req.gpus, 1))
    square = float(warm.requests) * warm.longest * warm.longest * 2
    return square, square * (1 + 2 * heads)


def plan(req: EstimateRequest, spec: ModelSpec | None) -> Estimate:
    """Weights + the warm-up batch's KV + one prefill of max_batch_prefill_tokens, its logits and masks."""
    warm = warmup_batch(req, spec)
    notes = [f"TGI warm-up prefill of {warm.tokens} tokens in {warm.requests} request(s); KV must hold "
             f"max_total_tokens {req.context} per request"]
    logits_low, logits = prefill_logits_bytes(req, spec, warm)
    mask_low, mask = dense_mask_bytes(req, spec, warm)
    if logits + mask:
        notes.append(f"warm-up prefill logits {logits / 2**30:.1f} GiB, attention mask and scores "
                     f"{mask / 2**30:.1f} GiB per GPU")
    batch = max(req.batch, -(-warm.kv_tokens // max(req.context, 1)))
    base = serving_plan(req.but(batch=batch), spec, Costs("tgi", activation_bytes_per_token_hidden=40.0,
                                                          fixed_mib=768.0, low_factor=0.5), warm.tokens, notes)
    return with_warmup(base, req, logits_low + mask_low, logits + mask)


def with_warmup(est: Estimate, req: EstimateRequest, low: float, mid: float) -> Estimate:
    """The estimate with warm-up tensors per GPU: ``low`` bytes certain to coexist, ``mid`` expected."""
    low_mib, mid_mib = low / 2**20, mid / 2**20
    g = max(req.gpus, 1)
    return replace(est, request=req, activations_mib=est.activations_mib + mid_mib * g,
                   per_gpu_mib=est.per_gpu_mib + math.ceil(mid_mib), total_mib=est.total_mib + math.ceil(mid_mib * g),
                   low_per_gpu_mib=est.low_per_gpu_mib + math.floor(low_mib),
                   high_per_gpu_mib=est.high_per_gpu_mib + math.ceil(mid_mib))


def wiggle_room(version: Version | None) -> float:
    """The share TGI keeps of the memory it finds free after the warm-up prefill (the rest: CUDA graphs, slack).

    models/flash_causal_lm.py ``warmup``: none before 1.4.1, ``free_memory * 0.95`` 1.4.1–2.2; then
    ``TGI_WIGGLE_ROOM`` (models/globals.py): 0.95 @v2.3.0, 0.90 @v2.4.0, 0.95 @v3.0.0, 0.93 @v3.1.0,
    0.90 @v3.3.0.
    """
    v = version or NEWEST
    for since, share in (((3, 3, 0), 0.90), ((3, 1, 0), 0.93), ((3, 0, 0), 0.95), ((2, 4, 0), 0.90),
                         ((1, 4, 1), 0.95)):
        if v >= since:
            return share
    return 1.0


def pool_tokens(est: Estimate, token_bytes: float, gpu_mib: float, fraction: float) -> int:
    """"Setting max batch total tokens to N": KV blocks from the memory left after the warm-up peak.

    models/flash_causal_lm.py@v2.0.4 ``warmup``: the memory free (× ``cuda_memory_fraction``) after the
    prefill, with the allocator still holding its peak, less the wiggle room, plus the blocks the warm-up
    batch held. ``token_bytes``: one token's KV on one GPU.
    """
    if token_bytes <= 0:
        return 0
    usable = gpu_mib * fraction
    room = wiggle_room(est.request.engine_version)
    # 3.x takes the room off the whole card (``get_free_memory(device, MEMORY_FRACTION * TGI_WIGGLE_ROOM)``
    # @v3.0.0), 2.x and earlier off what is free.
    if (est.request.engine_version or NEWEST) >= (3, 0, 0):
        free = max(0.0, usable * room - est.per_gpu_mib)
    else:
        free = max(0.0, usable - est.per_gpu_mib) * room
    return int((free + est.kv_cache_mib / max(est.request.gpus, 1)) * 2**20 / token_bytes)


def _default_context(s: Settings, model_context: int, zero_declared: bool) -> ContextDefault:
    default = default_context(s.version)
    if default is not None:
        return ContextDefault(min(model_context, default),
                              f"TGI {('.'.join(map(str, s.version)) if s.version else '')} default")
    return ContextDefault(min(model_context, 4096),
                          "TGI 3 sizes max_total_tokens to memory; priced at min(model, 4096)")


def _request_changes(req: EstimateRequest, s: Settings, context_annotated: bool,
                     int_setting: IntSetting) -> dict[str, Any]:
    changes: dict[str, Any] = {}
    if (prefill := int_setting(s, "prefill_tokens")) is not None:
        changes["prefill_tokens"] = prefill
    if (inputs := int_setting(s, "input_tokens")) is not None:
        changes["input_tokens"] = inputs
    return changes


def _read_context(text: str, version: Version | None) -> ContextRead:
    """``--max-total-tokens`` (``MAX_TOTAL_TOKENS``) as clap reads it: a Rust ``usize`` (launcher/src/main.rs)."""
    return ContextRead(tgi_tokens(text))



# Start-up lines (router/src/server.rs, backends/v3: after the warm-up, the token budget it found room for).
LOG_LINES = (line("max_batch_total_tokens", r"Setting max batch total tokens to {N}"),)


def parse_log(text: str) -> dict[str, float]:
    """TGI's start-up figures in ``text`` (engines/startup.py)."""
    return read_log(text, LOG_LINES)


ENGINE = Engine(
    read_context=_read_context,
    name=NAME, read=read, plan=plan, settings=SETTINGS, newest=NEWEST,
    parse_log=parse_log,
    aliases=("text-generation-inference", "huggingface-tgi"),
    suggestions={"context": "--max-total-tokens {n} (MAX_TOTAL_TOKENS)", "tp": "--num-shard {n} (NUM_SHARD)",
                 "kv_fp8": "--kv-cache-dtype fp8_e5m2", "fp8": "--quantize fp8"},
    tensor_parallel=True,
    # cuda_memory_fraction 1.0, less the blocks TGI keeps back in warm-up
    default_utilization=lambda version, tp: 0.98,
    default_context=_default_context, request_changes=_request_changes,
    fix_adds={"context": ("arg", "--max-total-tokens", "{n}"), "tp": ("arg", "--num-shard", "{n}"),
              "kv_dtype": ("arg", "--kv-cache-dtype", "fp8_e5m2"), "precision": ("arg", "--quantize", "fp8")},
    fix_env_twins={"context": ("env", "MAX_TOTAL_TOKENS", "{n}"), "tp": ("env", "NUM_SHARD", "{n}"),
                   "kv_dtype": ("env", "KV_CACHE_DTYPE", "fp8_e5m2"), "precision": ("env", "QUANTIZE", "fp8")},
    fix_values={"kv_dtype": "fp8_e5m2"},
)
