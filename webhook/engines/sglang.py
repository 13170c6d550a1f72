"""SGLang: ``launch_server`` flags, and the static memory fraction that must hold the weights and a KV pool.

SGLang reserves ``mem_fraction_static`` × total for weights + KV pool (python/sglang/srt/
model_executor/model_runner.py ``profile_max_num_token``); the token pool is what is left after the
weights and must be positive ("Not enough memory. Please try to increase --mem-fraction-static").
Requests longer than the pool are cut to it rather than refused, so one token of pool suffices to start;
vramgate still asks for one ``context_length`` sequence unless the user says otherwise.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..models.catalog import ModelSpec
from ..models.vram import Estimate, EstimateRequest
from .base import Setting, Settings, Version, find_command, read_settings, version_of
from .cmdline import Command, OptionTable, parse_argv
from .engine import ContextRead, Engine, IntSetting, ParallelRead
from .grammar import GrammarError, sglang_positive_int
from .parallel import Layout, sglang_layout, spanning_layouts
from .serving import Costs
from .serving import plan as serving_plan
from .startup import line
from .startup import read as read_log

NAME = "sglang"
IMAGE_REPOS = ("sglang",)
NEWEST: Version = (0, 5, 7)  # the newest release whose server_args.py was read (docs/engine-sources-others.md)

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
    "--cpu-offload-gb",
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
    "speculative": Setting(("--speculative-algorithm",)),
    "kv_dtype": Setting(("--kv-cache-dtype",)),
    "max_seqs": Setting(("--max-running-requests",)),
    "batched_tokens": Setting(("--chunked-prefill-size",)),
    "enforce_eager": Setting(("--disable-cuda-graph",)),
    # server_args.py ``cpu_offload_gb`` ("How many GBs of RAM to reserve for CPU offloading"): each rank's
    # OffloaderV1 (srt/utils/offloader.py) gets ``cpu_offload_gb * 1024**3`` bytes, so a per-GPU GiB figure.
    "cpu_offload_gb": Setting(("--cpu-offload-gb",)),
}


def read(image: str, commands: Sequence[Command], env: Mapping[str, str],
         pod_commands: Sequence[Command] = ()) -> Settings | None:
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


def default_mem_fraction(tp: int, version: Version | None = None) -> float:
    """``mem_fraction_static`` when unset and the GPU is not known: the tensor-parallel table of server_args.py.

    0.3.0: TP 8 → 0.83; 0.3.6: 0.82; from 0.4.0: 0.81 (0.79 from TP 16, 0.85 from 4, 0.87 from 2, else 0.88).
    From 0.4.6 this table holds for GPUs up to 80 GiB only; on a known GPU :class:`StaticFraction` is the rule.
    """
    if tp >= 16:
        return 0.79
    if tp >= 8:
        v = version or NEWEST
        return 0.83 if v < (0, 3, 6) else 0.82 if v < (0, 4, 0) else 0.81
    if tp >= 4:
        return 0.85
    if tp >= 2:
        return 0.87
    return 0.88


_MIB_PER_GIB = 1024


@dataclass(frozen=True)
class StaticFraction:
    """``mem_fraction_static`` as SGLang sets it when unset, for one server's flags, by the GPU's memory (MiB).

    ``sglang/srt/server_args.py`` (docs/engine-sources-others.md §2.1–2.2 quotes each version):
    - before 0.4.6: the tensor-parallel table (:func:`default_mem_fraction`), whatever the GPU;
    - 0.4.6–0.4.7 (``__post_init__``): the table up to 81,920 MiB, above it ``(gpu − 13 GiB) / gpu`` (0.4.7's
      extra rules for > 96 GiB are not modelled: 0.4.6's is used);
    - 0.4.8–0.5.2: ``(gpu − reserved) / gpu`` rounded to 3 places, reserved by the GPU's class: (2.8 + TP·PP/10)
      GiB below 35 GiB, (9.5 + TP·PP/2) below 90, (12 + TP·PP/2) below 160, 32 GiB above; +2 GiB with
      speculative decoding, +4 GiB with DP attention;
    - 0.5.3 on (``_handle_gpu_memory_settings``): reserved = 512 MiB + 1.5 × max(chunked prefill, 2048) + 2 ×
      cuda_graph_max_bs + TP·PP/8 GiB (+ 3 × cuda_graph_max_bs × DP with DP attention, and 1.5 × more past 300),
      at least 10 GiB on GPUs over 60 GiB, + 6 GiB (STANDALONE) or 2 GiB (other draft models) with speculative
      decoding; chunked prefill and cuda_graph_max_bs are the GPU class's defaults (§2.2).
    The multimodal adjustment (× 0.90 in 0.4.9, ``adjust_mem_fraction_for_vlm`` later) is not applied: it would
    only lower the share, and the estimate must not reject what runs.
    """

    version: Version
    tp: int = 1
    pp: int = 1
    dp: int = 1
    dp_attention: bool = False
    speculative: str | None = None

    def __call__(self, gpu_mib: float) -> float:
        """The fraction on a GPU of ``gpu_mib`` MiB (admission asks it per node: a fleet has few GPU sizes)."""
        return _fraction(self, gpu_mib)

    def reserved_mib(self, gpu_mib: float) -> float | None:
        """MiB SGLang keeps out of the static fraction on this GPU; None where the fraction is the TP table."""
        v, g = self.version, gpu_mib
        if v < (0, 4, 6) or g <= 0:
            return None
        if v < (0, 4, 8):
            return None if g <= 81920 else 13.0 * _MIB_PER_GIB
        parallel = self.tp * self.pp
        if v < (0, 5, 3):
            if g < 35 * _MIB_PER_GIB:
                reserved = 2.8 + parallel / 10
            elif g < 90 * _MIB_PER_GIB:
                reserved = 9.5 + parallel / 2
            elif g < 160 * _MIB_PER_GIB:
                reserved = 12 + parallel / 2
            else:
                reserved = 32.0
            reserved += (2.0 if self.speculative else 0.0) + (4.0 if self.dp_attention else 0.0)
            return reserved * _MIB_PER_GIB
        chunked, graph_bs = self._gpu_defaults(g)
        if self.dp_attention and self.dp > 1:
            chunked //= self.dp
        mib = 512 + max(chunked, 2048) * 1.5 + graph_bs * 2 + parallel / 8 * _MIB_PER_GIB
        if self.dp_attention:
            mib += graph_bs * self.dp * 3 + (graph_bs * self.dp * 1.5 if graph_bs > 300 else 0.0)
        if g > 60 * _MIB_PER_GIB:
            mib = max(mib, 10.0 * _MIB_PER_GIB)
        if self.speculative == "STANDALONE":
            mib += 6 * _MIB_PER_GIB
        elif self.speculative and self.speculative != "NGRAM":
            mib += 2 * _MIB_PER_GIB
        return mib

    def _gpu_defaults(self, gpu_mib: float) -> tuple[int, int]:
        """(chunked_prefill_size, cuda_graph_max_bs) SGLang 0.5.3+ picks for this GPU class (§2.2)."""
        small_tp = self.tp < 4
        if gpu_mib < 20 * _MIB_PER_GIB:
            return 2048, 8
        if gpu_mib < 35 * _MIB_PER_GIB:
            return 2048, (16 if self.version < (0, 5, 5) else 24) if small_tp else 80
        if gpu_mib < 60 * _MIB_PER_GIB:
            return 4096, 32 if small_tp else 160
        if gpu_mib < 160 * _MIB_PER_GIB:
            return 8192, 256 if small_tp else 512
        return 16384, 512

    def usable_mib(self, gpu_mib: float) -> float:
        return gpu_mib * self(gpu_mib)

    def floor_mib(self, per_gpu_mib: float) -> int:
        """The smallest GPU (MiB) whose static fraction holds ``per_gpu_mib`` (the VRAM affinity's floor).

        Within one GPU class the usable share grows with the GPU (but for the fraction's rounding to 3 places);
        across a class boundary it can drop (0.5.3+ reserves at least 10 GiB above 60 GiB), so the first class
        that holds it gives the floor, and a larger GPU of a stingier class may still be too small: the extender
        and admission judge each node exactly.
        """
        return _floor(self, per_gpu_mib)


@functools.lru_cache(maxsize=1024)
def _fraction(rule: StaticFraction, gpu_mib: float) -> float:
    reserved = rule.reserved_mib(gpu_mib)
    if reserved is None:
        return default_mem_fraction(rule.tp, rule.version)
    return round((gpu_mib - reserved) / gpu_mib, 3) if gpu_mib > reserved else 0.0


@functools.lru_cache(maxsize=4096)
def _floor(rule: StaticFraction, per_gpu_mib: float) -> int:
    for lo, hi in _CLASS_BOUNDS:
        reserved = rule.reserved_mib(max(lo, 1.0))
        if reserved is None:
            start = per_gpu_mib / default_mem_fraction(rule.tp, rule.version)
        else:
            # Rounding the fraction to 3 places gains at most 0.0005 of the GPU: no smaller GPU can hold it.
            start = (per_gpu_mib + reserved) / 1.0005
        mib = max(math.floor(lo), math.floor(start), 1)
        while mib < hi and rule.usable_mib(mib) < per_gpu_mib:
            mib += 1
        if mib < hi:
            return mib
    return math.ceil(per_gpu_mib / default_mem_fraction(rule.tp, rule.version))


# GPU classes (MiB) where SGLang's reserve is one figure: the boundaries of every version's rule above.
_CLASS_BOUNDS: tuple[tuple[float, float], ...] = tuple(zip(
    (0.0, 20 * 1024.0, 35 * 1024.0, 60 * 1024.0, 81920.0, 90 * 1024.0, 160 * 1024.0),
    (20 * 1024.0, 35 * 1024.0, 60 * 1024.0, 81920.0, 90 * 1024.0, 160 * 1024.0, math.inf), strict=True))


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


def _layout(s: Settings, p: ParallelRead, int_setting: IntSetting) -> Layout:
    return sglang_layout(p.tp or 1, p.pp, p.dp, s.flag("dp_attention"), int_setting(s, "ep_size"),
                         int_setting(s, "dcp"), p.pod_gpus, p.group, p.moe)


def _rule(version: Version | None, tp: int, pp: int, dp: int, s: Settings) -> StaticFraction:
    return StaticFraction(version or NEWEST, tp, pp, dp, s.flag("dp_attention"), s.value("speculative"))


def _read_context(text: str, version: Version | None) -> ContextRead:
    """``--context-length`` as SGLang's argparse reads it: ``type=int`` in the releases read (server_args.py
    add_cli_args); its newest main reads a human-readable integer (``32k``) instead — admitted with a note, not
    refused, since which release took it is not pinned (docs/engine-grammar.md)."""
    try:
        return ContextRead(sglang_positive_int(text))
    except GrammarError as refused:
        try:
            n = sglang_positive_int(text, human_readable=True)
        except GrammarError:
            raise refused from None
    return ContextRead(n, note=f"SGLang releases that declare --context-length type=int refuse {text.strip()!r}; "
                               f"its newest main reads it as {n} tokens (human_readable_int)")



# Start-up lines (python/sglang/srt/model_executor/model_runner.py, managers/scheduler.py). "GB" is bytes / 2^30.
LOG_LINES = (
    line("avail_mem_before_load_gib", r"Load weight begin\. avail mem={N} GB"),
    line("avail_mem_after_load_gib", r"Load weight end\.[^']*?avail mem={N} GB"),
    line("weights_gib", r"Load weight end\.[^']*?mem usage={N} GB"),
    line("kv_cache_tokens", r"KV Cache is allocated\. #tokens: {N}"),
    line("k_size_gib", r"KV Cache is allocated\.[^']*?K size: {N} GB"),
    line("v_size_gib", r"KV Cache is allocated\.[^']*?V size: {N} GB"),
    line("avail_mem_after_pool_gib", r"Memory pool end\. avail mem={N} GB"),
    # Before 0.3: one line per rank, "[gpu_id=1] Load weight end …".
    line("avail_mem_after_load_gib_gpu{dev}", r"\[gpu_id=(?P<dev>\d+)\] Load weight end\.[^']*?avail mem={N} GB"),
    line("avail_mem_after_pool_gib_gpu{dev}", r"\[gpu_id=(?P<dev>\d+)\] Memory pool end\. avail mem={N} GB"),
    line("cuda_graph_gib", r"Capture cuda graph end\.[^']*?mem usage={N} GB"),
    line("avail_mem_after_graph_gib", r"Capture cuda graph end\.[^']*?avail mem={N} GB"),
    line("max_total_num_tokens", r"max_total_num_tokens={N}"),
    line("max_running_requests", r"max_running_requests={N}"),
    line("context_len", r"context_len={N}"),
    line("available_gpu_mem_gib", r"available_gpu_mem={N} GB"),
)


def parse_log(text: str) -> dict[str, float]:
    """SGLang's start-up figures in ``text`` (engines/startup.py)."""
    return read_log(text, LOG_LINES)


ENGINE = Engine(
    read_context=_read_context,
    name=NAME, read=read, plan=plan, settings=SETTINGS, newest=NEWEST,
    parse_log=parse_log,
    suggestions={"context": "--context-length {n}", "tp": "--tp {n}", "kv_fp8": "--kv-cache-dtype fp8_e5m2",
                 "fp8": "--quantization fp8"},
    tensor_parallel=True, one_gpu_unless="--tp",
    default_utilization=lambda version, tp: default_mem_fraction(tp, version), utilization_rule=_rule,
    layout=_layout, spanning=lambda moe, heads, per_node, pods: spanning_layouts(NAME, moe, heads, per_node, pods),
    fix_adds={"context": ("arg", "--context-length", "{n}"), "tp": ("arg", "--tp", "{n}"),
              "kv_dtype": ("arg", "--kv-cache-dtype", "fp8_e5m2"), "precision": ("arg", "--quantization", "fp8")},
    fix_values={"kv_dtype": "fp8_e5m2"},
)
