"""TensorRT-LLM: ``trtllm-serve``, Dynamo's ``dynamo.trtllm`` worker, their LLM API YAML, and its free-memory KV pool.

The memory model (docs/engine-sources-trtllm.md; the PyTorch backend, the default from 1.0):

- Weights per rank: TP splits attention and dense layers, MoE experts go over the expert-parallel ranks
  (``moe_tp × moe_ep = tp``, so an expert's bytes are 1/TP either way); with ``enable_attention_dp`` the
  attention (and the embeddings) is replicated on every rank and only the experts are split (§1.3).
- Profiling: ``tensorrt_llm/_torch/pyexecutor/_util.py:KvCacheCreator`` runs dummy requests of
  ``max_num_tokens`` (default 8192, ``tensorrt_llm/commands/serve.py@00209af149e7:serve`` via BuildConfig;
  repeated per rank under attention DP: ``_create_dummy_context_requests``) through the real executor, so the
  peak P holds weights, activations at ``max_num_tokens``, NCCL and CUDA graphs (``estimate_max_tokens`` /
  ``configure_kv_cache_capacity``; §1.1 items 1–3).
- The KV pool is ``free_gpu_memory_fraction × (total − P)`` (default 0.9, ``tensorrt_llm/llmapi/
  llm_args.py:KvCacheConfig``; the printed figures satisfy K = F × (T − P + M), §1.1 item 3), capped by
  ``kv_cache_config.max_tokens`` (the smaller wins, item 4).
- When that pool cannot hold one ``max_seq_len`` sequence the PyTorch backend lowers ``max_seq_len`` to what
  fits ("Adjusted max_seq_len to 8224", §1.1 pricing consequence) rather than failing, unless
  ``--fail_fast_on_attention_window_too_large``.

So the fraction is a share of the memory *free after* weights and activations, never of the whole GPU:
``P + F × (T − P) ≤ T`` always holds, and the pod starts wherever ``T − P`` leaves a few KV blocks. vramgate
therefore keeps the fraction out of the core's ``util`` (a share of the whole GPU, which would turn F = 0.5
into "half the card"): the usable share is the whole GPU (1.0), the low end is weights + the certain part of
the activations + a minimal pool, and the middle asks for one ``max_seq_len`` sequence at F = 0.9 (KV / F).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..models.catalog import ModelSpec
from ..models.vram import MIB, Estimate, EstimateRequest, priced, shape_of, weights_bytes, weights_per_gpu
from ..units.declaration import quant_in_model_id
from ..units.precision import kv_bytes
from .base import Found, Setting, Settings, Version, read_settings, version_of, yaml_mapping
from .cmdline import Command, OptionTable, parse_argv
from .engine import ContextDefault, Engine, IntSetting, ParallelRead
from .layers import layout_of
from .parallel import Layout
from .startup import line
from .startup import read as read_log

NAME = "trtllm"
IMAGE_REPOS = ("tensorrt-llm",)
NEWEST: Version = (1, 2, 0)
RELEASE_IMAGE = "tensorrt-llm/release"

# serve.py: max_num_tokens from BuildConfig (8192); free_gpu_memory_fraction 0.9; tokens_per_block 32 (§1.2).
DEFAULT_MAX_NUM_TOKENS = 8192
DEFAULT_FREE_FRACTION = 0.9
TOKENS_PER_BLOCK = 32
# The least pool the low end asks for: a few blocks (TRT-LLM shortens max_seq_len to the pool it gets).
MIN_POOL_TOKENS = 4 * TOKENS_PER_BLOCK
# Activations of the profiling forward per token and hidden unit (a fitted constant like serving.Costs').
ACTIVATION_BYTES_PER_TOKEN_HIDDEN = 24.0
# CUDA context, NCCL, CUDA graphs and runtime buffers per GPU: "Memory used outside torch (e.g., NCCL and
# CUDA graphs)" (§1.1 item 3); not read per version, so the low end keeps only half.
FIXED_MIB = 1536.0
LOW_SHARE = 0.5

_VALUES = (
    "--model-path", "--served-model-name", "--tokenizer", "--backend", "--max-beam-width", "--max-batch-size",
    "--max-num-tokens", "--max-seq-len", "--tp-size", "--pp-size", "--cp-size", "--ep-size", "--cluster-size",
    "--gpus-per-node", "--kv-cache-free-gpu-memory-fraction", "--num-postprocess-workers", "--revision",
    "--extra-llm-api-options", "--server-role", "--host", "--port", "--log-level", "--custom-tokenizer",
    "--custom-module-dirs", "--reasoning-parser", "--tool-parser", "--metadata-server-config-file",
    "--otlp-traces-endpoint", "--disagg-cluster-uri", "--media-io-kwargs", "--chat-template",
    # Dynamo's dynamo.trtllm (flags as its recipes use them; the parser itself not read, §3.3).
    "--disaggregation-mode", "--kv-block-size", "--dyn-reasoning-parser", "--dyn-tool-call-parser",
    "--discovery-backend", "--endpoint", "--modality", "--migration-limit", "--kv-cache-dtype",
)
_FLAGS = ("--trust-remote-code", "--fail-fast-on-attention-window-too-large", "--enable-chunked-prefill",
          "--publish-events-and-metrics")
OPTIONS = OptionTable(
    names=frozenset(_VALUES + _FLAGS),
    # serve.py click options and their aliases (§3.1); Dynamo's dashed spellings (§3.3).
    aliases={"--tensor-parallel-size": "--tp-size", "--pipeline-parallel-size": "--pp-size",
             "--context-parallel-size": "--cp-size", "--moe-expert-parallel-size": "--ep-size",
             "--expert-parallel-size": "--ep-size", "--moe-cluster-parallel-size": "--cluster-size",
             "--free-gpu-memory-fraction": "--kv-cache-free-gpu-memory-fraction",
             "--config": "--extra-llm-api-options", "--extra-engine-args": "--extra-llm-api-options",
             "--model": "--model-path"},
    flags=frozenset(_FLAGS),
    abbreviations=False,  # click takes no prefixes
)
SETTINGS: Mapping[str, Setting] = {
    "model": Setting(("--model-path",)),
    "served_name": Setting(("--served-model-name",)),
    "tp": Setting(("--tp-size",)),
    "pp": Setting(("--pp-size",)),
    "ep_size": Setting(("--ep-size",)),
    "context": Setting(("--max-seq-len",)),
    "free_fraction": Setting(("--kv-cache-free-gpu-memory-fraction",)),
    "max_seqs": Setting(("--max-batch-size",)),
    "batched_tokens": Setting(("--max-num-tokens",)),
    "backend": Setting(("--backend",)),
    "config": Setting(("--extra-llm-api-options",)),
    "kv_dtype": Setting(("--kv-cache-dtype",)),
}

# LlmArgs keys (tensorrt_llm/llmapi/llm_args.py, §3.2) → settings; YAML nested under these sections.
_TOP = {"tensor_parallel_size": "tp", "pipeline_parallel_size": "pp", "moe_expert_parallel_size": "ep_size",
        "moe_tensor_parallel_size": "moe_tp", "enable_attention_dp": "dp_attention", "max_batch_size": "max_seqs",
        "max_num_tokens": "batched_tokens", "max_seq_len": "context", "backend": "backend"}
_SECTIONS: Mapping[str, Mapping[str, str]] = {
    "kv_cache_config": {"free_gpu_memory_fraction": "free_fraction", "max_tokens": "kv_max_tokens",
                        "dtype": "kv_dtype", "tokens_per_block": "tokens_per_block",
                        "max_gpu_total_bytes": "kv_max_bytes"},
    "build_config": {"max_batch_size": "max_seqs", "max_num_tokens": "batched_tokens", "max_seq_len": "context"},
    "cuda_graph_config": {"max_batch_size": "cuda_graph_bs"},
    "speculative_config": {"decoding_type": "speculative", "max_draft_len": "draft_len"},
}
# Children the heredoc reader knows per section (indentation is lost on the way through the shell reader).
_CHILDREN: Mapping[str, frozenset[str]] = {
    "kv_cache_config": frozenset({"free_gpu_memory_fraction", "max_tokens", "dtype", "tokens_per_block",
                                  "max_gpu_total_bytes", "enable_block_reuse", "event_buffer_max_size",
                                  "max_attention_window", "sink_token_length", "host_cache_size",
                                  "enable_partial_reuse", "copy_on_partial_reuse"}),
    "cuda_graph_config": frozenset({"max_batch_size", "batch_sizes", "enable_padding"}),
    "build_config": frozenset({"max_batch_size", "max_num_tokens", "max_seq_len", "max_beam_width"}),
    "speculative_config": frozenset({"decoding_type", "max_draft_len", "speculative_model_dir",
                                     "num_nextn_predict_layers", "eagle3_one_model"}),
}
_TOP_LEVEL = frozenset(_TOP) | frozenset(_SECTIONS) | frozenset({
    "disable_overlap_scheduler", "enable_chunked_prefill", "trust_remote_code", "print_iter_log",
    "stream_interval", "moe_config", "attention_dp_config", "cache_transceiver_config", "return_perf_metrics",
    "enable_iter_perf_stats", "enable_iter_req_stats", "perf_metrics_max_requests", "enable_lm_head_tp_in_adp",
    "moe_load_balancer", "enable_autotuner", "load_format", "num_postprocess_workers", "scheduler_config"})


def _program_words(cmd: Command) -> tuple[list[str], str] | None:
    """The words after the TRT-LLM program in one command, and how it was run; None when it runs none."""
    words = list(cmd.words)
    for i, w in enumerate(words):
        base = w.rsplit("/", 1)[-1]
        if base == "trtllm-serve":
            rest = words[i + 1:]
            if rest and rest[0] == "serve":
                rest = rest[1:]
            return rest, "trtllm-serve"
        if w == "-m" and i + 1 < len(words) and words[i + 1] == "dynamo.trtllm" and \
                any(p.rsplit("/", 1)[-1].startswith("python") for p in words[:i]):
            return words[i + 2:], "dynamo.trtllm"
    if any(w.rsplit("/", 1)[-1] == "trtllm-llmapi-launch" for w in words):
        return [], "trtllm-llmapi-launch"
    return None


def read(image: str, commands: Sequence[Command], env: Mapping[str, str],
         pod_commands: Sequence[Command] = ()) -> Settings | None:
    """TensorRT-LLM's settings from a container, or None when it does not run TensorRT-LLM."""
    found = next(((i, hit) for i, c in enumerate(commands) if (hit := _program_words(c)) is not None), None)
    lowered = image.lower()
    if found is None and RELEASE_IMAGE not in lowered:
        return None
    # Dynamo's runtime images (ai-dynamo/tensorrtllm-runtime:1.0.2) carry Dynamo's version, not TRT-LLM's.
    version = None if "dynamo" in lowered else version_of(image, IMAGE_REPOS)
    settings = Settings(NAME, version, f"image {image}" if version else "newest known")
    if found is None:
        settings.notes.append(f"image {image}: TensorRT-LLM with no trtllm-serve command in view")
        return settings
    index, (words, how) = found
    argv = parse_argv(words, OPTIONS)
    settings.put("frontend", how, "command")
    if how == "trtllm-serve" and argv.positionals:
        settings.put("model", argv.positionals[0], "arg trtllm-serve <model>")
    read_settings(settings, SETTINGS, argv, env)
    model, served = settings.get("model"), settings.get("served_name")
    if model is not None and (quant := _quant_named(model.value)):
        settings.put("quantization", quant, f"{model.source} {model.value}")
    if served is not None and (model is None or _is_path(model.value)):
        # Dynamo's --model-path is often a local checkpoint; the served name says which model it is,
        # the path what it is quantized to (`/model-cache/deepseek-r1-fp4`).
        settings.values["model"] = served if model is None else Found(
            served.value, f"{served.source}, beside {model.source} {model.value}, a local checkpoint")
    model = settings.get("model")
    if model is not None and (m := _MODELOPT_FP4.search(model.value)):
        # NVIDIA's ModelOpt checkpoints for TRT-LLM (`nvidia/DeepSeek-V3.2-NVFP4`): the base model, in NVFP4.
        settings.values["model"] = Found(model.value[:m.start()].split("/")[-1], f"{model.source} {model.value}")
    path = settings.value("config")
    if path:
        text = heredoc(commands[:index], path)
        if text is not None:
            read_config_file(settings, text, f"the heredoc that writes {path}")
    return settings


_FP4 = re.compile(r"(?:^|[-_./])(?:nv)?fp4(?=$|[-_./])", re.IGNORECASE)
_MODELOPT_FP4 = re.compile(r"-(?:nv)?fp4$", re.IGNORECASE)


def _quant_named(reference: str) -> str | None:
    """The quantization a checkpoint's path or id names: ModelOpt's FP4 (NVFP4) or the common suffixes."""
    last = reference.rstrip("/").rsplit("/", 1)[-1]
    return "nvfp4" if _FP4.search(last) else quant_in_model_id(reference)


def _is_path(value: str) -> bool:
    return value.startswith(("/", "./", "~", "$")) or value.count("/") > 1


def heredoc(commands: Sequence[Command], path: str) -> str | None:
    """The text a ``cat > PATH <<EOF … EOF`` before the server wrote to ``path``, with ``sed -i s///`` applied.

    The shell reader keeps each line's words but not its indentation: nested LlmArgs sections are rebuilt
    from the keys each section is known to hold (``_CHILDREN``).
    """
    lines: list[tuple[str, ...]] | None = None
    i = 0
    while i < len(commands):
        words = commands[i].words
        target, delim = _heredoc_head(words)
        if target == path and delim:
            body: list[tuple[str, ...]] = []
            i += 1
            while i < len(commands) and commands[i].words != (delim,):
                body.append(commands[i].words)
                i += 1
            lines = body
        elif lines is not None and commands[i].program == "sed" and path in words:
            lines = [_sed(w, words) for w in lines]
        i += 1
    if lines is None:
        return None
    out: list[str] = []
    section: str | None = None
    for words in lines:
        if not words or not words[0].endswith(":"):
            continue
        key, value = words[0][:-1], " ".join(words[1:])
        if section is not None and key in _CHILDREN.get(section, frozenset()):
            out.append(f"  {key}: {value}")
            continue
        if section is not None and key not in _TOP_LEVEL:
            out.append(f"  {key}: {value}")  # a child of a section whose keys are not listed
            continue
        section = key if not value else None
        out.append(f"{key}: {value}" if value else f"{key}:")
    return "\n".join(out) + "\n"


def _heredoc_head(words: tuple[str, ...]) -> tuple[str | None, str | None]:
    if not words or words[0].rsplit("/", 1)[-1] != "cat":
        return None, None
    target = delim = None
    for j, w in enumerate(words):
        if w.startswith("<<"):
            delim = w[2:].lstrip("-").strip("'\"") or (words[j + 1] if j + 1 < len(words) else None)
        elif w in (">", ">|") and j + 1 < len(words):
            target = words[j + 1]
        elif w.startswith(">") and len(w) > 1 and not w.startswith(">>"):
            target = w[1:]
    return target, delim


def _sed(line: tuple[str, ...], sed: tuple[str, ...]) -> tuple[str, ...]:
    """One line of the heredoc after ``sed -i 's/A/B/' PATH`` (plain substitutions only)."""
    for w in sed[1:]:
        m = re.fullmatch(r"s(.)(.*?)\1(.*?)\1g?", w)
        if m and not m.group(2).startswith("^"):
            line = tuple(part.replace(m.group(2), m.group(3)) for part in line)
    return line


def read_config_file(settings: Settings, text: str, source: str) -> bool:
    """Fill settings from an ``extra_llm_api_options`` / ``--extra-engine-args`` YAML (LlmArgs, §3.2).

    The YAML is applied over the command line (serve.py ``update_llm_args_with_extra_dict``), so its values
    replace the flags'. False when the text is not a YAML mapping.
    """
    doc = yaml_mapping(text, source)
    if doc is None:
        return False

    def put(key: str, value: Any, where: str) -> None:
        if value is None or isinstance(value, dict | list):
            return
        text_value = str(value).lower() if isinstance(value, bool) else str(value)
        settings.values[key] = Found(text_value, f"{source} {where}")

    for name, key in _TOP.items():
        if name in doc:
            put(key, doc[name], name)
    for section, keys in _SECTIONS.items():
        block = doc.get(section)
        if isinstance(block, dict):
            for name, key in keys.items():
                if name in block:
                    put(key, block[name], f"{section}.{name}")
    if "cuda_graph_config" in doc and doc["cuda_graph_config"] is None:
        settings.values["cuda_graphs_off"] = Found("true", f"{source} cuda_graph_config: null")
    return True


def _adp(req: EstimateRequest) -> bool:
    """Attention DP as the layout passed it: attention over the pipeline stages only, not over TP."""
    return bool(req.attention_split) and req.attention_split < max(req.gpus, 1)


def plan(req: EstimateRequest, spec: ModelSpec | None) -> Estimate:
    """Weights + the profiling forward at max_num_tokens + non-torch; a KV pool of one max_seq_len at F = 0.9."""
    g = max(req.gpus, 1)
    pp = max(req.pipeline, 1)
    tp = max(1, g // pp)
    adp = _adp(req)
    shape = shape_of(spec, req.params)
    weights = weights_bytes(req.params, req.precision, shape, spec)
    w_gpu = weights_per_gpu(req, weights, spec)
    layout = layout_of(spec, shape.kv_elements_per_token, shape.layers, kv_bytes(req.precision, req.kv_cache_dtype))
    # MLA keeps one latent per token on every rank; under attention DP each rank holds its own requests' KV.
    kv_shards = 1 if shape.mla or adp else max(1, min(tp, shape.kv_heads))
    per_token = layout.bytes_per_token() / kv_shards / pp
    kv = layout.bytes_for(req.context) * req.batch / kv_shards / pp
    tokens = req.batched_tokens or DEFAULT_MAX_NUM_TOKENS
    # The dummy batch is repeated per attention-DP rank: each rank runs a full max_num_tokens forward.
    act = ACTIVATION_BYTES_PER_TOKEN_HIDDEN * tokens * shape.hidden_size / (1 if adp else tp)
    fixed = FIXED_MIB * MIB
    min_pool = per_token * min(MIN_POOL_TOKENS, req.context)
    # T must leave P + KV / F: the pool is F of what is free after the profiling peak.
    mid = w_gpu + act + fixed + kv / DEFAULT_FREE_FRACTION
    low = w_gpu + LOW_SHARE * (act + fixed) + min_pool / DEFAULT_FREE_FRACTION
    high = mid + act + 1024 * MIB
    if not shape.known:
        low *= 0.85
        high *= 1.25
    notes = [f"TensorRT-LLM KV pool = free_gpu_memory_fraction × memory free after weights and a {tokens}-token "
             f"forward; priced to hold one max_seq_len of {req.context} tokens at fraction "
             f"{DEFAULT_FREE_FRACTION}; below that the PyTorch backend lowers max_seq_len instead of failing"]
    if adp:
        notes.append("attention DP: attention replicated on every rank, experts split over the EP ranks")
    return priced(req, weights=w_gpu, kv=kv, overhead=fixed, activations=act, mid=mid, low=low, high=high,
                  kv_bytes_per_token=layout.bytes_per_token(), shape_known=shape.known, engine=NAME, notes=notes)


def kv_pool(req: EstimateRequest, spec: ModelSpec | None, gpu_mib: float, fraction: float
            ) -> tuple[float, int, float]:
    """The pool on one GPU of ``gpu_mib`` MiB: (GiB, tokens, sequences of ``req.context``) at free fraction F."""
    est = plan(req, spec)
    g = max(req.gpus, 1)
    peak = est.per_gpu_mib - est.kv_cache_mib / g / DEFAULT_FREE_FRACTION
    pool_mib = max(0.0, fraction * (gpu_mib - peak))
    one = est.kv_cache_mib / g / max(req.batch, 1)
    per_token = one / max(req.context, 1)
    tokens = int(pool_mib / per_token) if per_token > 0 else 0
    return pool_mib / 1024, tokens, (pool_mib / one if one > 0 else 0.0)


def _default_context(s: Settings, model_context: int, zero_declared: bool) -> ContextDefault:
    return ContextDefault(model_context, "TensorRT-LLM max_seq_len inferred from the model config "
                                         "(lowered at start to the KV pool when it does not fit)")


def _layout(s: Settings, p: ParallelRead, int_setting: IntSetting) -> Layout:
    """TP × PP ranks over the group's GPUs; with attention DP, attention replicated and experts over the ranks."""
    pp = max(p.pp, 1)
    tp = p.tp or max(1, p.pod_gpus * p.group // pp)
    if not s.flag("dp_attention"):
        return Layout(tp=tp, pp=pp, rank_gpus=tp * pp)
    sources = [("parallelism", f"TensorRT-LLM attention DP over TP {tp}: attention and embeddings on every rank, "
                               f"experts over {tp * pp} GPUs")]
    return Layout(tp=tp, pp=pp, ep=bool(p.moe), dp_attention=True, rank_gpus=tp * pp,
                  expert_split=tp * pp if p.moe else 0, attention_split=pp, sources=tuple(sources))


def _request_changes(req: EstimateRequest, s: Settings, context_annotated: bool,
                     int_setting: IntSetting) -> dict[str, Any]:
    changes: dict[str, Any] = {}
    cap = int_setting(s, "kv_max_tokens")
    if cap is not None and cap < req.context and not context_annotated:
        changes["context"] = cap  # kv_cache_config.max_tokens: the smaller wins, max_seq_len follows the pool
    return changes



# Start-up lines ([TensorRT-LLM][INFO] of cpp/tensorrt_llm/batch_manager and runtime; the PyTorch backend's
# KV cache manager prints the same "Allocated … for max tokens in paged KV cache").
LOG_LINES = (
    line("kv_cache_gib", r"Allocated {N} GiB for max tokens in paged KV cache"),
    line("kv_cache_tokens", r"for max tokens in paged KV cache \({N}\)"),
    line("kv_cache_tokens", r"Using {N} (?:total )?tokens in paged KV cache"),
    line("kv_cache_bytes", r"Allocate {N} bytes for k/v cache"),
    line("engine_context_gpu_mib", r"IExecutionContext creation: CPU \+\d+, GPU \+\d+, now: CPU \d+, GPU {N} \(MiB\)"),
    line("execution_context_mib", r"Allocated {N} MiB for execution context memory"),
    line("engine_size_mib", r"Loaded engine size: {N} MiB"),
    line("tokens_per_block", r"tokens per block={N}"),
    line("primary_blocks", r"primary blocks={N}"),
    line("secondary_blocks", r"secondary blocks={N}"),
    line("kv_blocks_per_sequence", r"Max KV cache blocks per sequence: {N}"),
    line("window_size", r"\[window size={N}\]"),
    line("blocks_per_sequence", r"and {N} blocks per sequence"),
    line("runtime_buffers_gb", r"Allocated {N} GB GPU memory for runtime buffers"),
    line("decoder_gb", r"Allocated {N} GB GPU memory for decoder"),
)


def parse_log(text: str) -> dict[str, float]:
    """TensorRT-LLM's start-up figures in ``text`` (engines/startup.py)."""
    return read_log(text, LOG_LINES)


ENGINE = Engine(
    name=NAME, read=read, plan=plan, settings=SETTINGS, newest=NEWEST,
    parse_log=parse_log,
    aliases=("tensorrt-llm", "tensorrt_llm", "trt-llm"),
    suggestions={"context": "--max_seq_len {n}", "tp": "--tp_size {n}"},
    tensor_parallel=True,
    # The whole GPU: the free fraction applies to what is left after the profiling peak (module docstring).
    default_utilization=lambda version, tp: 1.0,
    default_context=_default_context, layout=_layout, request_changes=_request_changes, kv_pool=kv_pool,
    read_config_file=read_config_file,
    fix_adds={"context": ("arg", "--max_seq_len", "{n}"), "tp": ("arg", "--tp_size", "{n}")},
)
