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

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from ..models.catalog import ModelSpec
from ..models.vram import MIB, Estimate, EstimateRequest, priced, shape_of, weights_bytes
from ..models.vram import weights_per_gpu as weights_per_gpu_of
from ..units.precision import kv_bytes
from . import hybrid, mxfp4
from .base import Setting, Settings, Version, find_command, read_settings, version_of
from .cmdline import Command, OptionTable, parse_argv
from .engine import ContextRead, Engine, IntSetting, ParallelRead
from .grammar import AUTO, VLLM_AUTO_SINCE, vllm_max_model_len
from .layers import KVLayout, layout_of
from .nim_image import is_backend_nim
from .parallel import Layout, spanning_layouts, vllm_layout
from .startup import line
from .startup import read as read_log

NAME = "vllm"
IMAGE_REPOS = ("vllm",)
# The newest release whose behaviour is modelled; an image without a version tag gets this one.
NEWEST: Version = (0, 33, 0)

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
    "--quantization-param-path", "--data-parallel-start-rank", "--data-parallel-address", "--data-parallel-rpc-port",
    "--data-parallel-backend", "--decode-context-parallel-size", "--api-server-count", "--all2all-backend",
    "--eplb-config", "--expert-placement-strategy", "--num-redundant-experts",
)
_FLAG_OPTIONS = (
    "--enforce-eager", "--enable-expert-parallel", "--trust-remote-code", "--enable-prefix-caching",
    "--no-enable-prefix-caching", "--enable-chunked-prefill", "--no-enable-chunked-prefill", "--enable-lora",
    "--disable-log-requests", "--disable-log-stats", "--enable-auto-tool-choice", "--disable-custom-all-reduce",
    "--disable-sliding-window", "--skip-tokenizer-init", "--enable-prompt-tokens-details", "--headless",
    "--disable-frontend-multiprocessing", "--enable-reasoning", "--disable-cascade-attn", "--async-scheduling",
    "--enable-sleep-mode", "--enable-dbo", "--enable-eplb", "--no-enable-log-requests", "--enable-log-requests",
    "--data-parallel-hybrid-lb", "--data-parallel-external-lb",
)
OPTIONS = OptionTable(
    names=frozenset(_VALUE_OPTIONS + _FLAG_OPTIONS),
    aliases={"-tp": "--tensor-parallel-size", "-pp": "--pipeline-parallel-size", "-dp": "--data-parallel-size",
             "-q": "--quantization", "-O": "--compilation-config", "-dpl": "--data-parallel-size-local",
             "-dpa": "--data-parallel-address", "-dpp": "--data-parallel-rpc-port", "-dpb": "--data-parallel-backend",
             "-dcp": "--decode-context-parallel-size",
             # KServe's Hugging Face server passes vLLM's engine args through, with its own model flags.
             "--model-id": "--model", "--model-dir": "--model"},
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
    "dp_local": Setting(("--data-parallel-size-local",)),
    "dcp": Setting(("--decode-context-parallel-size",)),
    "eplb": Setting(("--enable-eplb",)),
    "eplb_config": Setting(("--eplb-config",)),
    "redundant_experts": Setting(("--num-redundant-experts",)),
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
    "flashinfer_sampler": Setting((), ("VLLM_USE_FLASHINFER_SAMPLER",)),
    "mla_disable": Setting((), ("VLLM_MLA_DISABLE",)),
    "speculative_config": Setting(("--speculative-config",)),
    "no_prefix_caching": Setting(("--no-enable-prefix-caching",)),
    "prefix_caching": Setting(("--enable-prefix-caching",)),
}
# NVIDIA Dynamo's vLLM worker (`python3 -m dynamo.vllm`) takes vLLM's engine args.
_MODULES = ("vllm.entrypoints", "dynamo.vllm")
# KServe's Hugging Face runtime: `python -m huggingfaceserver --model_id … [vLLM engine args]`; it serves
# with vLLM unless `--backend huggingface` says otherwise.
_HF_SERVER = "huggingfaceserver"
_KAITO_SCRIPTS = ("vllm/inference_api.py", "inference_api_vllm.py")


def argv_words(image: str, commands: Sequence[Command]) -> tuple[list[str], str] | None:
    """The words vLLM parses (after ``serve`` / the module) and how it was started, or None."""
    h = find_command(commands, (_HF_SERVER,), (_HF_SERVER,))
    if h is not None or (_HF_SERVER in image.lower() and len(commands) <= 1):
        if h is None:
            return (list(commands[0].words) if commands else []), _HF_SERVER
        words = list(commands[h].words)
        start = words.index("-m") + 2 if "-m" in words else 1
        return words[start:], _HF_SERVER
    for cmd in commands:
        # KAITO's preset pods run its vLLM server script, which takes `vllm serve`'s arguments
        # (kaito-project/kaito PR #624: presets/.../inference_api_vllm.py, /workspace/vllm/inference_api.py).
        words = list(cmd.words)
        if cmd.program.startswith("python") and len(words) > 1 and words[1].endswith(_KAITO_SCRIPTS):
            return words[2:], f"KAITO {words[1].rsplit('/', 1)[-1]}"
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


# AMD's ROCm builds (rocm/vllm on Docker Hub) name vLLM's release after "vllm_" in a tag that starts with ROCm's:
# rocm6.2_mi300_ubuntu20.04_py3.9_vllm_0.6.4 (ROCm/k8s-device-plugin example/vllm-serve/deployment.yaml@ed76468),
# rocm7.14.0_cdna_ubuntu24.04_py3.14_pytorch_2.11.0_vllm_0.23.0 (rocm.docs.amd.com, "vLLM inference and serving on
# ROCm"). version_of reads the tag's leading release, which there is ROCm's.
_ROCM_TAG = re.compile(r"(?:^|_)vllm_v?(\d+)\.(\d+)(?:\.(\d+))?(?=_|$)", re.IGNORECASE)


def rocm_version(image: str) -> Version | None:
    """vLLM's release in a ROCm image tag (``rocm/vllm:rocm6.3.1_vllm_0.8.5_20250521`` → (0, 8, 5))."""
    name, _, tag = image.rpartition(":")
    if "rocm" not in name.lower() or "/" in tag:
        return None
    match = _ROCM_TAG.search(tag.split("@", 1)[0])
    return tuple(int(g) for g in match.groups() if g is not None) if match else None


def read(image: str, commands: Sequence[Command], env: Mapping[str, str],
         pod_commands: Sequence[Command] = ()) -> Settings | None:
    """vLLM's settings from a container, or None when the container does not run vLLM."""
    if not commands and is_backend_nim(image):
        return None  # a NIM on vLLM, run as its image: the NIM reader's (its model is in the image name)
    found = argv_words(image, commands)
    if found is None:
        return None
    words, how = found
    argv = parse_argv(words, OPTIONS)
    # Dynamo's runtime images (ai-dynamo/vllm-runtime:0.4.0) carry Dynamo's version, not vLLM's.
    version = None if "dynamo" in image.lower() else version_of(image, IMAGE_REPOS) or rocm_version(image)
    settings = Settings(NAME, version, f"image {image}" if version else "newest known")
    if how == _HF_SERVER:
        backend = (argv.get("--backend") or "vllm").lower()
        settings.put("launcher", _HF_SERVER, "command")
        if backend not in ("vllm", "auto"):
            settings.notes.append(f"huggingfaceserver --backend {backend}: priced as vLLM")
    elif argv.positionals and not argv.has("--model"):
        settings.put("model", argv.positionals[0], f"arg {how} <model>")
    read_settings(settings, SETTINGS, argv, env)
    if OFFICIAL_IMAGE in image.lower():
        settings.put("flashinfer_installed", "1", f"image {image}")  # its Dockerfile installs FlashInfer
    return settings


def redundant_experts(settings: Settings) -> int:
    """Extra expert slots EPLB keeps (``--eplb-config '{"num_redundant_experts": N}'``, formerly
    ``--num-redundant-experts``): each EP rank then holds (experts + N) / EP experts (vllm/config/parallel.py
    EPLBConfig). 0 without ``--enable-eplb``."""
    if not settings.flag("eplb"):
        return 0
    raw = settings.value("eplb_config")
    value: object = settings.value("redundant_experts")
    if raw:
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and "num_redundant_experts" in parsed:
            value = parsed["num_redundant_experts"]
    try:
        return max(0, int(str(value))) if value is not None else 0
    except ValueError:
        return 0


def is_v1(version: Version | None, env_v1: str | None) -> bool:
    """V1 is the default engine from 0.8.0 (vllm/envs.py VLLM_USE_V1), the only one from 0.10.2."""
    v = version or NEWEST
    if v >= (0, 10, 2):
        return True
    if env_v1 is not None:
        return env_v1.strip() not in ("0", "false", "False")
    return v >= (0, 8, 0)


# V0 turned chunked prefill on by itself past 32k-token contexts from 0.5.3 (vllm==0.5.3
# engine/arg_utils.py ``use_long_context``, "to avoid OOM errors in the initial memory profiling phase");
# 0.5.1 and 0.5.2 profiled the whole max_model_len in one pass.
LONG_CONTEXT_CHUNKING_SINCE: Version = (0, 5, 3)


def defaults(version: Version | None, v1: bool, context: int, gpu_mib: float | None,
             product: str | None = None) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) when unset, for ``vllm serve`` (vllm/engine/arg_utils.py).

    V0: 256 sequences; without chunked prefill (on by itself only past 32k contexts, from 0.5.3) a whole
    max_model_len is profiled. V1 picks by GPU: 8192/1024 on ≥ 70 GiB GPUs (0.9–0.27: not A100),
    16384/1024 on ≥ 160 GiB from 0.28, else 2048/256. ``gpu_mib`` None means "a large GPU".
    """
    v = version or NEWEST
    if not v1:
        if context > 32768 and v >= LONG_CONTEXT_CHUNKING_SINCE:
            return 256, (512 if v < (0, 6, 5) else 2048)
        return 256, max(context, 2048)
    large = gpu_mib is None or gpu_mib >= 70 * 1024
    if v < (0, 8, 5):
        seqs, tokens = 1024, (8192 if large else 2048)
    elif v >= (0, 28, 0) and (gpu_mib is None or gpu_mib >= 160 * 1024):
        seqs, tokens = 1024, 16384
    else:
        if v >= (0, 9, 0) and product and "a100" in product.lower():
            large = False  # 0.9 onwards: "≥ 70 GiB and not an A100"
        seqs, tokens = (1024, 8192) if large else (256, 2048)
    if v >= (0, 10, 0):
        seqs = min(seqs, tokens)
    return seqs, tokens


def default_utilization(version: Version | None) -> float:
    """``--gpu-memory-utilization`` when unset: 0.90, and 0.92 from 0.20.0."""
    return 0.92 if (version or NEWEST) >= (0, 20, 0) else 0.9


# Non-torch memory vLLM charges before the KV pool (NCCL, cuBLAS workspaces, custom all-reduce):
# published logs show 0.06–0.4 GiB on one GPU, 0.25–0.65 GiB at TP 2 (an R1-distill on 4090s,
# Qwen2-7B on A100s) and up to 5 GiB per GPU at TP 8 (the 405B-FP8 refusal): (low, expected, high).
NON_TORCH_MIB = (64, 160, 512)
NON_TORCH_TP_MIB = (256, 768, 5120)
# 0.6.4 and V1 0.7.0–0.9.0 measured all non-torch use, the CUDA context included.
CUDA_CONTEXT_MIB = 512
# NCCL's NVLink SHARP (NVLS) buffers: NCCL turns NVLS on by itself past 2 GPUs on NVSwitch H100-class
# systems (vllm#9699, "NVLS comm … nvlsPerRankSize 301989888 nvlsTotalSize 2415919104" at 8 GPUs), and vLLM
# leaves it on (it sets NCCL_NVLS_ENABLE=0 only in batch-invariant mode, vllm==0.12.0
# model_executor/layers/batch_invariant.py). Not in vLLM's source, so FITTED: four 0.10.0 H100 SXM logs sit
# 1.42–1.80 GiB over the TP non-torch figure (Qwen3-235B-A22B-FP8 TP 4 and TP 8, Qwen3-32B TP 4 and TP 8),
# none at TP 2 (llm-d Llama-3.3-70B, Qwen3-VL-30B-A3B): the expected value only, 1.6 GiB.
NVLS_MIB = 1640
NVLS_GPUS = ("H100", "H200", "H800", "H20", "B200", "B300", "GB200", "GB300")


def nvls_buffers(gpu_product: str | None, tp: int) -> bool:
    """Whether NCCL will set up NVLS: TP > 2 on an NVSwitch Hopper/Blackwell (not PCIe cards nor NVL pairs)."""
    name = (gpu_product or "").upper().replace("-", " ")
    if tp <= 2 or "PCIE" in name or " NVL" in name:
        return False
    return any(g in name.split() or f"NVIDIA {g}" in name for g in NVLS_GPUS)


def cuda_graph_mib(params: float, tp: int) -> float:
    """CUDA-graph memory per GPU: ~0.5–0.7 GiB for an 8B model, ~3.5 GiB for Qwen3-235B at TP 4 (logs)."""
    return (0.4 + 0.05 * params / 1e9 / max(tp, 1)) * 1024


# Bytes per vocabulary entry per dummy sequence at the sampler's peak: (low, expected, high).
# Both engines sample the last token of each dummy sequence with top-k = vocab − 1 and top-p < 1, so
# the PyTorch top-k/top-p path sorts the whole [rows, vocab] logits (V0: vllm==0.5.5
# vllm/worker/model_runner.py profile_run SamplingParams(top_p=0.99, top_k=vocab_size - 1) and
# vllm/model_executor/layers/sampler.py _apply_top_k_top_p; V1: vllm==0.8.5
# vllm/v1/worker/gpu_model_runner.py _dummy_sampler_run, vllm/v1/sample/ops/topk_topp_sampler.py
# apply_top_k_top_p). Live at the sort: the bf16 logits (2 B), their fp32 copy (4 B,
# v1/sample/sampler.py ``logits.to(torch.float32)``), the sorted values and int64 indices (12 B), the
# int64 index input torch.sort builds and CUB's alternate key/value buffers (≈ 20 B): ≈ 38 B
# (inference from the code path). Logged: 38.4–39.6 B on six llm-d H100 V1 runs with 1024 sequences
# (Qwen3-0.6B/32B, Llama-3.1-8B, Llama-3.3-70B TP 2, gpt-oss-20b/120b), 38.5 B on Qwen3-30B-A3B
# (0.10.2, H100), 38.8 B on the V0 0.6.4 driver rank (Llama-3.1-8B, 256 sequences, mapcoder log);
# vllm#32558 measured 1.25 GB for a PyTorch top-k at 256 × 131072 (37 B). V1's low end (12 B) is the
# FlashInfer sampler (vllm#11394; used when installed and enabled, which changed with vllm#14815,
# #15777 and #26859); V0 ships it off (VLLM_USE_FLASHINFER_SAMPLER unset), so V0's low end stays
# near the sort's.
SAMPLER_BYTES = (12.0, 38.0, 40.0)
V0_SAMPLER_BYTES = (32.0, 38.0, 40.0)
# vllm#33538 (merged 2026-02-02) replaced the sort with a Triton pivot search on GPUs with Triton:
# vllm#32558's table gives 384 MB at 256 × 131072 (≈ 11.4 B) besides the logits, then softmax probs
# and the exponential noise (8 B): ≈ 18 B expected. The release that first shipped it is
# **unverified** (0.16 assumed, the first release after the merge in this note's list); no published
# log in the corpus has many sequences on 0.16+, so the high end stays at the sort's.
TRITON_SAMPLER_FROM: Version = (0, 16, 0)
TRITON_SAMPLER_BYTES = (12.0, 18.0, 40.0)
# FlashInfer's sampler (vllm==0.10.2 vllm/v1/sample/ops/topk_topp_sampler.py flashinfer_sample →
# flashinfer.sampling.top_k_top_p_sampling_from_logits): the bf16 logits (2 B), the sampler's float32 copy
# (4 B), the top-k-masked logits and their softmax (4 B each): 14 B. The high end stays at the sort's, the
# fallback on GPUs FlashInfer does not support. Logged: 0.53 GiB activation + non-torch for 256 × 152064
# (Qwen2-7B, 0.10.1.1, "Using FlashInfer for top-p & top-k sampling"; 14 B gives 0.52 GiB + non-torch).
FLASHINFER_SAMPLER_BYTES = (12.0, 14.0, 38.0)
# When V1 samples with FlashInfer unasked: 0.9–0.11 whenever it is installed (topk_topp_sampler.py: an unset
# VLLM_USE_FLASHINFER_SAMPLER means on), which the vllm/vllm-openai image does (docker/Dockerfile installs
# FlashInfer into vllm-base) and a plain `pip install vllm` does not (an extra until 0.13); 0.12–0.20 only with
# VLLM_USE_FLASHINFER_SAMPLER=1 ("Users must opt in explicitly"); from 0.21 by default again (envs.py
# VLLM_USE_FLASHINFER_SAMPLER: bool = True), FlashInfer being a dependency from 0.13.
FLASHINFER_OPT_IN: tuple[Version, Version] = ((0, 12, 0), (0, 21, 0))
OFFICIAL_IMAGE = "vllm/vllm-openai"
# Hidden-size bf16 tensors live at a decoder layer's peak (input, residual, norm output, attention and
# all-reduce outputs): fitted with the gated-MLP term on V0 Llama-3.1-8B at 20k/29k batched tokens
# (106 KiB/token logged, RTX 3090) and Qwen2.5-14B at 32k, TP 1 and TP 2 (distagentgc logs).
HIDDEN_TENSORS = 6


def flashinfer_sampler(version: Version | None, env: str | None, installed: bool) -> bool | None:
    """Whether V1's profile samples with FlashInfer (FLASHINFER_OPT_IN); None where it depends on the install.

    ``env`` is VLLM_USE_FLASHINFER_SAMPLER, ``installed`` whether the image is known to carry FlashInfer.
    0.8.x turned it off with FlashInfer ≥ 0.2.3 (vllm==0.8.5 topk_topp_sampler.py), so what an 0.8 image
    does depends on its FlashInfer: unknown.
    """
    v = version or NEWEST
    value = (env or "").strip().lower()
    if value in ("0", "false", "no", "off"):
        return False
    if v < (0, 9, 0):
        return None
    if FLASHINFER_OPT_IN[0] <= v < FLASHINFER_OPT_IN[1] and not value:
        return False
    return True if installed or v >= (0, 13, 0) else None


def sampler_bytes(version: Version, v1: bool, flashinfer: bool | None) -> tuple[float, float, float]:
    """(low, expected, high) bytes per vocabulary entry per dummy sequence at the sampler's peak."""
    if not v1:
        return V0_SAMPLER_BYTES
    if flashinfer is None and version >= FLASHINFER_OPT_IN[0]:
        flashinfer = version >= FLASHINFER_OPT_IN[1]
    if flashinfer:
        return FLASHINFER_SAMPLER_BYTES
    return TRITON_SAMPLER_BYTES if version >= TRITON_SAMPLER_FROM else SAMPLER_BYTES


def forward_bytes(tokens: int, hidden: int, intermediate: float, tp: int, spec: ModelSpec | None = None) -> float:
    """Peak of one profile forward pass of ``tokens`` tokens, per TP rank.

    A dense gated MLP holds gate_up [T, 2·I/tp] and its activation; the hidden-size tensors are
    replicated on every rank (RowParallelLinear all-reduces a full [T, H]), so only the intermediate
    part divides by TP: tokens × 2 B × (2·I/tp + 6·H) (fitted, see HIDDEN_TENSORS). An MoE layer's
    fused_moe (vllm/model_executor/layers/fused_moe/fused_moe.py fused_experts_impl) allocates
    intermediate_cache1 [T, top_k, 2·I_moe/tp], cache2 [T·top_k, I_moe/tp] and cache3 [T, top_k, H];
    the peak layer is the larger of the dense and MoE ones.
    """
    per_token = 2.0 * (2 * intermediate / tp + HIDDEN_TENSORS * hidden)
    topk = (spec.experts_per_token or 0) if spec is not None else 0
    moe_inter = (spec.moe_intermediate_size or 0) if spec is not None else 0
    if topk and moe_inter:
        moe = 2.0 * (topk * (3 * moe_inter / tp + hidden) + HIDDEN_TENSORS * hidden)
        dense_layers = spec is not None and bool(spec.first_dense_layers)
        per_token = max(moe, per_token) if dense_layers else moe
    return tokens * per_token


def activation_bytes(tokens: int, seqs: int, hidden: int, intermediate: float, vocab: int, tp: int,
                     sampler_bytes: float = SAMPLER_BYTES[1], spec: ModelSpec | None = None) -> float:
    """Peak of the profile run: the larger of the forward pass and the dummy sampler run.

    The two run one after the other and the forward's temporaries are freed before the logits exist
    (V1: vllm/v1/worker/gpu_model_runner.py profile_run calls ``_dummy_run`` then
    ``_dummy_sampler_run`` on the last token of each request, vllm==0.8.5–0.33.0; V0:
    vllm/worker/model_runner.py execute_model runs the model, then compute_logits and sample), so the
    peak is max(forward, hidden states kept + sampler), not their sum. The sampler holds
    min(seqs, tokens) rows of ``sampler_bytes`` per vocabulary entry.
    """
    forward = forward_bytes(tokens, hidden, intermediate, tp, spec)
    kept = tokens * hidden * 2.0  # the dummy run's output, still referenced while sampling
    sampler = min(seqs, tokens) * vocab * sampler_bytes
    return max(forward, kept + sampler)


def plan(req: EstimateRequest, spec: ModelSpec | None) -> Estimate:
    """The memory vLLM needs per GPU to start: weights, profile activations, non-torch, one sequence of KV."""
    g = max(req.gpus, 1)
    v = req.engine_version or NEWEST
    shape = shape_of(spec, req.params)
    v1 = is_v1(req.engine_version, "0" if req.legacy_engine else None)
    w_lo, weights_per_gpu, w_hi = _weights_band(req, spec, v)
    pp = max(req.pipeline, 1)
    tp = max(1, g // pp)
    value_bytes = kv_bytes(req.precision, req.kv_cache_dtype)
    layout, kv_shards = kv_geometry(req, spec, tp)

    seqs_hi, tokens_hi = defaults(req.engine_version, v1, req.context, req.gpu_mib, req.gpu_product)
    seqs_lo, tokens_lo = defaults(req.engine_version, v1, req.context, req.gpu_mib or 24 * 1024, req.gpu_product)
    seqs = req.max_num_seqs or seqs_hi
    tokens = req.batched_tokens or tokens_hi
    if req.max_num_seqs or req.batched_tokens:
        seqs_lo, tokens_lo = (req.max_num_seqs or seqs_lo), (req.batched_tokens or tokens_lo)

    kv_seq = _kv_for_sequence(layout, req.context, tokens, v) + compressed_window_bytes(spec, req.context, tokens)
    kv_total = kv_seq * req.batch  # only a declared reservation (vramgate.io/batch-size) multiplies it
    kv_per_gpu = kv_total / kv_shards / pp / max(req.kv_split, 1)
    pool = hybrid_pool(req, spec, tp) if v1 else None
    if pool is not None:
        # Attention blocks raised to the recurrent state's page, one state per state group (engines/hybrid.py).
        kv_per_gpu = pool.sequence_bytes(req.context) * req.batch / max(req.kv_split, 1)
    if req.kv_cache_bytes is not None:
        kv_per_gpu = float(req.kv_cache_bytes)

    inter = float(getattr(spec, "intermediate_size", None) or 3.5 * shape.hidden_size)
    vocab = spec.vocab_size if spec else 128_000
    s_lo, s_mid, s_hi = sampler_bytes(v, v1, req.flashinfer_sampler)
    # The vision encoder's band: 0.75–1.5 × its counted peak, a count from one encoder's code applied to all
    # (the two logged profiles, Qwen2-VL-2B on 0.10.2 and Llama-3.2-11B-Vision on V0, come within 4 % of it).
    vision, kept = _vision_profile(req, spec, tokens, seqs, v1, tp, v)
    gather = compressed_prefill_workspace(spec, req.context, tokens)
    gather_lo = compressed_prefill_workspace(spec, req.context, tokens_lo)
    act = with_encoder(activation_bytes(tokens, seqs, shape.hidden_size, inter, vocab, tp, s_mid, spec),
                       vision, kept) + gather
    act_lo = with_encoder(activation_bytes(tokens_lo, seqs_lo, shape.hidden_size, inter, vocab, tp, s_lo, spec),
                          0.75 * vision, kept) + gather_lo
    act_hi = with_encoder(activation_bytes(tokens, seqs, shape.hidden_size, inter, vocab, tp, s_hi, spec),
                          1.5 * vision, kept) + gather
    # NCCL, custom all-reduce and all-to-all buffers: any rank that talks to others (TP, or experts spread by DP).
    nt_lo, nt_mid, nt_hi = NON_TORCH_TP_MIB if tp > 1 or req.expert_split > g else NON_TORCH_MIB
    if (0, 6, 4) <= v < (0, 6, 5) or (v1 and (0, 7, 0) <= v < (0, 9, 1)):
        nt_lo, nt_mid = nt_lo + CUDA_CONTEXT_MIB, nt_mid + CUDA_CONTEXT_MIB
    if nvls_buffers(req.gpu_product, tp):
        nt_mid = min(nt_hi, nt_mid + NVLS_MIB)
    # Graph memory follows the activations of the captured batch: an MoE's active parameters, not its total.
    active = (spec.active_params if spec is not None and spec.active_params else req.params)
    graphs = 0.0 if req.enforce_eager else cuda_graph_mib(min(active, req.params), tp) * MIB
    graphs_counted = v >= (0, 20, 0)
    mid = weights_per_gpu + kv_per_gpu + act + nt_mid * MIB + (graphs if graphs_counted else 0.0)
    certain = w_lo + kv_per_gpu
    low_rest = act_lo + nt_lo * MIB
    high = (mid + (w_hi - weights_per_gpu) + (act_hi - act) + (0.0 if graphs_counted else graphs)
            + (nt_hi - nt_mid) * MIB)
    if not shape.known:
        # The weights are params × bytes whatever the shape; KV and activations are a guess.
        low_rest *= 0.7
        certain = w_lo + 0.7 * kv_per_gpu
        high += 0.5 * (kv_per_gpu + act)
    low = certain + low_rest
    notes = [f"vLLM {'.'.join(map(str, v))} {'V1' if v1 else 'V0'}: the KV pool must hold one {req.context}-token "
             "sequence" + (f" × {req.batch} reserved" if req.batch > 1 else ""),
             f"profile run of {tokens} batched tokens over {min(seqs, tokens)} sequences"]
    if spec is not None and spec.mla and layout.bytes_per_token_layer:
        notes.append(_mla_note(req, spec, layout.bytes_per_token_layer / value_bytes))
    if pool is not None and spec is not None:
        state_mib = spec.state_bytes_per_layer(tp, req.speculative_tokens) / MIB
        drafts = (f"; {req.speculative_tokens} draft tokens: {pool.state_blocks} state blocks a request"
                  + (f", {req.draft_attention_layers} MTP attention layer(s)" if req.draft_attention_layers else "")
                  if req.speculative_tokens else "")
        notes.append(f"hybrid: KV in {spec.cache_layers} attention layers, a {state_mib:.2f} MiB recurrent state "
                     f"per sequence in each of {spec.state_layers}; attention block {pool.block_size} tokens, "
                     f"{pool.groups} groups of {pool.group_size} layers{drafts}")
    if vision:
        notes.append(f"vision encoder profiled: {vision / MIB / 1024:.1f} GiB peak per GPU, before the LLM's")
    overhead = nt_mid * MIB + (graphs if graphs_counted else 0.0)
    return priced(req, weights=weights_per_gpu, kv=kv_per_gpu, overhead=overhead,
                  activations=act, mid=mid, low=low, high=high, kv_bytes_per_token=layout.bytes_per_token(),
                  shape_known=shape.known,
                  engine=f"vllm {'.'.join(map(str, req.engine_version)) if req.engine_version else 'newest'}",
                  notes=notes, host_weights=_offloaded(req, spec, v, weights_per_gpu))


def _weights_band(req: EstimateRequest, spec: ModelSpec | None, version: Version) -> tuple[float, float, float]:
    """Weight bytes per GPU after loading: (low, expected, high), less ``--cpu-offload-gb`` (a per-GPU figure).

    vllm/config/cache.py (vllm/engine/arg_utils.py before 0.10) ``cpu_offload_gb``: "The space in GiB to offload
    to CPU, per GPU"; each rank's own loader offloads its own parameters until that budget is spent
    (model_executor/models/utils.py ``maybe_offload_to_cpu``, later model_executor/offloader ``OffloaderV1``), so
    the figure comes off each GPU's own share: the heaviest pipeline stage's GPU loses N GiB, not N × GPUs spread
    over the stages.

    One figure for most checkpoints; MXFP4 MoE experts depend on the backend the GPU and release pick
    (engines/mxfp4.py).
    """
    offload = req.cpu_offload_gib * 1024**3
    if mxfp4.applies(req, spec) and spec is not None:
        lo, mid, hi = mxfp4.band(req, spec, version)
        return max(0.0, lo - offload), max(0.0, mid - offload), max(0.0, hi - offload)
    total = weights_bytes(req.params, req.precision, shape_of(spec, req.params), spec)
    per_gpu = max(0.0, weights_per_gpu_of(req, total, spec) - offload)
    mtp = _mtp_weights(req, spec, total)
    # The MTP layers load only with MTP speculative decoding; the low end leaves them out (a checkpoint may
    # quantize them or not: nvidia's Qwen3.6 NVFP4 keeps its MTP head in bf16).
    return per_gpu, per_gpu + mtp, per_gpu + mtp


# DeepSeek-V4's prefill gathers a chunk of this many requests' compressed and window KV into one bf16 workspace
# (vllm/model_executor/layers/deepseek_v4_attention.py PREFILL_CHUNK_SIZE).
V4_PREFILL_CHUNK = 4


def compressed_prefill_workspace(spec: ModelSpec | None, context: int, batched_tokens: int) -> float:
    """Bytes of the bf16 gather workspace DeepSeek-V4's attention reserves in the profile run; 0 for other models.

    deepseek_v4_attention.py ``attention_impl`` (the dummy run reserves "_forward_prefill's bf16-gather
    workspace"): PREFILL_CHUNK_SIZE × M × head_dim bf16, M = N + window + max_num_batched_tokens with
    N = ceil(max_model_len / ratio) for the least compressing layer (ratio 4); one workspace shared by every
    layer. The 128-token window is left out (512 KiB).
    """
    if spec is None or not spec.compressed_kv:
        return 0.0
    ratio = min((r for r in spec.compress_ratios if r > 1), default=0)
    entries = -(-context // ratio) if ratio else 0
    return float(V4_PREFILL_CHUNK * (entries + batched_tokens) * spec.head_dim * 2)


# DeepSeek-V4's window cache pages (vllm/v1/attention/backends/mla/sparse_swa.py DeepseekV4SWACache.block_size:
# "the SWA block size of 64 tokens per block").
V4_WINDOW_BLOCK = 64


def compressed_window_bytes(spec: ModelSpec | None, context: int, batched_tokens: int) -> float:
    """Bytes of the window cache every DeepSeek-V4 layer keeps for one sequence; 0 for other models.

    Each layer's attention has a ``DeepseekV4SWACache`` (deepseek_v4_attention.py) whose ``SlidingWindowMLASpec``
    holds, as vLLM's ``SlidingWindowSpec.max_memory_usage_bytes`` sizes it, cdiv(min(window − 1 +
    max_num_batched_tokens, max_model_len), block) + 1 blocks of 64 tokens, at the 584-byte fp8_ds_mla entry.
    """
    if spec is None or not spec.compressed_kv or not spec.sliding_window:
        return 0.0
    tokens = min(spec.sliding_window - 1 + batched_tokens, context)
    blocks = -(-tokens // V4_WINDOW_BLOCK) + 1
    return float(spec.layers * blocks * V4_WINDOW_BLOCK * spec.compressed_entry_bytes()[0])


def _mtp_weights(req: EstimateRequest, spec: ModelSpec | None, total: float) -> float:
    """Bytes per GPU of the MTP layers vLLM builds for ``--speculative-config`` method mtp: one decoder layer's
    share of the checkpoint's bytes each (embeddings and the head are shared with the model)."""
    if spec is None or not req.draft_attention_layers or spec.layers <= 0 or not req.params:
        return 0.0
    towers = float((spec.vision_params or 0) + (spec.audio_params or 0))
    per_param = total / req.params
    layer = max(0.0, req.params - spec.embedding_params - towers) / spec.layers * per_param
    return req.draft_attention_layers * layer / max(req.gpus, 1)


def _offloaded(req: EstimateRequest, spec: ModelSpec | None, version: Version, per_gpu: float) -> float:
    """Bytes of weights ``--cpu-offload-gb`` keeps in host memory, over every GPU of the instance."""
    if not req.cpu_offload_gib:
        return 0.0
    full = _weights_band(req.but(cpu_offload_gib=0.0), spec, version)[1]
    return max(0.0, full - per_gpu) * max(req.gpus, 1)


def _kv_for_sequence(layout: KVLayout, context: int, batched_tokens: int, version: Version) -> float:
    """KV bytes of one ``context``-token sequence as this version allocates it.

    From 0.9.1 the hybrid KV-cache manager sizes sliding-window layers at
    min(window − 1 + max_num_batched_tokens, L) + one block; chunked-local layers (Llama 4) stay
    full length until 0.14 (docs/engine-sources-vllm.md).
    """
    full = layout.full_layers * context
    if layout.window and version >= (0, 9, 1):
        win = layout.window_layers * (min(layout.window - 1 + batched_tokens, context) + BLOCK)
    else:
        win = layout.window_layers * context
    if layout.chunk and version >= (0, 14, 0):
        chk = layout.chunk_layers * (min(layout.chunk, context) + BLOCK)
    else:
        chk = layout.chunk_layers * context
    return layout.bytes_per_token_layer * (full + chk) + layout.window_bytes * win


BLOCK = 16

# Multi-head latent attention (DeepSeek-V2/V3/R1, Kimi-K2) by version. vLLM caches the compressed latent,
# one "head" of kv_lora_rank + qk_rope_head_dim values per token and layer shared by every rank, only where
# ModelConfig.use_mla holds (vllm==0.7.1 vllm/config.py use_mla, get_head_size, get_num_kv_heads: 1);
# otherwise deepseek_v2.py's DeepseekV2Attention expands it into per-head K (nope + rope) and V padded
# to the same width ("padding value to qk_head_dim"), split over TP by head like any MHA model.
MLA_SINCE: Version = (0, 7, 1)
# 0.7.1 and 0.7.2 turned MLA off for any quantization but fp8 and fp8 compressed-tensors ("MLA is not
# supported with %s quantization. Disabling MLA."); 0.7.3 dropped that test (use_mla is
# is_deepseek_mla and not VLLM_MLA_DISABLE from then on, vllm==0.7.3–0.33.0).
MLA_ANY_QUANT_SINCE: Version = (0, 7, 3)
MLA_PRECISIONS = ("fp32", "fp16", "bf16", "fp8")
# is_deepseek_mla lists model types: deepseek_v2/v3 (0.7.1), deepseek_mtp (0.7.3), kimi_k2 from 0.10.0
# (vllm==0.9.2 config.py lacks it; 0.10.0 has it): Kimi-K2 on an older release runs DeepseekV2Attention.
MLA_FAMILY_SINCE: Mapping[str, Version] = {"kimi-k2": (0, 10, 0)}
# Up to 0.6.6 get_head_size returned 256 for deepseek_v2 (and deepseek_v3 from 0.6.6): "FlashAttention
# supports only head_size 32, 64, 128, 256, we need to pad head_size 192 to 256"; the cache was sized at
# 256. 0.7.0 sizes it at qk_nope_head_dim + qk_rope_head_dim (vllm==0.7.0 config.py get_head_size).
PADDED_HEAD_UNTIL: Version = (0, 7, 0)
PADDED_HEAD = 256


def mla_disabled(env: str | None) -> bool:
    """VLLM_MLA_DISABLE as vllm/envs.py reads it: ``bool(int(value))``, so any non-zero integer."""
    try:
        return bool(int((env or "0").strip()))
    except ValueError:
        return False  # vLLM itself fails to start on a non-integer; nothing to price differently


def caches_latent(req: EstimateRequest, spec: ModelSpec) -> bool:
    """Whether this vLLM caches an MLA model's compressed latent rather than expanded per-head K and V."""
    if not spec.mla or req.mla_disabled:
        return False
    v = req.engine_version or NEWEST
    if v < max(MLA_SINCE, MLA_FAMILY_SINCE.get(spec.family or "", MLA_SINCE)):
        return False
    return v >= MLA_ANY_QUANT_SINCE or req.precision in MLA_PRECISIONS


def expanded_head_size(spec: ModelSpec, version: Version) -> int:
    """The head size an expanded MLA cache is sized at: nope + rope, padded to 256 before 0.7.0."""
    head = (spec.qk_nope_head_dim or spec.head_dim) + (spec.qk_rope_head_dim or 0)
    return max(head, PADDED_HEAD) if version < PADDED_HEAD_UNTIL else head


def kv_geometry(req: EstimateRequest, spec: ModelSpec | None, tp: int) -> tuple[KVLayout, int]:
    """The KV layout this version allocates and how many TP ranks split it (an MLA latent: none)."""
    shape = shape_of(spec, req.params)
    value_bytes = kv_bytes(req.precision, req.kv_cache_dtype)
    layout = layout_of(spec, shape.kv_elements_per_token, shape.layers, value_bytes)
    if spec is None or not spec.mla:
        shards = max(1, min(tp, shape.kv_heads))
        if spec is not None and spec.global_kv_heads:
            # Fewer KV heads in the full layers are replicated sooner: each rank keeps max(1, heads // tp)
            # of them (gemma4.py Gemma4Attention), so a full layer splits over min(tp, global heads) ranks only.
            wider = shards / max(1, min(tp, spec.global_kv_heads))
            layout = replace(layout, bytes_per_token_layer=layout.bytes_per_token_layer * wider,
                             window_bytes_per_token_layer=layout.window_bytes)
        return layout, shards
    if caches_latent(req, spec):
        return layout, 1
    head = expanded_head_size(spec, req.engine_version or NEWEST)
    return replace(layout, bytes_per_token_layer=2.0 * spec.heads * head * value_bytes), max(1, min(tp, spec.heads))


def _mla_note(req: EstimateRequest, spec: ModelSpec, values_per_layer: float) -> str:
    """Which MLA cache layout was priced, and why."""
    if caches_latent(req, spec):
        return f"MLA: the compressed latent is cached ({values_per_layer:.0f} values per token and layer, every rank)"
    v = req.engine_version or NEWEST
    why = ("VLLM_MLA_DISABLE=1" if req.mla_disabled
           else f"vLLM {'.'.join(map(str, v))} predates MLA caching for this model" if v < max(
               MLA_SINCE, MLA_FAMILY_SINCE.get(spec.family or "", MLA_SINCE))
           else f"{req.precision} weights turn MLA off before 0.7.3")
    return (f"MLA expanded ({why}): per-head K and V cached, {values_per_layer:.0f} values per token and layer "
            "split over TP by head")


# A ViT block's peak per patch per unit of encoder width w, counted on vllm==0.10.2
# vllm/model_executor/models/qwen2_vl.py Qwen2VisionBlock.forward / Qwen2VisionMLP.forward: the residual and
# norm2's output (2 B·w each) live beside fc1's output, QuickGELU's 1.702·x temporary and its sigmoid
# (2 B·4w each: QuickGELU.forward_native, which runs while compiled custom ops are off): 4 + 24 B per unit of
# width, the MLP's share split by TP (ColumnParallelLinear fc1). The attention's peak (q/k/v copies and the
# float32 rotary pass, apply_rotary_pos_emb_vision) is 26 B·w, below it (inference from the code path).
VISION_HIDDEN_BYTES = 4.0
VISION_MLP_BYTES = 24.0
# The dummy pixels stay on the GPU in float32 through the whole profile run (profile_run keeps
# batched_dummy_mm_inputs): 3 channels × 2 frames × 14² × 4 B per Qwen2-VL patch.
VISION_PIXEL_BYTES = 3 * 2 * 14 * 14 * 4
# Qwen-VL, Llama 4, Mistral 3, InternVL, Phi-3-vision and Phi-4-multimodal merge 2 × 2 patches into one LLM
# token; the others, by their vLLM model files: Gemma 3 (gemma3_mm.py) average-pools SigLIP's 64² patches of an
# 896-px image to 256 tokens, MiniCPM-V's resampler turns a 448-px slice's 32² patches into 64 queries, and
# LLaVA (CLIP or SigLIP features) and Pixtral (patch tokens plus row breaks) keep one token per patch.
PATCHES_PER_TOKEN = 4
PATCHES_PER_TOKEN_BY_FAMILY: Mapping[str, int] = {
    "gemma3": 16, "minicpm-v": 16, "llava": 1, "llava-next": 1, "llava-onevision": 1, "pixtral": 1,
}


@dataclass(frozen=True)
class DummyVideo:
    """A model whose largest dummy item is a video: what the profile encodes and caches for it."""

    item_tokens: int  # get_mm_max_tokens_per_item: the placeholder tokens it may take in the prompt
    rows: int  # rows the encoder returns for it
    patches: int  # patches it pushes through the encoder
    width_factor: int  # encoder output width ÷ the LLM's hidden size


# Qwen3-VL from 0.11.0 (vllm/model_executor/models/qwen3_vl.py): the video processor caps a video at
# 25165824 px (size["longest_edge"]): 12288 tokens of 2 frames × 32² px, 49152 patches; get_max_video_tokens
# counts 12.5 prompt tokens per video token for the timestamps (153600), more than an image's 16384, so the
# video is what get_modality_with_max_tokens profiles. Qwen3_VisionTransformer.forward concatenates the merger
# and three deepstack mergers' outputs: 4 × hidden per row.
QWEN3_VL_VIDEO = DummyVideo(item_tokens=153600, rows=12288, patches=49152, width_factor=4)
DUMMY_VIDEOS: Mapping[str, tuple[Version, DummyVideo]] = {"qwen3-vl": ((0, 11, 0), QWEN3_VL_VIDEO)}
# 0.11.0–0.12.x profile_run widened each dummy output shorter than the item's tokens to a zeroed tensor of
# encoder_budget (0.11) or max_tokens_per_item (0.12) rows before caching it ("encoder cache needs to store the
# embeddings that encoder outputs are scattered onto"); 0.13.0 caches the outputs as they are.
EXPANDED_CACHE: tuple[Version, Version] = ((0, 11, 0), (0, 13, 0))


def vision_width(vision_params: float) -> float:
    """The encoder's width from its size: a ViT of ~32 blocks of ≈ 12·w² parameters (Qwen2-VL: 1280)."""
    return max(1024.0, (vision_params / 32 / 12) ** 0.5)


def encoder_bytes_per_patch(vision_params: float, tp: int) -> float:
    """Peak bytes per patch on one rank while the encoder runs (VISION_HIDDEN_BYTES, VISION_MLP_BYTES)."""
    w = vision_width(vision_params)
    return w * (VISION_HIDDEN_BYTES + VISION_MLP_BYTES / max(tp, 1)) + VISION_PIXEL_BYTES


def with_encoder(forward: float, encoder_peak: float, kept: float) -> float:
    """The profile's peak when the vision encoder runs before the LLM: max, not sum.

    V1 (vllm/v1/worker/gpu_model_runner.py profile_run, vllm==0.10.2–0.33.0) runs
    ``get_multimodal_embeddings`` / ``embed_multimodal`` on the dummy batch, keeps only its outputs in
    ``encoder_cache`` (and the dummy pixels), then ``_dummy_run`` and the sampler; V0 (vllm==0.7.0
    vllm/worker/model_runner.py and enc_dec_model_runner.py profile_run) runs one ``execute_model`` whose
    forward encodes the images first (mllama.py get_cross_attention_states) and hands only their embeddings
    to the decoder. Either way the encoder's temporaries are gone before the LLM's peak.
    """
    return max(forward + kept, encoder_peak)


def _vision_profile(req: EstimateRequest, spec: ModelSpec | None, tokens: int, seqs: int, v1: bool,
                    tp: int, version: Version) -> tuple[float, float]:
    """(encoder peak, bytes kept through the LLM's dummy run) of a multimodal model's profile, per GPU.

    V1 (vllm==0.10.2 vllm/v1/worker/utils.py MultiModalBudget.get_max_items) encodes
    max(1, min(budget // item_tokens, max_num_seqs × per-prompt items)) items of the largest size, the
    budget being max(max_num_batched_tokens, item_tokens) (v1/core/encoder_cache_manager.py
    compute_mm_encoder_budget) and per-prompt items max(1, min(limit, max_model_len // item_tokens)).
    V0 (worker/model_runner.py profile_run) min(max_num_seqs, max_num_batched_tokens // item_tokens) dummy
    sequences, each with its images; encoder-decoder Mllama (enc_dec_model_runner.py profile_run)
    max_num_seqs sequences with one 4-tile image each, whose 6404 tokens are patches, unmerged.
    """
    image_tokens = int(spec.max_image_tokens or 0) if spec is not None else 0
    vision_params = float(spec.vision_params or 0) if spec is not None else 0.0
    if spec is None or not image_tokens or not vision_params or req.mm_items == 0:
        return 0.0, 0.0
    limit = req.mm_items or 1
    per_token = PATCHES_PER_TOKEN_BY_FAMILY.get(spec.family or "", PATCHES_PER_TOKEN)
    item_tokens, rows, patches, width = image_tokens, image_tokens, image_tokens * per_token, 1
    since, video = DUMMY_VIDEOS.get(spec.family or "", ((99, 0, 0), None))
    if v1 and video is not None and version >= since and video.item_tokens > image_tokens:
        item_tokens, rows, patches, width = video.item_tokens, video.rows, video.patches, video.width_factor
    if v1:
        per_prompt = max(1, min(limit, req.context // item_tokens))
        budget = max(tokens, item_tokens)
        items = max(1, min(budget // item_tokens, seqs * per_prompt))
        if EXPANDED_CACHE[0] <= version < EXPANDED_CACHE[1]:
            rows = max(rows, budget if version < (0, 12, 0) else item_tokens)
    elif (spec.family or "").endswith("-vision"):
        items, patches = seqs * limit, image_tokens
    else:
        items = max(1, min(seqs, tokens // image_tokens)) * limit
    peak = items * patches * encoder_bytes_per_patch(vision_params, tp)
    # The encoder's outputs (rows of the LLM's hidden size, or wider) and the float32 pixels outlive it.
    kept = items * (rows * spec.hidden_size * width * 2.0 + patches * VISION_PIXEL_BYTES)
    return float(peak), float(kept)


def hybrid_pool(req: EstimateRequest, spec: ModelSpec | None, tp: int) -> hybrid.HybridPool | None:
    """A hybrid model's block geometry on one rank (V1 from 0.9.2, ``MambaSpec``); None for other models."""
    if spec is None or not spec.hybrid or (req.engine_version or NEWEST) < HYBRID_SINCE:
        return None
    layout, kv_shards = kv_geometry(req, spec, tp)
    pool = hybrid.pool_of(spec, layout.bytes_per_token_layer / kv_shards, tp, max(req.pipeline, 1),
                          req.speculative_tokens, req.draft_attention_layers)
    caching = req.prefix_caching
    if caching is None:
        caching = hybrid.prefix_caching_default(req.engine_version or NEWEST)
    if pool is not None and not caching:
        # Mamba cache mode "none": the running state only (MambaSpec.max_memory_usage_bytes).
        pool = replace(pool, state_blocks=pool.state_blocks - 1)
    return pool


# V1 sizes Mamba / linear-attention state in the KV pool from 0.9.2 (docs/engine-sources-vllm.md §5).
HYBRID_SINCE: Version = (0, 9, 2)


def kv_pool(req: EstimateRequest, spec: ModelSpec | None, gpu_total_mib: float, utilization: float
            ) -> tuple[float, int, float]:
    """vLLM's KV pool on one GPU: (GiB, tokens, maximum concurrency at ``req.context``)."""
    est = plan(req.but(batch=1, gpu_mib=gpu_total_mib), spec)
    g = max(req.gpus, 1)
    non_kv = est.per_gpu_mib - est.kv_cache_mib / g
    pool_mib = gpu_total_mib * utilization - non_kv
    if req.kv_cache_bytes is not None:
        pool_mib = req.kv_cache_bytes / MIB
    tokens, concurrency = pool_capacity(req, spec, pool_mib, est)
    return pool_mib / 1024, tokens, concurrency


def pool_capacity(req: EstimateRequest, spec: ModelSpec | None, pool_mib: float,
                  est: Estimate | None = None) -> tuple[int, float]:
    """What a KV pool of ``pool_mib`` on one GPU holds: (the tokens vLLM prints, concurrency at ``req.context``)."""
    g = max(req.gpus, 1)
    pp = max(req.pipeline, 1)
    pool_bytes = max(0.0, pool_mib) * MIB
    v1 = is_v1(req.engine_version, "0" if req.legacy_engine else None)
    pool = hybrid_pool(req, spec, max(1, g // pp)) if v1 else None
    if pool is not None:
        return pool.tokens(pool_bytes, req.context, req.engine_version or NEWEST), pool.concurrency(pool_bytes,
                                                                                                    req.context)
    est = est or plan(req.but(batch=1), spec)
    _, kv_shards = kv_geometry(req, spec, max(1, g // pp))
    per_token_per_gpu = est.kv_bytes_per_token / kv_shards / pp
    tokens = int(pool_bytes / per_token_per_gpu) if per_token_per_gpu else 0
    seq_bytes_per_gpu = est.kv_cache_mib / g * MIB
    concurrency = pool_bytes / seq_bytes_per_gpu if seq_bytes_per_gpu else 0.0
    return tokens, concurrency


def _layout(s: Settings, p: ParallelRead, int_setting: IntSetting) -> Layout:
    return vllm_layout(p.tp or 1, p.pp, p.dp, int_setting(s, "dp_local"), s.flag("ep"), int_setting(s, "dcp"),
                       p.pod_gpus, p.group, p.moe, p.dp_unknown)


def _layout_extras(s: Settings, layout: Layout) -> tuple[dict[str, int], list[tuple[str, str]]]:
    spare = redundant_experts(s)
    if not spare or not layout.expert_split:
        return {}, []
    return {"redundant_experts": spare}, [
        ("parallelism", f"vLLM EPLB: {spare} redundant expert slots spread with the experts")]


def _request_changes(req: EstimateRequest, s: Settings, context_annotated: bool,
                     int_setting: IntSetting) -> dict[str, object]:
    changes: dict[str, object] = {}
    sampler = flashinfer_sampler(req.engine_version, s.value("flashinfer_sampler"), s.flag("flashinfer_installed"))
    if sampler is not None:
        changes["flashinfer_sampler"] = sampler
    if mla_disabled(s.value("mla_disable")):
        changes["mla_disabled"] = True
    if s.flag("no_prefix_caching"):
        changes["prefix_caching"] = False
    elif s.flag("prefix_caching"):
        changes["prefix_caching"] = True
    drafted = speculative(s.value("speculative_config"), req.spec)
    if drafted is not None:
        changes["speculative_tokens"], changes["draft_attention_layers"] = drafted
    return changes


# --speculative-config methods that run the checkpoint's own MTP layers (vllm==0.33.0 config/speculative.py
# maps the model-specific names, e.g. qwen3_next_mtp, to "mtp").
MTP_METHODS = frozenset({"mtp", "qwen3_next_mtp", "qwen3_5_mtp", "deepseek_mtp", "glm4_moe_mtp", "ernie_mtp"})


def speculative(text: str | None, spec: ModelSpec | None) -> tuple[int, int] | None:
    """(draft tokens, attention layers added to the pool) from ``--speculative-config``; None when unreadable.

    The value is JSON (``{"method": "mtp", "num_speculative_tokens": 3}``); a Python dict repr as logs print it
    is read too. Only a checkpoint's own MTP layers join the KV pool (a separate draft model keeps its own).
    """
    if not text:
        return None
    try:
        config = json.loads(text)
    except ValueError:
        try:
            config = json.loads(text.replace("'", '"'))
        except ValueError:
            return None
    if not isinstance(config, dict):
        return None
    tokens = config.get("num_speculative_tokens")
    if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens <= 0:
        return None
    method = str(config.get("method") or "").lower()
    layers = (spec.mtp_layers or 0) if spec is not None and method in MTP_METHODS else 0
    return tokens, layers


def _give_gpus(command: list[str], gpus: int, nodes: int) -> list[str] | None:
    """``vllm serve`` without a TP flag, given a node's GPUs (and nodes as pipeline stages)."""
    if command[:2] != ["vllm", "serve"] or "--tensor-parallel-size" in command:
        return None
    out = [*command, "--tensor-parallel-size", str(gpus)]
    return [*out, "--pipeline-parallel-size", str(nodes)] if nodes > 1 else out


def _read_context(text: str, version: Version | None) -> ContextRead:
    """``--max-model-len`` as vLLM's parser reads it (engines/grammar.py: human-readable ints, ``auto``, ``-1``).

    ``auto``/``-1`` make vLLM pick the largest length whose KV cache fits (vllm/v1/core/kv_cache_utils.py
    ``_auto_fit_max_model_len``, a binary search per worker, the least of them; "Cannot auto-fit max_model_len"
    when not even one token fits): the pod starts once weights, activations and one block of KV fit. Read with
    the newest grammar whatever the image: a release before v0.14.0 that refuses ``auto`` fails at start, which
    vramgate says but does not reject (the boundary is read from release notes, not proven per patch release).
    """
    value = vllm_max_model_len(text, None)
    if value is not AUTO:
        return ContextRead(value)
    note = None
    if version is not None and version < VLLM_AUTO_SINCE:
        note = (f"vLLM {'.'.join(map(str, version))} predates --max-model-len {text.strip()} (added in "
                f"v{'.'.join(map(str, VLLM_AUTO_SINCE))}, PR #29431) and may refuse it at start")
    return ContextRead(BLOCK, auto=True, note=note)



# Start-up lines (vllm/v1/worker/gpu_model_runner.py, gpu_worker.py, core/kv_cache_utils.py; V0's worker.py and
# model_runner.py before them). "GB" in "Model loading took" (before 0.8) is the same bytes / 2^30 as "GiB".
LOG_LINES = (
    line("weights_gib", r"Model loading took {N} Gi?B"),
    line("weights_gib", r"Loading model weights took {N} GB"),
    line("weights_gib", r"model weights take\s*{N}\s*GiB"),
    line("kv_cache_gib", r"Available KV cache memory: {N} GiB"),
    line("kv_cache_gib", r"reserved for KV Cache is {N}\s*GiB"),
    line("kv_cache_gib", r"available_kv_cache_memory\s+{N}\s*GiB"),
    line("kv_cache_gib", r"kv_cache_size={N}GiB", least=True),  # 0.6: one line per worker
    line("kv_cache_gib", r"larger than the available KV cache memory \({N} GiB\)"),
    line("kv_cache_tokens", r"GPU KV cache size: {N} tokens"),
    line("max_concurrency", r"Maximum concurrency for [\d,]+ tokens per request: {N}x"),
    # 0.10-0.26: "Actual usage is W GiB for weight, A GiB for peak activation, N GiB for non-torch memory, and
    # G GiB for CUDAGraph memory" (the CUDA graph profiling hint).
    line("cuda_graph_gib", r"{N} GiB for CUDAGraph memory"),
    line("cuda_graph_gib", r"Graph capturing finished in [\d.]+ secs?, took {N} GiB"),
    line("cuda_graph_gib", r"Estimated CUDA graph memory: {N} GiB total"),
    line("non_torch_gib", r"non_torch_memory(?: takes|=|\s+)\s*{N}\s*GiB"),
    line("non_torch_gib", r"{N} GiB for non-torch memory"),
    line("activation_peak_gib", r"activation peak memory(?: takes)?\s+{N}\s*GiB"),
    line("activation_peak_gib", r"{N} GiB for peak activation"),
    line("gpu_blocks", r"# (?:GPU|CUDA|cuda|gpu) blocks: {N}"),
)


def parse_log(text: str) -> dict[str, float]:
    """vLLM's start-up figures in ``text`` (engines/startup.py)."""
    return read_log(text, LOG_LINES)


ENGINE = Engine(
    name=NAME, read_context=_read_context, read=read, plan=plan, settings=SETTINGS, newest=NEWEST,
    suggestions={"context": "--max-model-len {n}", "tp": "--tensor-parallel-size {n}",
                 "kv_fp8": "--kv-cache-dtype fp8", "max_seqs": "--max-num-seqs {n}",
                 "fp8": "--quantization fp8 (quantized at load)"},
    tensor_parallel=True, one_gpu_unless="--tensor-parallel-size", tunes_utilization=True,
    config_utilization=True, default_utilization=lambda version, tp: default_utilization(version),
    parse_log=parse_log,
    layout=_layout, layout_extras=_layout_extras,
    spanning=lambda moe, heads, per_node, pods: spanning_layouts(NAME, moe, heads, per_node, pods),
    request_changes=_request_changes, kv_pool=kv_pool, give_gpus=_give_gpus,
    fix_adds={"context": ("arg", "--max-model-len", "{n}"), "tp": ("arg", "--tensor-parallel-size", "{n}"),
              "kv_dtype": ("arg", "--kv-cache-dtype", "fp8"), "max_seqs": ("arg", "--max-num-seqs", "{n}"),
              "precision": ("arg", "--quantization", "fp8"),
              "utilization": ("arg", "--gpu-memory-utilization", "{n}")},
)
