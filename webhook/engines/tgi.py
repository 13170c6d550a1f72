"""Text Generation Inference: launcher flags and their env twins, and its warm-up memory rule.

The launcher (launcher/src/main.rs, clap ``#[clap(long, env)]``) reads every flag from the env
variable of the same name in upper snake case. Warm-up (server/text_generation_server/models/
flash_causal_lm.py ``warmup``) runs one prefill of ``max_batch_prefill_tokens`` and sizes the KV
blocks from the memory left (× ``cuda_memory_fraction``); the router then refuses to start when
they cannot hold ``max_total_tokens`` ("Not enough memory to handle N total tokens").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..models.catalog import ModelSpec
from ..models.vram import Estimate, EstimateRequest
from .base import Setting, Settings, Version, find_command, read_settings, version_of
from .cmdline import Command, OptionTable, parse_argv
from .serving import Costs
from .serving import plan as serving_plan

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


def read(image: str, commands: Sequence[Command], env: Mapping[str, str]) -> Settings | None:
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
    """``max_total_tokens`` when unset: 2048 in 1.x–2.x; 3.x derives it from the model and free memory."""
    return 2048 if (version or NEWEST) < (3, 0, 0) else None


def default_prefill_tokens(version: Version | None, context: int) -> int:
    """``max_batch_prefill_tokens`` when unset: 4096 in 2.x; 3.x uses max_input_tokens + 50."""
    return 4096 if (version or NEWEST) < (3, 0, 0) else context


def plan(req: EstimateRequest, spec: ModelSpec | None) -> Estimate:
    """Weights + one prefill of max_batch_prefill_tokens + KV for max_total_tokens (one sequence)."""
    tokens = req.prefill_tokens or default_prefill_tokens(req.engine_version, req.context)
    notes = [f"TGI warm-up prefill of {tokens} tokens; KV must hold max_total_tokens {req.context}"]
    return serving_plan(req, spec, Costs("tgi", activation_bytes_per_token_hidden=40.0, fixed_mib=768.0,
                                         low_factor=0.5), tokens, notes)
