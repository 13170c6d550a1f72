"""The VRAM estimator: weights, KV cache, activations and runtime overhead for a model on N GPUs."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from ..units.precision import PRECISIONS, kv_bytes
from ..units.quantity import format_gib
from .catalog import ModelSpec

MIB = 1024 * 1024

# CUDA context, cuBLAS/cuDNN workspaces and allocator slack per GPU. A context is ~300 MiB with
# lazy module loading (CUDA ≥ 11.7) and 1 GiB+ without; vLLM reports 0.06–0.10 GiB of further
# non-torch memory. 512 MiB covers the common case; the engine's gpu-memory-utilization headroom
# absorbs the rest (NCCL buffers on multi-GPU pods, CUDA graphs).
CUDA_CONTEXT_MIB = 512
# Peak activation bytes per token per unit of hidden size during an inference forward pass.
# Calibrated on vLLM's profile of Llama-3-8B: 1.23 GiB for 8,192 batched tokens at hidden 4,096.
INFERENCE_ACTIVATION_BYTES_PER_TOKEN_HIDDEN = 40
# vLLM's default max_num_batched_tokens for the OpenAI server (chunked prefill): a prefill never
# runs more tokens than this at once, however long the context.
PREFILL_CHUNK_TOKENS = 8192
# Activation bytes per token per layer per unit of hidden size in training with flash attention
# and no recomputation: 34·s·b·h per layer (Korthikanti et al. 2022, "Reducing Activation
# Recomputation in Large Transformer Models", eq. 2 without the 5·a·s/h attention-score term).
TRAINING_ACTIVATION_BYTES = 34
# Mixed-precision Adam: fp32 master weights (4) + two fp32 moments (8) per trainable parameter.
ADAM_STATE_BYTES = 12
ADAM_STATE_BYTES_FP32 = 8
# QLoRA-style training of a quantized model trains adapters only; ~1 % of parameters is typical
# (rank 16–64 on all linear layers of a 7–70B model).
ADAPTER_FRACTION = 0.01

Workload = Literal["inference", "training"]


@dataclass(frozen=True)
class Shape:
    """The architecture numbers the estimator needs, from the catalog or a documented fallback."""

    layers: int
    hidden_size: int
    kv_elements_per_token: int
    kv_heads: int
    embedding_params: float
    mla: bool
    sliding_window: int | None
    known: bool


def fallback_shape(params: float) -> Shape:
    """A Llama-style GQA shape for a model the catalog lacks.

    Assumes params ≈ 12·L·h² with h/L = 128 (Llama-3-8B: 4096/32) and 8 KV heads of 128 dims:
    for 8B this gives 139 KiB of fp16 KV per token (Llama-3-8B: 128 KiB).
    """
    hidden = max(128, round((params * 128 / 12) ** (1 / 3) / 128) * 128)
    layers = max(1, round(hidden / 128))
    return Shape(
        layers=layers,
        hidden_size=hidden,
        kv_elements_per_token=2 * layers * 8 * 128,
        kv_heads=8,
        embedding_params=0.0,
        mla=False,
        sliding_window=None,
        known=False,
    )


def shape_of(spec: ModelSpec | None, params: float) -> Shape:
    """The shape of a catalog model, or the fallback when there is none."""
    if spec is None:
        return fallback_shape(params)
    return Shape(
        layers=spec.layers,
        hidden_size=spec.hidden_size,
        kv_elements_per_token=spec.kv_elements_per_token(),
        kv_heads=spec.kv_heads,
        embedding_params=min(spec.embedding_params, params),
        mla=bool(spec.kv_lora_rank),
        # DeepSeek-V4's window is kept beside its compressed caches, not instead of them: no window caps its KV.
        sliding_window=None if spec.compressed_kv else spec.sliding_window,
        known=True,
    )


@dataclass(frozen=True)
class EstimateRequest:
    """What is being estimated: a model at a precision, context, batch and GPU count."""

    params: float
    precision: str
    spec: ModelSpec | None = None
    context: int = 4096
    batch: int = 1
    gpus: int = 1
    workload: Workload = "inference"
    kv_cache_dtype: str | None = None
    # The engine that will run it and what its settings say (None: the engine-agnostic model).
    engine: str | None = None
    engine_version: tuple[int, ...] | None = None
    max_num_seqs: int | None = None  # a concurrency cap, not a reservation
    batched_tokens: int | None = None  # tokens per forward pass (prefill chunk / profile run)
    enforce_eager: bool = False
    pipeline: int = 1  # pipeline-parallel stages among ``gpus``
    cpu_offload_gib: float = 0.0  # weights each GPU leaves in host memory (vLLM/SGLang --cpu-offload-gb, per GPU)
    # Weights the engine's flags keep in host memory instead of on any GPU, MiB for the whole instance
    # (llama.cpp -ot/--cpu-moe/--n-cpu-moe: computed by the engine from the model's tensors).
    host_weights_mib: float = 0.0
    kv_cache_bytes: int | None = None  # an explicit KV pool (vLLM --kv-cache-memory-bytes)
    mm_items: int | None = None  # images per prompt the engine profiles (--limit-mm-per-prompt)
    gpu_layers: int | None = None  # llama.cpp -ngl: layers on the GPU (None: the engine's default)
    slots: int = 1  # KV slots that each hold ``context`` tokens (Ollama OLLAMA_NUM_PARALLEL)
    flash_attention: bool | None = None  # llama.cpp -fa on/off (None: the engine's default)
    prefill_tokens: int | None = None  # TGI --max-batch-prefill-tokens
    input_tokens: int | None = None  # TGI --max-input-tokens (the longest warm-up request)
    finetune: str | None = None  # full | lora | qlora
    parallelism: str = "ddp"  # ddp | fsdp | zero1 | zero2 | zero3
    gradient_checkpointing: bool = True
    lora_rank: int = 16
    optimizer_bits: int = 32  # Adam moments: 32-bit, or 8-bit (bitsandbytes / paged 8-bit)
    legacy_engine: bool = False  # vLLM V0 forced by VLLM_USE_V1=0
    mla_disabled: bool = False  # vLLM VLLM_MLA_DISABLE=1: MLA models cache per-head K and V, not the latent
    flashinfer_sampler: bool | None = None  # vLLM V1 samples with FlashInfer (None: the version's default)
    gpu_mib: float | None = None  # the GPU it will run on, where engine defaults depend on it (None: a large one)
    gpu_product: str | None = None  # its product name (vLLM's V1 defaults single out the A100)
    # Distributed serving (engines/parallel.py): ``gpus`` is one engine rank's GPUs (TP × PP); the routed
    # experts may spread over more (vLLM DP × TP, SGLang's whole TP group) and attention over fewer (DP
    # attention). 0: the same ``gpus`` as everything else.
    expert_split: int = 0
    attention_split: int = 0
    kv_split: int = 1  # ranks that share one sequence's KV (vLLM/SGLang decode context parallel)
    redundant_experts: int = 0  # extra expert slots spread with the experts (vLLM EPLB)
    # Speculative decoding (vLLM --speculative-config): tokens drafted per step, and the attention layers the
    # drafter adds to the KV pool (a checkpoint's own MTP layers; 0 for a separate draft model or n-gram).
    speculative_tokens: int = 0
    draft_attention_layers: int = 0
    # vLLM --[no-]enable-prefix-caching: with it a hybrid keeps two state blocks per request, without it one;
    # None: the version's default (engines/hybrid.py ``prefix_caching_default``).
    prefix_caching: bool | None = None

    def __post_init__(self) -> None:
        # DeepSeek-V4's compressed caches have one layout, fp8_ds_mla, whatever the flag says: vLLM asserts an
        # fp8 cache dtype and turns it into fp8_ds_mla (vllm/model_executor/layers/deepseek_v4_attention.py
        # DeepseekV4MLAAttention), so an unstated KV dtype is fp8 there, not the weights' 16-bit.
        if self.kv_cache_dtype is None and self.spec is not None and self.spec.compressed_kv:
            object.__setattr__(self, "kv_cache_dtype", "fp8")

    def but(self, **changes: object) -> EstimateRequest:
        """A copy with some fields changed (for what-if suggestions).

        Copies the instance dict directly: ``dataclasses.replace`` re-runs ``__init__`` over ~30 fields,
        a measurable share of an admission decision.
        """
        unknown = changes.keys() - _REQUEST_FIELDS
        if unknown:
            raise TypeError(f"EstimateRequest has no field {sorted(unknown)[0]!r}")
        new = object.__new__(EstimateRequest)
        new.__dict__.update(self.__dict__)
        new.__dict__.update(changes)
        return new


_REQUEST_FIELDS = frozenset(EstimateRequest.__dataclass_fields__)


@dataclass(frozen=True)
class Estimate:
    """VRAM need in MiB: totals across the pod's GPUs, per GPU, and the parts."""

    request: EstimateRequest
    weights_mib: float
    kv_cache_mib: float
    overhead_mib: float
    gradients_mib: float
    optimizer_mib: float
    activations_mib: float
    per_gpu_mib: int
    total_mib: int
    kv_bytes_per_token: float
    shape_known: bool
    # The band the truth lies in, per GPU: admission rejects only when even ``low`` cannot fit.
    low_per_gpu_mib: int = 0
    high_per_gpu_mib: int = 0
    engine: str = "generic"
    notes: tuple[str, ...] = ()
    # Weights kept in host memory instead of on the GPUs (MiB, whole instance): what the pod's memory must hold.
    host_weights_mib: float = 0.0

    def __post_init__(self) -> None:
        if not self.low_per_gpu_mib:
            object.__setattr__(self, "low_per_gpu_mib", self.per_gpu_mib)
        if not self.high_per_gpu_mib:
            object.__setattr__(self, "high_per_gpu_mib", self.per_gpu_mib)

    @property
    def gpus(self) -> int:
        return self.request.gpus

    def breakdown(self) -> dict[str, float]:
        """The parts of the total, in MiB, for JSON and messages."""
        parts = {
            "weights_mib": round(self.weights_mib, 1),
            "kv_cache_mib": round(self.kv_cache_mib, 1),
            "overhead_mib": round(self.overhead_mib, 1),
        }
        if self.request.workload == "inference" and self.activations_mib:
            parts["activations_mib"] = round(self.activations_mib, 1)
        if self.request.workload == "training":
            parts["gradients_mib"] = round(self.gradients_mib, 1)
            parts["optimizer_mib"] = round(self.optimizer_mib, 1)
            parts["activations_mib"] = round(self.activations_mib, 1)
        return parts

    def summary(self) -> str:
        """One human line: the per-GPU need and its parts, per GPU."""
        g = self.request.gpus
        r = self.request

        def gib(mib: float) -> str:
            return format_gib(mib, unit=True, trim=False)

        parts = [f"weights {gib(self.weights_mib / g)} ({_params_h(r.params)} × {r.precision})"]
        if r.workload == "training":
            parts.append(f"gradients {gib(self.gradients_mib / g)}")
            parts.append(f"optimizer {gib(self.optimizer_mib / g)}")
            parts.append(f"activations {gib(self.activations_mib / g)}")
        else:
            seqs = f"{r.batch} seq{'s' if r.batch != 1 else ''}"
            slots = f" × {r.slots} slots" if r.slots > 1 else ""
            parts.append(f"KV cache {gib(self.kv_cache_mib / g)} ({r.context} tokens × {seqs}{slots})")
            if self.activations_mib:
                parts.append(f"activations {gib(self.activations_mib / g)}")
        parts.append(f"overhead {gib(self.overhead_mib / g)}")
        host = f"; {gib(self.host_weights_mib)} of weights in host memory" if self.host_weights_mib >= 1 else ""
        where = f" on each of {g} GPUs" if g > 1 else ""
        band = ""
        if self.low_per_gpu_mib != self.per_gpu_mib or self.high_per_gpu_mib != self.per_gpu_mib:
            band = f" ({gib(self.low_per_gpu_mib)[:-4]}–{gib(self.high_per_gpu_mib)})"
        engine = f" on {self.engine}" if self.engine != "generic" else ""
        return f"{gib(self.per_gpu_mib)}{band}{where}{engine}: " + " + ".join(parts) + host


def priced(req: EstimateRequest, *, weights: float, kv: float, overhead: float, activations: float,
           mid: float, low: float, high: float, kv_bytes_per_token: float, shape_known: bool, engine: str,
           notes: list[str], gradients: float = 0.0, optimizer: float = 0.0, host_weights: float = 0.0) -> Estimate:
    """An engine model's estimate from per-GPU byte counts (parts, and the band's low, middle and high).

    ``host_weights``: bytes of weights the engine keeps in host memory, for the whole instance.
    """
    g = max(req.gpus, 1)
    return Estimate(
        request=req, weights_mib=weights * g / MIB, kv_cache_mib=kv * g / MIB, overhead_mib=overhead * g / MIB,
        gradients_mib=gradients * g / MIB, optimizer_mib=optimizer * g / MIB,
        activations_mib=activations * g / MIB, per_gpu_mib=math.ceil(mid / MIB), total_mib=math.ceil(mid * g / MIB),
        kv_bytes_per_token=kv_bytes_per_token, shape_known=shape_known, low_per_gpu_mib=math.ceil(low / MIB),
        high_per_gpu_mib=math.ceil(high / MIB), engine=engine, notes=tuple(notes),
        host_weights_mib=host_weights / MIB,
    )


def _params_h(params: float) -> str:
    if params >= 1e9:
        return f"{params / 1e9:.3g}B"
    return f"{params / 1e6:.3g}M"


def weights_bytes(params: float, precision: str, shape: Shape, spec: ModelSpec | None = None) -> float:
    """Bytes of weights; quantized checkpoints keep embeddings, output head and vision/audio towers in 16-bit.

    AWQ, GPTQ, bitsandbytes, FP8 and MXFP4 checkpoints of multimodal models quantize the language
    model only (their quantization configs skip ``visual``/``vision_tower``/``audio_tower`` modules).
    A natively quantized checkpoint also keeps the modules its entry lists in ``native_16bit`` (Meta's
    Llama-3.1-405B FP8: attention and the first and last MLPs). A catalog entry's native checkpoint size
    (safetensors ``total_size``) is exact where it applies.
    """
    native = spec.checkpoint_bytes if spec is not None else None
    if native and spec is not None and precision == spec.dtype and spec.params:
        return float(native) * params / spec.params
    p = PRECISIONS[precision]
    if p.quantized and not p.gguf:
        towers = float((spec.vision_params or 0) + (spec.audio_params or 0)) if spec is not None else 0.0
        kept = min(params, shape.embedding_params + towers + _native_16bit(params, precision, spec))
        experts = min(params - kept, _native_experts(params, precision, spec))
        expert_bytes = EXPERT_BITS[spec.expert_dtype] / 8 if experts and spec and spec.expert_dtype else 0.0
        return (params - kept - experts) * p.bits / 8 + kept * 2 + experts * expert_bytes
    return params * p.bits / 8


# Bits per routed-expert weight where a native checkpoint stores its experts apart (``ModelSpec.expert_dtype``):
# DeepSeek-V4's MXFP4 experts as vLLM allocates them, two 4-bit values a byte and one e8m0 scale per 32
# (vllm/model_executor/models/deepseek_v4.py DeepseekV4MegaMoEExperts: w13 [E, 2·i, h/2] and its scales
# [E, 2·i, h/32], w2 likewise; the Mxfp4MoEMethod path holds the same). V4's sizes need no padding and its
# experts no biases, so not the 4.6 bits gpt-oss's padded, biased MXFP4 layers cost (units/precision.py).
EXPERT_BITS: dict[str, float] = {"mxfp4": 4 + 8 / 32}


def _native_experts(params: float, precision: str, spec: ModelSpec | None) -> float:
    """Routed-expert parameters a native checkpoint stores at ``expert_dtype`` (DeepSeek-V4: MXFP4), scaled."""
    if spec is None or not spec.expert_dtype or precision != spec.dtype or not spec.params:
        return 0.0
    return spec.routed_expert_params() * params / spec.params


def _native_16bit(params: float, precision: str, spec: ModelSpec | None) -> float:
    """Parameters a natively quantized checkpoint keeps in 16-bit (``native_16bit``), scaled to ``params``."""
    if spec is None or precision != spec.dtype or not spec.native_16bit or not spec.params:
        return 0.0
    return spec.native_16bit_params() * params / spec.params


def weights_per_gpu(req: EstimateRequest, total: float, spec: ModelSpec | None) -> float:
    """Weight bytes on each GPU: ``total`` over ``req.gpus``, except the parts a layout spreads otherwise.

    Routed experts go over ``expert_split`` GPUs and attention (with the embeddings and the head) over
    ``attention_split``; both at the checkpoint's bytes per parameter, the embeddings at 16 bits where a
    quantized checkpoint keeps them so. The rest (dense MLPs, shared experts, norms) stays over ``gpus``.
    """
    g = max(req.gpus, 1)
    if spec is not None and req.pipeline > 1 and not (req.expert_split or req.attention_split):
        # Pipeline stages are not equal (dense layers first, the embedding and the head at the ends):
        # every GPU must hold the heaviest stage's share.
        return total * max(spec.stage_shares(req.pipeline)) / max(1, g // req.pipeline)
    if spec is None or not (req.expert_split or req.attention_split) or not req.params:
        return total / g
    scale = req.params / spec.params if spec.params else 1.0
    p = PRECISIONS[req.precision]
    per_param = p.bits / 8 if not p.gguf else total / req.params
    expert_param = (EXPERT_BITS[spec.expert_dtype] / 8 if spec.expert_dtype and req.precision == spec.dtype
                    else per_param)
    experts = spec.routed_expert_params() * scale * expert_param if req.expert_split else 0.0
    if experts and req.redundant_experts and spec.experts:
        experts *= (spec.experts + req.redundant_experts) / spec.experts
        total += experts * req.redundant_experts / (spec.experts + req.redundant_experts)
    attention = 0.0
    if req.attention_split:
        embed_bytes = 2.0 if p.quantized else per_param
        attention = spec.attention_params() * scale * per_param + spec.embedding_params * embed_bytes
    experts = min(experts, total)
    attention = min(attention, total - experts)
    rest = total - experts - attention
    return rest / g + experts / (req.expert_split or g) + attention / (req.attention_split or g)


def kv_bytes_per_token(req: EstimateRequest, shape: Shape) -> float:
    """KV-cache bytes for one token of one sequence, all layers (2·L·n_kv·head_dim·bytes)."""
    return shape.kv_elements_per_token * kv_bytes(req.precision, req.kv_cache_dtype)


def estimate(req: EstimateRequest) -> Estimate:
    """Estimate the VRAM ``req`` needs, split evenly over its GPUs (tensor parallel)."""
    if req.params <= 0 or req.context <= 0 or req.batch <= 0 or req.gpus <= 0:
        raise ValueError("params, context, batch and gpus must be positive")
    shape = shape_of(req.spec, req.params)
    g = req.gpus
    weights = weights_bytes(req.params, req.precision, shape)
    gradients = optimizer = activations = kv = 0.0
    kv_per_token = kv_bytes_per_token(req, shape)
    if req.workload == "training":
        trainable = req.params * (ADAPTER_FRACTION if PRECISIONS[req.precision].quantized else 1.0)
        grad_bytes = 4 if req.precision == "fp32" else 2
        state_bytes = ADAM_STATE_BYTES_FP32 if req.precision == "fp32" else ADAM_STATE_BYTES
        gradients = trainable * grad_bytes
        optimizer = trainable * state_bytes
        activations = float(
            TRAINING_ACTIVATION_BYTES * req.context * req.batch * shape.hidden_size * shape.layers
        )
        overhead_per_gpu = float(CUDA_CONTEXT_MIB * MIB)
    else:
        tokens = req.context if shape.sliding_window is None else min(req.context, shape.sliding_window)
        kv = kv_per_token * tokens * req.batch
        # KV heads are split across tensor-parallel ranks, and replicated once ranks outnumber them;
        # an MLA latent is replicated on every rank.
        kv_shards = 1 if shape.mla else max(1, min(g, shape.kv_heads))
        kv = kv / kv_shards * g
        if req.spec is not None and req.spec.hybrid:
            # Hybrids: one fixed-size recurrent state per sequence in each state layer, whatever the context.
            kv += req.spec.state_bytes_per_sequence(1) * req.batch
        chunk = min(PREFILL_CHUNK_TOKENS, req.context * req.batch)
        act_per_gpu = INFERENCE_ACTIVATION_BYTES_PER_TOKEN_HIDDEN * chunk * shape.hidden_size / g
        overhead_per_gpu = CUDA_CONTEXT_MIB * MIB + act_per_gpu
    overhead = overhead_per_gpu * g
    total = weights + kv + overhead + gradients + optimizer + activations
    per_gpu = total / g
    return Estimate(
        request=req,
        weights_mib=weights / MIB,
        kv_cache_mib=kv / MIB,
        overhead_mib=overhead / MIB,
        gradients_mib=gradients / MIB,
        optimizer_mib=optimizer / MIB,
        activations_mib=activations / MIB,
        per_gpu_mib=math.ceil(per_gpu / MIB),
        total_mib=math.ceil(total / MIB),
        kv_bytes_per_token=kv_per_token,
        shape_known=shape.known,
    )


def max_context(req: EstimateRequest, usable_mib: float,
                price: Callable[[EstimateRequest], Estimate] | None = None) -> int | None:
    """The largest context (tokens per sequence) whose per-GPU need, as ``price`` says, fits in ``usable_mib``."""
    run = price or estimate
    if run(req.but(context=1)).per_gpu_mib > usable_mib:
        return None
    lo, hi = 1, max(req.context, 1)
    if run(req.but(context=hi)).per_gpu_mib <= usable_mib:
        return hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if run(req.but(context=mid)).per_gpu_mib <= usable_mib:
            lo = mid
        else:
            hi = mid
    return lo


def round_context(tokens: int) -> int:
    """Round a context suggestion down to a friendly multiple (1024 above 4k, 256 above 512)."""
    for step in (1024, 256):
        if tokens >= 4 * step:
            return tokens // step * step
    return tokens
