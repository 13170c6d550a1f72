"""SGLang: ``launch_server`` flags, and the static memory fraction that must hold the weights and a KV pool.

SGLang reserves ``mem_fraction_static`` × total for weights + KV pool (python/sglang/srt/
model_executor/model_runner.py ``profile_max_num_token``); the token pool is what is left after the
weights and must be positive ("Not enough memory. Please try to increase --mem-fraction-static").
Requests longer than the pool are cut to it rather than refused, so one token of pool suffices to start;
vramgate still asks for one ``context_length`` sequence unless the user says otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..models.catalog import ModelSpec
from ..models.vram import Estimate, EstimateRequest
from .base import Setting, Settings, Version, find_command, read_settings, version_of
from .cmdline import Command, OptionTable, parse_argv
from .serving import Costs
from .serving import plan as serving_plan

NAME = "sglang"
IMAGE_REPOS = ("sglang",)
NEWEST: Version = (0, 5, 0)

_VALUES = (
    "--model-path", "--tokenizer-path", "--host", "--port", "--dtype", "--quantization", "--kv-cache-dtype",
    "--context-length", "--mem-fraction-static", "--max-running-requests", "--max-total-tokens",
    "--chunked-prefill-size", "--max-prefill-tokens", "--tp-size", "--dp-size", "--ep-size", "--pp-size",
    "--nnodes", "--node-rank", "--dist-init-addr", "--served-model-name", "--chat-template", "--attention-backend",
    "--cuda-graph-max-bs", "--schedule-policy", "--revision", "--load-format", "--trust-remote-code",
    "--speculative-algorithm", "--tool-call-parser", "--reasoning-parser", "--api-key", "--random-seed",
    "--log-level", "--grammar-backend", "--lora-paths", "--max-loras-per-batch", "--moe-a2a-backend",
    "--deepep-mode", "--moe-dense-tp-size", "--moe-dp-size", "--ep-num-redundant-experts", "--dcp-size",
    "--disaggregation-mode", "--disaggregation-ib-device", "--disaggregation-transfer-backend", "--page-size",
    "--cuda-graph-bs", "--moe-runner-backend", "--init-expert-location", "--decode-log-interval",
)
_FLAGS = ("--enable-dp-attention", "--disable-cuda-graph", "--enable-torch-compile", "--disable-radix-cache",
          "--trust-remote-code", "--enable-metrics", "--enable-ep-moe", "--enable-mixed-chunk", "--skip-server-warmup",
          "--enable-deepep-moe", "--enable-dp-lm-head", "--enable-two-batch-overlap", "--enable-eplb")
OPTIONS = OptionTable(
    names=frozenset(_VALUES + _FLAGS),
    # python/sglang/srt/server_args.py add_cli_args: each size has its long form and its -size twin.
    aliases={"--model": "--model-path", "--tp": "--tp-size", "--dp": "--dp-size", "--ep": "--ep-size",
             "--pp": "--pp-size", "--tensor-parallel-size": "--tp-size", "--data-parallel-size": "--dp-size",
             "--expert-parallel-size": "--ep-size", "--pipeline-parallel-size": "--pp-size",
             "--decode-context-parallel-size": "--dcp-size"},
    flags=frozenset(_FLAGS),
)
SETTINGS: Mapping[str, Setting] = {
    "model": Setting(("--model-path",)),
    "quantization": Setting(("--quantization",)),
    "dtype": Setting(("--dtype",)),
    "context": Setting(("--context-length",)),
    "tp": Setting(("--tp-size",)),
    "dp": Setting(("--dp-size",)),
    "pp": Setting(("--pp-size",)),
    "nnodes": Setting(("--nnodes",)),
    "ep_size": Setting(("--ep-size",)),
    "dp_attention": Setting(("--enable-dp-attention",)),
    "a2a": Setting(("--moe-a2a-backend",)),
    "deepep": Setting(("--enable-deepep-moe",)),
    "util": Setting(("--mem-fraction-static",)),
    "kv_dtype": Setting(("--kv-cache-dtype",)),
    "max_seqs": Setting(("--max-running-requests",)),
    "batched_tokens": Setting(("--chunked-prefill-size",)),
    "enforce_eager": Setting(("--disable-cuda-graph",)),
}


def read(image: str, commands: Sequence[Command], env: Mapping[str, str]) -> Settings | None:
    """SGLang's settings from a container, or None when it does not run SGLang."""
    # NVIDIA Dynamo's SGLang worker (`python3 -m dynamo.sglang`) takes SGLang's server args.
    i = find_command(commands, ("sglang",), ("sglang.launch_server", "dynamo.sglang"))
    if i is None:
        return None
    words = list(commands[i].words)
    if commands[i].program == "sglang":
        words = words[2:] if len(words) > 1 and words[1] == "serve" else words[1:]
    else:
        words = words[words.index("-m") + 2 :]
    version = None if "dynamo" in image.lower() else version_of(image, IMAGE_REPOS)
    settings = Settings(NAME, version, f"image {image}" if version else "newest known")
    return read_settings(settings, SETTINGS, parse_argv(words, OPTIONS), env)


def default_mem_fraction(tp: int, gpu_mib: float | None = None) -> float:
    """``mem_fraction_static`` when unset (server_args.py): 0.88 on one GPU down to 0.79 at TP 8 and beyond."""
    if tp >= 16:
        return 0.79
    if tp >= 8:
        return 0.81
    if tp >= 4:
        return 0.85
    if tp >= 2:
        return 0.87
    return 0.88


# The pool is ``F0 × mem_fraction_static − weights``, F0 being the memory free once torch.distributed is up
# (model_runner.py ``profile_max_num_token``: rest = F1 − F0·(1 − mfs), F1 = F0 − weights), so the CUDA context
# and NCCL's buffers taken before F0 is read cost their share of the fraction too. Logged F0: 21.63 of 22.05 GiB
# (L4, TP 4, 0.4.3.post4) and 22.76 of 23.58 GiB (RTX 3090, TP 1): 0.42–0.82 GiB; vramgate charges the 512 MiB
# CUDA context at the default fraction 0.88 (tests/fixtures/accuracy/others.yaml; a fitted constant).
CONTEXT_SHARE_MIB = 512 * 0.88


def plan(req: EstimateRequest, spec: ModelSpec | None) -> Estimate:
    """Weights + a KV pool of one ``context_length`` sequence inside the static fraction."""
    notes = [f"SGLang static memory: weights + a KV pool of {req.context} tokens"]
    # Activations and CUDA graphs live outside the static fraction; none is charged against it.
    return serving_plan(req, spec, Costs("sglang", activation_bytes_per_token_hidden=0.0,
                                         fixed_mib=CONTEXT_SHARE_MIB,
                                         low_factor=0.0, compact_windows=True,
                                         low_kv_share=0.0), 0, notes)
