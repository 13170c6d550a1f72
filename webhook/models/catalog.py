"""The model catalog: architecture facts for widely deployed open models, looked up by name or hub id."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ..units.data import packaged_yaml
from .architectures import is_encoder

# Suffixes that name a packaging of the same weights (quantization, file format), not another model.
_PACKAGING_SUFFIX = re.compile(
    r"([-_.](awq|gptq(-?int[48])?|int[48]|fp8(-dynamic)?|w8a8|w4a16|gguf|bnb(-4bit)?|4bit|8bit|"
    r"q[2-8]_k(_[sml])?|q[458]_[01]|exl2|mlx|hf))+$",
    re.IGNORECASE,
)
_SIZE_IN_NAME = re.compile(r"(?<![0-9a-z.])(\d+(?:\.\d+)?)\s*([bm])(?![a-z0-9])", re.IGNORECASE)
_MOE_IN_NAME = re.compile(r"(\d+)x(\d+(?:\.\d+)?)b", re.IGNORECASE)


@dataclass(frozen=True)
class ModelSpec:
    """Architecture facts of one model, as in its Hugging Face ``config.json``.

    Every field is documented in docs/models.md. Optional fields are ``None`` when they do not apply
    (a dense model has no ``experts``) or were not recorded.
    """

    name: str
    params: float
    layers: int
    hidden_size: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab_size: int
    context: int
    dtype: str = "bf16"
    tie_embeddings: bool = False
    aliases: tuple[str, ...] = ()
    active_params: float | None = None
    experts: int | None = None
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    sliding_window: int | None = None
    # What it is.
    family: str | None = None
    task: str = "generate"
    # MLP and mixture of experts.
    intermediate_size: int | None = None
    mlp: str = "gated"
    experts_per_token: int | None = None
    shared_experts: int | None = None
    moe_intermediate_size: int | None = None
    shared_expert_intermediate_size: int | None = None
    first_dense_layers: int | None = None
    moe_layers: int | None = None
    # Multi-head latent attention (DeepSeek V2/V3, Kimi K2).
    q_lora_rank: int | None = None
    qk_nope_head_dim: int | None = None
    v_head_dim: int | None = None
    # Which layers keep which KV cache.
    sliding_window_layers: int | None = None
    attention_chunk_size: int | None = None
    chunked_layers: int | None = None
    kv_layers: int | None = None
    # The full-attention layers' KV geometry where it is not the sliding ones' (Gemma 4: ``global_head_dim`` 512,
    # and ``num_global_key_value_heads`` under ``attention_k_eq_v``); None: ``head_dim`` / ``kv_heads``.
    global_head_dim: int | None = None
    global_kv_heads: int | None = None
    # Layers with an attention block where some have none (DeciLM / Nemotron-NAS ``block_configs`` whose
    # attention is ``no_op``); None: every layer (hybrids: their KV layers).
    attention_layers: int | None = None
    # The sum of the dense MLP widths where they differ per layer (Nemotron-NAS ``ffn_mult``): the parameter
    # formula counts it, and ``intermediate_size`` is then the widest layer's (the activation peak).
    mlp_width_total: int | None = None
    linear_state_bytes: int | None = None
    # The recurrent state of hybrid (Mamba, Gated DeltaNet, linear attention) layers, per layer and sequence,
    # as vLLM's MambaStateShapeCalculator shapes it (vllm==0.33.0 model_executor/layers/mamba/mamba_utils.py):
    # ``conv_state`` values (conv_dim × (conv_kernel − 1)) kept in the model dtype, ``ssm_state`` values
    # (heads × head_dim × state) in ``ssm_dtype`` (the config's ``mamba_ssm_dtype``; None: the model dtype).
    # Both are split over tensor-parallel ranks. ``state_layers``: how many layers keep one.
    state_layers: int | None = None
    # Layers with a dense MLP when not every non-MoE layer has one (Nemotron-H: 25 of 56; None: all of them).
    mlp_layers: int | None = None
    conv_state: int | None = None
    ssm_state: int | None = None
    ssm_dtype: str | None = None
    conv_kernel: int = 4  # the state layers' conv kernel: conv_state keeps kernel − 1 positions (+ draft tokens)
    # DeepSeek-V4's attention (config.json keys): one shared K=V head of ``head_dim`` (its last
    # ``qk_rope_head_dim`` rotated), a grouped low-rank output projection (``o_groups`` × ``o_lora_rank``), and
    # per layer a KV compression ratio (``compress_ratios``): a layer of ratio m > 1 caches one entry per m
    # tokens (ratio 4 also a lightning-indexer key of ``index_head_dim``); ratio 0 or 1 keeps only the
    # sliding window. Its checkpoints store the routed experts apart (``expert_dtype`` fp4: MXFP4).
    o_lora_rank: int | None = None
    o_groups: int | None = None
    compress_ratios: tuple[int, ...] = ()
    index_head_dim: int | None = None
    index_n_heads: int | None = None
    expert_dtype: str | None = None
    # Multi-token-prediction layers the checkpoint carries (mtp_num_hidden_layers): vLLM builds them, with their
    # attention's KV cache, only when speculative decoding uses them (--speculative-config method mtp).
    mtp_layers: int | None = None
    # A ModelOpt checkpoint's ``quant_algo`` (hf_quant_config.json / quantization_config): FP8, NVFP4,
    # MIXED_PRECISION. vLLM's ``--quantization modelopt`` serves whatever it says (modelopt.py
    # ``override_quantization_method``), so it decides the weights' bytes, not the flag.
    quant_algo: str | None = None
    # Exact bytes of the native checkpoint (safetensors index metadata.total_size).
    checkpoint_bytes: int | None = None
    # Modules a natively quantized checkpoint leaves in 16-bit beyond the embeddings and the output head
    # (its quantization_config ``modules_to_not_convert``, summarised; see NATIVE_16BIT_PARTS).
    native_16bit: tuple[str, ...] = ()
    # Vision and audio towers.
    vision_params: float | None = None
    max_image_tokens: int | None = None
    audio_params: float | None = None
    # Why computed_params cannot reproduce params (hybrid layers the formula does not model).
    params_exempt: str | None = None
    verified: bool = True

    @property
    def embedding_params(self) -> float:
        """Parameters in the token embedding and the output head (one matrix when tied)."""
        matrices = 1 if self.tie_embeddings else 2
        return float(self.vocab_size * self.hidden_size * matrices)

    @property
    def is_moe(self) -> bool:
        return bool(self.experts)

    def routed_expert_params(self) -> float:
        """Parameters of the routed experts (every MoE layer's experts, not the shared ones nor the router).

        What expert parallelism divides: ``moe_layers`` (or ``layers - first_dense_layers``) × ``experts`` ×
        one expert MLP of ``moe_intermediate_size``, as in config.json. 0 for a dense model.
        """
        if not self.experts:
            return 0.0
        return min(self.params, _moe_layer_count(self) * self.experts * _expert_params(self))

    def stage_shares(self, stages: int) -> list[float]:
        """Each pipeline stage's share of the parameters, layers split as vLLM splits them.

        vllm/distributed/utils.py ``get_pp_indices``: ``layers // stages`` each, the remainder one more each on the
        stages before the last (from the second-to-last backwards); the embedding on the first stage, the LM head
        on the last. Dense layers come first (``first_dense_layers``), so the stages differ in weight.
        """
        if stages <= 1 or (self.intermediate_size is None and self.moe_intermediate_size is None):
            return [1.0]
        per = [self.layers // stages] * stages
        for i in range(2, self.layers % stages + 2):
            per[-min(i, stages)] += 1
        dense = self.layers - _moe_layer_count(self)
        attention = _attention_params(self)
        dense_mlp = _mlp_params(self.hidden_size, self.intermediate_size or 0, self.mlp)
        moe = 0.0
        if self.experts:
            shared_size = (self.shared_expert_intermediate_size or self.moe_intermediate_size
                           or self.intermediate_size or 0)
            moe = (self.experts * _expert_params(self)
                   + (self.shared_experts or 0) * _mlp_params(self.hidden_size, shared_size, self.mlp)
                   + self.hidden_size * self.experts)
        vocab = float(self.vocab_size * self.hidden_size)
        out: list[float] = []
        layer = 0
        for stage, count in enumerate(per):
            total = sum(attention + (dense_mlp if i < dense else moe) for i in range(layer, layer + count))
            layer += count
            total += vocab if stage == 0 else 0.0
            total += vocab if stage == stages - 1 else 0.0
            out.append(total)
        whole = sum(out)
        return [s / whole for s in out] if whole else [1.0 / stages] * stages

    def layer_shares(self) -> list[float]:
        """Each block's share of the blocks' parameters: dense blocks first (``first_dense_layers``), then MoE."""
        if self.layers <= 0:
            return []
        dense = self.layers - _moe_layer_count(self)
        attention = _attention_params(self)
        dense_mlp = _mlp_params(self.hidden_size, self.intermediate_size or 0, self.mlp)
        moe = dense_mlp
        if self.experts:
            shared_size = (self.shared_expert_intermediate_size or self.moe_intermediate_size
                           or self.intermediate_size or 0)
            moe = (self.experts * _expert_params(self)
                   + (self.shared_experts or 0) * _mlp_params(self.hidden_size, shared_size, self.mlp))
        sizes = [attention + (dense_mlp if i < dense else moe) for i in range(self.layers)]
        whole = sum(sizes)
        return [s / whole for s in sizes] if whole else [1.0 / self.layers] * self.layers

    def native_16bit_params(self) -> float:
        """Parameters the native quantized checkpoint keeps in 16-bit besides the embeddings and the head.

        ``attention``: every layer's attention projections; ``router``: every MoE layer's router;
        ``mlp.<i>``: the dense MLP of layer ``i`` (negative: counted from the end).
        """
        total = 0.0
        for part in self.native_16bit:
            if part == "attention":
                total += self.attention_params()
            elif part == "router":
                total += _moe_layer_count(self) * self.hidden_size * (self.experts or 0)
            else:
                total += _mlp_params(self.hidden_size, self.intermediate_size or 0, self.mlp)
        return min(total, self.params)

    def attention_params(self) -> float:
        """Parameters of every attention block (Q, K, V, O, or MLA's low-rank form): what DP attention replicates."""
        blocks = self.attention_layers if self.attention_layers is not None else self.cache_layers
        return min(self.params, _attention_blocks_params(self, blocks) + _compressor_params(self))

    @property
    def mla(self) -> bool:
        return bool(self.kv_lora_rank)

    @property
    def cache_layers(self) -> int:
        """Layers that keep a per-token KV cache (hybrids keep it in their attention layers only)."""
        return self.kv_layers if self.kv_layers is not None else self.layers

    @property
    def hybrid(self) -> bool:
        """Whether some layers keep a fixed-size recurrent state instead of (or beside) a per-token KV cache."""
        return bool(self.state_layers) and bool(self.conv_state or self.ssm_state)

    def state_bytes_per_layer(self, tp: int = 1, draft_tokens: int = 0) -> int:
        """Bytes of one sequence's recurrent state in one state layer on one of ``tp`` ranks (vLLM MambaSpec).

        ``page_size_bytes`` = Σ prod(shape) × dtype size over (conv, ssm) (vllm==0.33.0 v1/kv_cache_interface.py
        MambaSpec); conv in the model's 16-bit dtype (``mamba_cache_dtype`` auto), the ssm state in ``ssm_dtype``.
        Speculative decoding widens the conv state by its draft tokens (``conv_kernel − 1 + num_spec`` rows,
        mamba_utils.py ``gated_delta_net_state_shape`` / ``mamba2_state_shape``).
        """
        if not self.hybrid:
            return 0
        ssm_bytes = 4 if self.ssm_dtype == "fp32" else 2
        ranks = max(tp, 1)
        rows = max(self.conv_kernel - 1, 1)
        conv = (self.conv_state or 0) * (rows + max(draft_tokens, 0)) // rows
        return conv // ranks * 2 + (self.ssm_state or 0) // ranks * ssm_bytes

    def state_bytes_per_sequence(self, tp: int = 1) -> int:
        """Recurrent-state bytes one sequence keeps over every state layer on one rank."""
        if self.hybrid:
            return (self.state_layers or 0) * self.state_bytes_per_layer(tp)
        return (self.linear_state_bytes or 0) // max(tp, 1)

    @property
    def compressed_kv(self) -> bool:
        """Whether the cache is DeepSeek-V4's compressed one (per-layer ratios, a fixed fp8 entry layout)."""
        return bool(self.compress_ratios)

    def compressed_entry_bytes(self) -> tuple[int, int]:
        """Bytes of one compressed KV entry and of one indexer key, in the layouts vLLM allocates.

        The entry (``fp8_ds_mla``, vllm/model_executor/layers/deepseek_v4_attention.py ``head_bytes`` and
        v1/kv_cache_interface.py ``MLAAttentionSpec`` "448B NoPE + 128B RoPE + 8B fp8 scale = 584B"): the
        non-rotated part in fp8, the rotated part in bf16, one scale byte per 64 values and one pad byte. The
        indexer key (``DeepseekV4IndexerCache``): ``index_head_dim`` fp8 values and a 4-byte scale per 128.
        """
        rope = self.qk_rope_head_dim or 0
        nope = self.head_dim - rope
        entry = nope + 2 * rope + nope // 64 + 1
        index = self.index_head_dim or 0
        return entry, index + index // 128 * 4

    def _compressed_bytes(self, tokens: int) -> int:
        """Bytes the compressed caches of every layer keep for ``tokens`` tokens (entries rounded up).

        vLLM gives a layer of ratio m > 1 a cache of ceil(tokens / m) entries (``storage_block_size`` =
        block_size // compress_ratio) and ratio-4 layers an indexer cache of as many keys ("Only C4A uses
        sparse attention and hence has indexer", deepseek_v4.py). Left out: the ``sliding_window`` every layer
        also keeps (window − 1 + the tokens being prefilled, which the vLLM model adds: engines/vllm.py
        ``compressed_window_bytes``) and the pages' rounding to 576 bytes (``alignment=576``: under 2 % at block
        size 256).
        """
        entry, index = self.compressed_entry_bytes()
        total = 0
        for ratio in self.compress_ratios[: self.layers]:
            if ratio > 1:
                total += -(-tokens // ratio) * (entry + (index if ratio == 4 else 0))
        return total

    def kv_width(self, local: bool = False) -> int:
        """KV values one token keeps in one cache layer: a full-attention layer, or (``local``) a sliding or
        chunked one. MLA keeps one latent; Gemma 4's full layers keep ``global_kv_heads`` × ``global_head_dim``."""
        if self.kv_lora_rank:
            return self.kv_lora_rank + (self.qk_rope_head_dim or 0)
        if local:
            return 2 * self.kv_heads * self.head_dim
        return 2 * (self.global_kv_heads or self.kv_heads) * (self.global_head_dim or self.head_dim)

    def cache_layer_split(self) -> tuple[int, int, int]:
        """The cache layers as (full, sliding-window, chunked-local)."""
        layers = self.cache_layers
        windowed = min(self.sliding_window_layers or 0, layers) if self.sliding_window else 0
        chunked = min(self.chunked_layers or 0, layers - windowed) if self.attention_chunk_size else 0
        return layers - windowed - chunked, windowed, chunked

    def kv_elements_per_token(self) -> int:
        """KV-cache values stored per token across all layers (MLA stores one compressed latent).

        Every cache layer is counted as if it held the whole sequence: sliding-window and chunked
        layers hold less, which ``kv_elements_for(tokens)`` accounts for. DeepSeek-V4's compressed caches
        are counted in bytes of their fp8 layout (one value a byte: ``EstimateRequest`` prices them as fp8),
        averaged over a long sequence.
        """
        if self.compressed_kv:
            return -(-self._compressed_bytes(1 << 20) // (1 << 20))
        full, windowed, chunked = self.cache_layer_split()
        return full * self.kv_width() + (windowed + chunked) * self.kv_width(local=True)

    def kv_elements_for(self, tokens: int) -> int:
        """KV-cache values one sequence of ``tokens`` tokens keeps, window and chunk limits applied."""
        if self.compressed_kv:
            return self._compressed_bytes(tokens)
        full, windowed, chunked = self.cache_layer_split()
        local = 0
        if windowed:
            local += windowed * min(tokens, self.sliding_window or tokens)
        if chunked:
            local += chunked * min(tokens, self.attention_chunk_size or tokens)
        return full * tokens * self.kv_width() + local * self.kv_width(local=True)


_FIELDS = {f for f in ModelSpec.__dataclass_fields__}
_FLOAT_FIELDS = ("params", "active_params", "vision_params", "audio_params")
TASKS = ("generate", "embed", "rerank")
MLP_KINDS = ("gated", "plain")
# What ``native_16bit`` may name: all attention projections, all MoE routers, or one layer's dense MLP.
NATIVE_16BIT_PARTS = re.compile(r"^(attention|router|mlp\.-?\d+)$")


def spec_from_mapping(entry: Mapping[str, Any]) -> ModelSpec:
    """Build a ModelSpec from a catalog entry, ignoring bookkeeping keys other than ``verified``."""
    data = {k: v for k, v in entry.items() if k in _FIELDS}
    data["aliases"] = tuple(str(a) for a in data.get("aliases") or ())
    data["native_16bit"] = tuple(str(p) for p in data.get("native_16bit") or ())
    data["compress_ratios"] = tuple(int(r) for r in data.get("compress_ratios") or ())
    if data["compress_ratios"] and len(data["compress_ratios"]) < int(data["layers"]):
        raise ValueError(f"{data.get('name')}: compress_ratios names {len(data['compress_ratios'])} of "
                         f"{data['layers']} layers")
    if data.get("expert_dtype") not in (None, "mxfp4"):
        raise ValueError(f"{data.get('name')}: expert_dtype must be mxfp4 (experts stored as the rest need none)")
    for part in data["native_16bit"]:
        if not NATIVE_16BIT_PARTS.match(part):
            raise ValueError(f"{data.get('name')}: native_16bit part {part!r} is not attention, router or mlp.<i>")
    for key in _FLOAT_FIELDS:
        if data.get(key) is not None:
            data[key] = float(data[key])
    if data.get("checkpoint_bytes") is not None:
        data["checkpoint_bytes"] = int(data["checkpoint_bytes"])
    if not data.get("head_dim"):
        data["head_dim"] = int(data["hidden_size"]) // int(data["heads"])
    if not data.get("kv_heads"):
        data["kv_heads"] = data["heads"]
    if data.get("task", "generate") not in TASKS:
        raise ValueError(f"{data.get('name')}: task must be one of {TASKS}")
    if data.get("mlp", "gated") not in MLP_KINDS:
        raise ValueError(f"{data.get('name')}: mlp must be one of {MLP_KINDS}")
    if data.get("ssm_dtype") not in (None, "fp32", "bf16", "fp16"):
        raise ValueError(f"{data.get('name')}: ssm_dtype must be fp32, bf16 or fp16")
    if data.get("verified") is None:
        data.pop("verified", None)
    return ModelSpec(**data)


# ---------------------------------------------------------------------------------------------
# Parameters from the architecture: the data check that every entry's numbers hang together.


def _attention_params(spec: ModelSpec) -> float:
    """Weights of one attention block: Q, K, V, O projections (GQA) or the MLA low-rank form."""
    h = spec.hidden_size
    if spec.o_lora_rank:
        # DeepSeek-V4 (vllm deepseek_v4.py DeepseekV4Attention): wq_a, wq_b, one shared K=V projection wkv, the
        # grouped output wo_a (heads·head_dim → o_groups·o_lora_rank) and wo_b (the KV compressors and indexers,
        # which differ by layer, are ``_compressor_params``; the hyper-connection mixers are left out: < 0.01 %).
        q_rank = spec.q_lora_rank or h
        q = h * q_rank + q_rank * spec.heads * spec.head_dim if spec.q_lora_rank else h * spec.heads * spec.head_dim
        kv = h * spec.kv_heads * spec.head_dim
        o = spec.heads * spec.head_dim * spec.o_lora_rank + (spec.o_groups or 1) * spec.o_lora_rank * h
        return float(q + kv + o)
    if spec.kv_lora_rank:
        nope = spec.qk_nope_head_dim or spec.head_dim
        rope = spec.qk_rope_head_dim or 0
        v = spec.v_head_dim or spec.head_dim
        qk = spec.heads * (nope + rope)
        q = h * spec.q_lora_rank + spec.q_lora_rank * qk if spec.q_lora_rank else h * qk
        kv = h * (spec.kv_lora_rank + rope) + spec.kv_lora_rank * spec.heads * (nope + v)
        return float(q + kv + spec.heads * v * h)
    q_and_o = 2 * h * spec.heads * spec.head_dim
    k_and_v = 2 * h * spec.kv_heads * spec.head_dim
    return float(q_and_o + k_and_v)


def _attention_blocks_params(spec: ModelSpec, blocks: int) -> float:
    """Weights of ``blocks`` attention blocks; Gemma 4's full-attention ones at their own head size and KV heads.

    Which blocks are full follows ``sliding_window_layers`` (the rest of ``blocks``). K and V both count where
    ``attention_k_eq_v`` shares them: vLLM's QKV projection keeps a V slot it fills with K (gemma4.py).
    """
    if spec.kv_lora_rank or not (spec.global_head_dim or spec.global_kv_heads):
        return blocks * _attention_params(spec)
    windowed = min(spec.sliding_window_layers or 0, blocks) if spec.sliding_window else 0
    head = spec.global_head_dim or spec.head_dim
    full = 2 * spec.hidden_size * (spec.heads + (spec.global_kv_heads or spec.kv_heads)) * head
    return windowed * _attention_params(spec) + (blocks - windowed) * float(full)


def _compressor_params(spec: ModelSpec) -> float:
    """DeepSeek-V4's KV compressors and lightning indexers, over every layer; 0 for other models.

    As its checkpoints hold them (the DeepSeek-V4-Pro tensor list; vllm deepseek_v4_attention.py
    ``DeepseekCompressor``, ``DeepseekV4Indexer``): a layer of ratio m > 1 has a compressor (wkv and wgate of
    hidden × w, w = head_dim, doubled at ratio 4 where the windows overlap); a ratio-4 layer also has an indexer
    (wq_b q_lora_rank × heads·index_head_dim, its own compressor of w = 2·index_head_dim, weights_proj).
    """
    h = spec.hidden_size
    index_dim, index_heads = spec.index_head_dim or 0, spec.index_n_heads or 0
    total = 0
    for ratio in spec.compress_ratios[: spec.layers]:
        if ratio <= 1:
            continue
        total += 2 * h * spec.head_dim * (2 if ratio == 4 else 1)
        if ratio == 4:
            total += ((spec.q_lora_rank or h) * index_heads * index_dim + 2 * h * 2 * index_dim
                      + h * index_heads)
    return float(total)


def _mlp_params(hidden: int, intermediate: int, kind: str) -> float:
    """One MLP: gate, up and down matrices (SwiGLU/GeGLU) or up and down only (GPT-2, StarCoder)."""
    return float((3 if kind == "gated" else 2) * hidden * intermediate)


def _moe_layer_count(spec: ModelSpec) -> int:
    if not spec.experts:
        return 0
    if spec.moe_layers is not None:
        return spec.moe_layers
    return spec.layers - (spec.first_dense_layers or 0)


def _expert_params(spec: ModelSpec) -> float:
    size = spec.moe_intermediate_size or spec.intermediate_size or 0
    return _mlp_params(spec.hidden_size, size, spec.mlp)


def computed_params(spec: ModelSpec, active: bool = False) -> float:
    """Parameters implied by the architecture fields: embeddings + attention + MLP/MoE (+ towers).

    Norms, biases and position tables are left out (well under 1 %). ``active=True`` counts the
    experts one token runs through (``experts_per_token``) instead of all of them; embeddings and
    towers count in both. Raises ValueError when ``intermediate_size`` is missing.
    """
    if spec.intermediate_size is None and spec.moe_intermediate_size is None:
        raise ValueError(f"{spec.name}: no intermediate_size")
    h = spec.hidden_size
    # Hybrids run softmax attention only in their KV layers (their state layers are counted by no formula here);
    # Nemotron-NAS only in the blocks whose attention is not a no-op.
    attention_layers = spec.cache_layers if spec.hybrid else spec.layers
    if spec.attention_layers is not None:
        attention_layers = spec.attention_layers
    total = spec.embedding_params + _attention_blocks_params(spec, attention_layers) + _compressor_params(spec)
    moe_layers = _moe_layer_count(spec)
    dense_layers = spec.layers - moe_layers if spec.mlp_layers is None else spec.mlp_layers
    if spec.mlp_width_total:
        total += _mlp_params(h, spec.mlp_width_total, spec.mlp)
    elif dense_layers:
        total += dense_layers * _mlp_params(h, spec.intermediate_size or 0, spec.mlp)
    if moe_layers:
        experts = spec.experts or 0
        routed = (spec.experts_per_token or experts) if active else experts
        shared_size = spec.shared_expert_intermediate_size or spec.moe_intermediate_size or spec.intermediate_size or 0
        per_layer = (routed * _expert_params(spec)
                     + (spec.shared_experts or 0) * _mlp_params(h, shared_size, spec.mlp)
                     + h * experts)  # the router
        total += moe_layers * per_layer
    return total + (spec.vision_params or 0.0) + (spec.audio_params or 0.0)


# ---------------------------------------------------------------------------------------------
# Names: hub ids, community quantizations, file names, local paths, Ollama tags.


@dataclass(frozen=True)
class Resolved:
    """A model reference matched to a catalog entry, with the quantization its name says it carries."""

    spec: ModelSpec
    quantization: str | None
    how: str


# Ollama pulls Q4_K_M unless the tag names another quantization.
OLLAMA_DEFAULT_QUANT = "q4_k_m"
# Checkpoints whose native weights are already quantized; Ollama ships them as they are.
NATIVE_QUANTIZED = ("mxfp4", "int4")
_SCHEMES = re.compile(r"^(hf|pvc|s3|gs|gcs|oci|file|az|abfs|https?)://", re.IGNORECASE)
_SHARD = re.compile(r"[-_.]0*\d+-of-0*\d+$", re.IGNORECASE)
_GGUF_QUANT = re.compile(r"(?:^|[-_.])(i?q[1-8]_(?:k_[sml]|k|[01]|xxs|xs|s|m|nl)|f16|bf16|fp16|f32)$", re.IGNORECASE)
# Trailing tokens that name a packaging of the weights, not another model, and what each says.
_TOKEN = re.compile(
    r"[-_.](fp8[-_]kv|awq|gptq|int4|int8|fp8|dynamic|static|w4a16|w8a8|w8a16|w4a8|quantized|bnb|4bit|8bit|gguf|"
    r"exl2|mlx|hf|unsloth|marlin|nf4|nvfp4|ov|onnx|autoround|auto-round)$",
    re.IGNORECASE,
)
_ORG_HOW = {
    "thebloke": "TheBloke community repo",
    "unsloth": "unsloth repo",
    "redhatai": "RedHatAI (Neural Magic) repo",
    "neuralmagic": "Neural Magic repo",
    "cortecs": "cortecs repo",
    "cognitivecomputations": "cognitivecomputations repo",
    "bartowski": "bartowski GGUF repo",
    "lmstudio-community": "LM Studio community repo",
    "hugging-quants": "hugging-quants repo",
    "casperhansen": "casperhansen repo",
    "nvidia": "NVIDIA ModelOpt repo",
    # AMD's Quark FP8 checkpoints for Instinct GPUs (amd/Llama-3.1-70B-Instruct-FP8-KV: FP8 weights, activations
    # and KV scales; the KV cache stays in the model's dtype unless --kv-cache-dtype fp8 says otherwise).
    "amd": "AMD Quark repo",
}


def _ollama(spec: ModelSpec, quant: str | None) -> Resolved:
    """An Ollama tag's quantization: the one it names, else the model's native one or Q4_K_M."""
    if quant:
        return Resolved(spec, quant, "Ollama tag")
    if spec.dtype in NATIVE_QUANTIZED:
        return Resolved(spec, spec.dtype, f"Ollama tag (native {spec.dtype})")
    return Resolved(spec, OLLAMA_DEFAULT_QUANT, "Ollama tag (default Q4_K_M)")


def _orgs(spec: ModelSpec) -> set[str]:
    return {a.split("/", 1)[0].lower() for a in spec.aliases if "/" in a}


def _quant_of(tokens: list[str], gguf: str | None) -> str | None:
    """The quantization the stripped tokens (outermost first) and a GGUF quant type name."""
    t = set(tokens)
    if gguf:
        g = gguf.lower()
        return {"f16": "fp16", "f32": "fp32"}.get(g, g)
    if "nvfp4" in t:
        return "nvfp4"  # NVIDIA ModelOpt FP4 checkpoints (nvidia/DeepSeek-R1-NVFP4, nvidia/Kimi-K2.5-NVFP4)
    if "gptq" in t or "awq" in t or "w4a16" in t or "w4a8" in t:
        return "int8" if "int8" in t else "int4"
    if "fp8" in t or "fp8-kv" in t or "fp8_kv" in t:
        return "fp8"
    if "w8a8" in t or "w8a16" in t or "int8" in t or "8bit" in t:
        return "int8"
    if "nf4" in t or ("bnb" in t and "4bit" in t) or ("bnb" in t and "8bit" not in t):
        return "nf4"
    if "int4" in t or "4bit" in t:
        return "int4"
    return None


def _split_packaging(base: str) -> tuple[str, list[str], str | None]:
    """Strip file extensions, shard counters, GGUF quant names and packaging tokens off a name."""
    name = base
    gguf: str | None = None
    if name.endswith(".gguf"):
        name = name[: -len(".gguf")]
        gguf = "gguf"
    name = _SHARD.sub("", name)
    tokens: list[str] = []
    while True:
        m = _GGUF_QUANT.search(name)
        if m and (gguf or "gguf" in tokens or m.start() > 0):
            gguf = m.group(1)
            name = name[: m.start()]
            continue
        m = _TOKEN.search(name)
        if m:
            tokens.append(m.group(1).lower())
            name = name[: m.start()]
            continue
        break
    if gguf == "gguf":
        gguf = None
        tokens.append("gguf")
    return name, tokens, gguf


def normalize(name: str) -> str:
    """Lower-case a model reference and drop an organisation prefix, a revision and a local path."""
    text = name.strip().strip("/").lower()
    text = text.split("@", 1)[0].split(":", 1)[0] if "/" in text else text
    return text.rsplit("/", 1)[-1]


class Catalog:
    """Immutable index of model specs by every alias, case-insensitively."""

    def __init__(self, specs: Iterable[ModelSpec]) -> None:
        self._specs: list[ModelSpec] = []
        self._index: dict[str, ModelSpec] = {}
        for spec in specs:
            self._add(spec)

    def _add(self, spec: ModelSpec) -> None:
        self._specs.append(spec)
        for key in (spec.name, *spec.aliases):
            # Exact (lower-case) hub ids first; the short form without the organisation as well.
            self._index[key.lower()] = spec
            self._index.setdefault(normalize(key), spec)

    def with_entries(self, entries: Iterable[Mapping[str, Any]]) -> Catalog:
        """A new catalog with config-supplied entries added (they win over built-in ones)."""
        extra = [spec_from_mapping(e) for e in entries]
        return Catalog([*self._specs, *extra])

    def __len__(self) -> int:
        return len(self._specs)

    def __iter__(self) -> Iterator[ModelSpec]:
        return iter(self._specs)

    def get(self, name: str) -> ModelSpec | None:
        """An entry by its exact name or alias (case-insensitive), with no pattern matching."""
        return self._index.get(name.strip().lower())

    def lookup(self, name: str) -> ModelSpec | None:
        """Find a model by name, alias or hub id; packaging suffixes (``-AWQ``, ``-GGUF``) are ignored."""
        found = self.resolve(name)
        return found.spec if found else None

    def resolve(self, name: str) -> Resolved | None:
        """Match a model reference to an entry and the quantization its name carries.

        Handles catalog names and aliases, hub ids with an organisation, community quantized repos
        (``-AWQ``, ``-GPTQ-Int4``, ``-FP8-Dynamic``, ``-bnb-4bit``, ``-quantized.w4a16``, ``-GGUF``),
        GGUF file names (``*.Q4_K_M.gguf``), local paths, ``hf://``/``pvc://`` URIs and Ollama tags.
        """
        raw = name.strip()
        if not raw:
            return None
        text = raw.lower()
        scheme = _SCHEMES.match(text)
        if scheme:
            text = text[scheme.end():]
        text = text.rstrip("/")
        for prefix in ("hf.co/", "huggingface.co/", "registry.ollama.ai/library/", "ollama.com/library/"):
            text = text.removeprefix(prefix)
        head, colon, tag = text.partition(":")
        if colon and "/" not in head and not scheme:
            # Ollama: "qwen2.5:14b", "llama3.1:8b-instruct-q8_0", "llama3.1:latest".
            ollama = self._resolve_ollama(head, tag)
            if ollama is not None:
                return ollama
        found = self._index.get(text)
        if found is not None:
            return Resolved(found, None, "alias")
        if colon and "/" in head:
            # org/repo-GGUF:Q8_0 picks a file of a GGUF repo; org/repo:revision names a revision.
            hit = self._resolve_path(head, scheme is not None)
            if hit is None:
                return None
            tag_quant = _GGUF_QUANT.search("-" + tag)
            if tag_quant and "gguf" in head:
                return Resolved(hit.spec, _quant_of([], tag_quant.group(1)), "GGUF repo with a quant tag")
            return hit
        return self._resolve_path(text.split("@", 1)[0], scheme is not None)

    def _resolve_ollama(self, model: str, tag: str) -> Resolved | None:
        quant: str | None = None
        m = re.search(r"-(q[1-8]_(?:k_[sml]|k|[01])|iq[1-4]_\w+|fp16|bf16|f16|mxfp4)$", tag)
        if m:
            quant = _quant_of([], m.group(1))
        exact = self._index.get(f"{model}:{tag}")
        if exact is not None:
            return _ollama(exact, quant)
        if tag == "latest":
            spec = self._index.get(model)
            return _ollama(spec, None) if spec else None
        if m:
            tag = tag[: m.start()]
        candidates = [f"{model}:{tag}"]
        # "8b-instruct", "8b-text", "14b-instruct": the size tag carries the architecture.
        size = re.match(r"^(\d+(?:\.\d+)?[bmk]?(?:-a\d+(?:\.\d+)?b)?|\d+x\d+b|e\d+b)", tag)
        if size:
            candidates.append(f"{model}:{size.group(1)}")
        for key in candidates:
            spec = self._index.get(key)
            if spec is not None:
                return _ollama(spec, quant)
        return None

    def _resolve_path(self, text: str, uri: bool) -> Resolved | None:
        parts = [p for p in text.split("/") if p and p not in (".", "..")]
        if not parts:
            return None
        # The Hugging Face cache: .../models--org--name/snapshots/<revision>[/file]
        for i, part in enumerate(parts):
            if part.startswith("models--") and part.count("--") >= 2:
                org, _, repo = part[len("models--"):].partition("--")
                rest = parts[i + 1:]
                tail = [rest[-1]] if rest and rest[-1].endswith(".gguf") else []
                parts = [org, repo, *tail]
                break
        base = parts[-1]
        org = parts[-2] if len(parts) >= 2 else ""
        local = uri or text.startswith("/") or len(parts) > 2
        stripped, tokens, gguf = _split_packaging(base)
        quant = _quant_of(tokens, gguf)
        for key in self._keys_for(org, stripped):
            spec = self._index.get(key)
            if spec is None:
                continue
            if base.endswith(".gguf"):
                how = "GGUF file name"
            elif "gguf" in tokens:
                how = "community GGUF repo (Q4_K_M unless a file is named)"
                quant = quant or OLLAMA_DEFAULT_QUANT
            elif local and not _ORG_HOW.get(org):
                how = "local path or volume" + (" (quantized name)" if quant else "")
            elif org in _ORG_HOW:
                how = _ORG_HOW[org]
            elif org and org in _orgs(spec):
                how = "official quantized release" if quant else "official repo with a packaging suffix"
            elif tokens:
                how = "community quantized repo" if quant else "packaging suffix"
            else:
                how = "alias without organisation"
            return Resolved(spec, quant, how)
        # A GGUF file in a folder named after the model: /models/Qwen2.5-7B-Instruct-GGUF/model.gguf
        if len(parts) >= 2 and base.endswith(".gguf"):
            hit = self._resolve_path("/".join(parts[:-1]), uri)
            if hit is not None:
                return Resolved(hit.spec, quant or hit.quantization, "GGUF file in a model folder")
        return None

    def _keys_for(self, org: str, stripped: str) -> list[str]:
        keys = [f"{org}/{stripped}" if org else stripped, stripped]
        # unsloth re-uploads: "unsloth/Meta-Llama-3.1-8B-Instruct", "unsloth/llama-3-8b-Instruct".
        for prefix in ("unsloth-", "meta-"):
            if stripped.startswith(prefix):
                keys.append(stripped[len(prefix):])
        for suffix in ("-unsloth", "-dynamic", "-hf"):
            if stripped.endswith(suffix):
                keys.append(stripped[: -len(suffix)])
        return keys


def params_from_name(name: str) -> float | None:
    """Guess a parameter count from a model id such as ``acme/coder-13b-chat`` (``8x7b`` is not guessed)."""
    base = normalize(name)
    if _MOE_IN_NAME.search(base):
        return None
    matches = _SIZE_IN_NAME.findall(base)
    if len(matches) != 1:
        return None
    number, unit = matches[0]
    return float(number) * (1e9 if unit.lower() == "b" else 1e6)


@lru_cache(maxsize=1)
def builtin_catalog() -> Catalog:
    """The catalog shipped in ``webhook/data/models.yaml``."""
    data = packaged_yaml("models.yaml") or {}
    return Catalog(spec_from_mapping(e) for e in data.get("models", []))


# ---------------------------------------------------------------------------------------------
# Entries from a Hugging Face config.json (``vramgate models import``).


class ConfigImportError(ValueError):
    """A config.json that cannot become a catalog entry."""


# Keys vLLM reads for the model's length, smallest wins (vllm/config.py ``_get_and_verify_max_len``).
_LENGTH_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
                "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len")
_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "bf16": "bf16", "fp16": "fp16", "fp32": "fp32"}


def derived_max_len(config: Mapping[str, Any]) -> int:
    """The max_model_len vLLM derives from a (text) config when none is given.

    The smallest of the length keys; ``model_max_length`` wins where present (Command-R, Cohere2);
    rope scaling other than ``su``/``longrope``/``llama3`` multiplies by ``factor``, and ``yarn``
    multiplies ``original_max_position_embeddings``; Gemma 3's length is already scaled.
    """
    lengths = [int(config[k]) for k in _LENGTH_KEYS if isinstance(config.get(k), int | float)]
    derived = min(lengths) if lengths else 2048
    if isinstance(config.get("model_max_length"), int):
        derived = int(config["model_max_length"])
    rope = config.get("rope_scaling")
    if isinstance(rope, Mapping) and "gemma3" not in str(config.get("model_type", "")):
        rope_type = rope.get("rope_type") or rope.get("type") or "default"
        if rope_type == "mrope":
            rope_type = "default"
        if rope_type not in ("su", "longrope", "llama3"):
            factor = float(rope.get("factor", 1.0) or 1.0)
            if rope_type == "yarn" and rope.get("original_max_position_embeddings"):
                derived = int(rope["original_max_position_embeddings"])
            derived = int(derived * factor)
    return derived


def _first(config: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        if config.get(key) is not None:
            return config[key]
    return None


def _ssm_dtype(value: Any) -> str | None:
    return {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}.get(str(value or "").lower())


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def attention_free(text: Mapping[str, Any]) -> bool:
    """Whether a config is a pure Mamba stack (Mamba, Falcon-Mamba, Mamba-2): no attention heads, a state."""
    return (str(text.get("model_type", "")) in ("mamba", "falcon_mamba", "mamba2")
            and not text.get("num_attention_heads") and bool(_int(text.get("state_size"))))


def hybrid_fields(text: Mapping[str, Any], layers: int, hidden: int) -> dict[str, Any]:
    """The recurrent-state fields of a hybrid config, shaped as vLLM shapes them (vllm==0.33.0).

    Per layer and sequence, before TP (model_executor/layers/mamba/mamba_utils.py ``MambaStateShapeCalculator``
    and each model's ``get_mamba_state_shape_from_config``):

    - Gated DeltaNet (Qwen3-Next, Qwen3.5/3.6: ``linear_num_key_heads``): conv (2·k·dk + v·dv) × (kernel − 1),
      state v × dv × dk; ssm dtype from ``mamba_ssm_dtype`` (config.py Qwen3_5ForConditionalGenerationConfig).
    - Mamba-2 (Nemotron-H ``hybrid_override_pattern``, Granite-4.0-H ``layer_types`` "mamba", Falcon-H1 parallel
      in every layer, Bamba ``attn_layer_indices``): conv (d_inner + 2·groups·d_state) × (kernel − 1), state
      heads × head_dim × d_state; d_inner = heads × head_dim (Nemotron-H), ``mamba_d_ssm`` or expand × hidden.
      Nemotron-H's ssm state defaults to float32 (config.py NemotronHForCausalLMConfig).
    - Mamba-1 (Jamba ``attn_layer_period``): conv d_inner × (kernel − 1), state d_inner × d_state.
    - Kimi Delta Attention (Kimi-Linear ``linear_attn_config``): conv 3·heads·head_dim × (kernel − 1), state
      heads × head_dim², float32 (``kda_state_dtype``: "auto" is float32).

    Returns ``kv_layers``, ``state_layers``, ``conv_state``, ``ssm_state`` and ``ssm_dtype`` where the config
    has them; {} for a model without recurrent layers.
    """
    out: dict[str, Any] = {}
    pattern = text.get("hybrid_override_pattern")
    types = text.get("layer_types") or text.get("layers_block_type")
    linear_cfg = text.get("linear_attn_config")
    if _int(text.get("linear_num_key_heads")):  # Gated DeltaNet
        k, v = _int(text["linear_num_key_heads"]), _int(text.get("linear_num_value_heads"))
        dk, dv = _int(text.get("linear_key_head_dim")), _int(text.get("linear_value_head_dim"))
        kernel = _int(text.get("linear_conv_kernel_dim")) or 4
        if isinstance(types, list) and types:
            attention = sum(1 for t in types if "full" in str(t))
        else:
            attention = layers // (_int(text.get("full_attention_interval")) or 4)
        out.update(kv_layers=attention, state_layers=layers - attention,
                   conv_state=(2 * k * dk + v * dv) * (kernel - 1), ssm_state=v * dv * dk)
        if (dtype := _ssm_dtype(text.get("mamba_ssm_dtype"))) is not None:
            out["ssm_dtype"] = dtype
        return out
    if isinstance(linear_cfg, Mapping) and _int(linear_cfg.get("num_heads")):  # Kimi Delta Attention
        heads, dim = _int(linear_cfg["num_heads"]), _int(linear_cfg.get("head_dim"))
        kernel = _int(linear_cfg.get("short_conv_kernel_size")) or 4
        full = linear_cfg.get("full_attn_layers")
        attention = len(full) if isinstance(full, list) else sum(1 for t in types or [] if "full" in str(t))
        out.update(kv_layers=attention, state_layers=layers - attention, conv_state=3 * heads * dim * (kernel - 1),
                   ssm_state=heads * dim * dim, ssm_dtype="fp32")
        return out
    if isinstance(types, list) and "conv" in types and _int(text.get("conv_L_cache")):  # LFM2 short convolutions
        # vllm lfm2.py / lfm2_moe.py short_conv_state_shape: conv_dim (LFM2-MoE: hidden_size) x (conv_L_cache - 1),
        # no ssm state; the "full_attention" layers keep the KV cache.
        kernel = _int(text["conv_L_cache"])
        width = hidden if str(text.get("model_type", "")) == "lfm2_moe" else _int(text.get("conv_dim")) or hidden
        states = sum(1 for t in types if t == "conv")
        out.update(kv_layers=len(types) - states, state_layers=states, conv_state=width * (kernel - 1),
                   conv_kernel=kernel)
        return out
    d_state = _int(text.get("ssm_state_size") or text.get("mamba_d_state") or text.get("state_size"))
    if not d_state:
        return out
    if attention_free(text):  # vllm mamba.py mamba1_state_shape / mamba2.py mamba2_state_shape, every layer
        kernel = _int(text.get("conv_kernel")) or 4
        inner = _int(text.get("intermediate_size")) or int(float(text.get("expand") or 2) * hidden)
        if str(text.get("model_type", "")) == "mamba2":
            inner = int(float(text.get("expand") or 2) * hidden)
            conv = inner + 2 * (_int(text.get("n_groups")) or 1) * d_state
            ssm = _int(text.get("num_heads")) * _int(text.get("head_dim")) * d_state
        else:
            conv, ssm = inner, inner * d_state
        out.update(kv_layers=0, state_layers=layers, mlp_layers=0, conv_state=conv * (kernel - 1), ssm_state=ssm)
        return out
    kernel = _int(text.get("conv_kernel") or text.get("mamba_d_conv")) or 4
    heads = _int(text.get("mamba_num_heads") or text.get("mamba_n_heads"))
    head_dim = _int(text.get("mamba_head_dim") or text.get("mamba_d_head"))
    groups = _int(text.get("n_groups") or text.get("mamba_n_groups") or text.get("mamba_num_groups")) or 1
    expand = text.get("mamba_expand") or text.get("expand") or 2
    if isinstance(pattern, str) and pattern:  # Nemotron-H: M mamba, * attention, - MLP, E MoE
        states, attention = pattern.count("M"), pattern.count("*")
        out["mlp_layers"] = pattern.count("-")
        inner = heads * head_dim
        dtype = _ssm_dtype(text.get("mamba_ssm_cache_dtype") or "float32")
    elif isinstance(types, list) and any("mamba" in str(t) for t in types):  # Granite-4.0-H
        states = sum(1 for t in types if "mamba" in str(t))
        attention = sum(1 for t in types if "attention" in str(t))
        inner = int(float(expand) * hidden)
        dtype = None
    elif text.get("attn_layer_period"):  # Jamba: Mamba-1
        period, offset = _int(text["attn_layer_period"]), _int(text.get("attn_layer_offset"))
        attention = sum(1 for i in range(layers) if i % period == offset)
        inner = int(float(expand) * hidden)
        out.update(kv_layers=attention, state_layers=layers - attention, conv_state=inner * (kernel - 1),
                   ssm_state=inner * d_state)
        return out
    elif isinstance(text.get("attn_layer_indices"), list):  # Bamba
        attention = len(text["attn_layer_indices"])
        states = layers - attention
        inner = int(float(expand) * hidden)
        dtype = None
    elif (heads and "mamba_d_ssm" in text) or str(text.get("model_type", "")) == "falcon_h1":  # attention ∥ SSM
        states = attention = layers
        inner = _int(text.get("mamba_d_ssm")) or int(float(expand) * hidden)
        dtype = None
    else:
        return out
    if not heads or not head_dim:
        return out
    out.update(kv_layers=attention, state_layers=states, conv_state=(inner + 2 * groups * d_state) * (kernel - 1),
               ssm_state=heads * head_dim * d_state)
    if dtype is not None:
        out["ssm_dtype"] = dtype
    return out


def _compressed_fields(text: Mapping[str, Any], layers: int) -> dict[str, Any]:
    """DeepSeek-V4's attention and expert fields (``compress_ratios`` present); {} for any other config.

    ``compress_ratios`` lists one more ratio per MTP layer than there are layers: the main layers' are kept.
    ``expert_dtype`` fp4 (vLLM's default when absent) means MXFP4 experts; fp8 (the Base checkpoints) none apart.
    """
    ratios = text.get("compress_ratios")
    if not isinstance(ratios, list) or len(ratios) < layers:
        return {}
    out: dict[str, Any] = {"compress_ratios": [int(r) for r in ratios[:layers]], "first_dense_layers": 0}
    for key in ("o_lora_rank", "o_groups", "index_head_dim", "index_n_heads"):
        if _int(text.get(key)):
            out[key] = int(text[key])
    if str(text.get("expert_dtype") or "fp4").lower() == "fp4":
        out["expert_dtype"] = "mxfp4"
    if _int(text.get("num_nextn_predict_layers")):
        out["mtp_layers"] = int(text["num_nextn_predict_layers"])
    return out


def _gemma4_fields(text: Mapping[str, Any], head_dim: int) -> dict[str, Any]:
    """Gemma 4's full-attention geometry: ``global_head_dim``, and ``num_global_key_value_heads`` where
    ``attention_k_eq_v`` (vllm gemma4.py Gemma4DecoderLayer uses the global heads only then)."""
    out: dict[str, Any] = {}
    if _int(text.get("global_head_dim")) and _int(text.get("global_head_dim")) != head_dim:
        out["global_head_dim"] = _int(text["global_head_dim"])
    if text.get("attention_k_eq_v") and _int(text.get("num_global_key_value_heads")):
        out["global_kv_heads"] = _int(text["num_global_key_value_heads"])
    return out


def _nas_fields(text: Mapping[str, Any], hidden: int, heads: int, layers: int) -> dict[str, Any]:
    """A DeciLM / Nemotron-NAS ``block_configs``: which blocks attend (and with how many KV heads) and how wide each
    MLP is, as vllm nemotron_nas.py builds them (``_ffn_mult_to_intermediate_size``: int(2·mult·hidden/3) rounded up
    to 256); {} for other configs."""
    blocks = text.get("block_configs")
    if not isinstance(blocks, list) or not blocks:
        return {}
    attention = [b.get("attention") or {} for b in blocks if isinstance(b, Mapping)]
    ffns = [b.get("ffn") or {} for b in blocks if isinstance(b, Mapping)]
    groups = [_int(a.get("n_heads_in_group")) for a in attention if not a.get("no_op")]
    widths = [-(-int(2 * float(f["ffn_mult"]) * hidden / 3) // 256) * 256 for f in ffns
              if not f.get("no_op") and f.get("ffn_mult")]
    out: dict[str, Any] = {"attention_layers": len(groups), "kv_layers": len(groups)}
    if groups and min(groups) > 0:
        out["kv_heads"] = heads // min(groups)
    if widths:
        out.update(intermediate_size=max(widths), mlp_width_total=sum(widths))
        if len(widths) < layers:
            out["mlp_layers"] = len(widths)
    return out


def _mamba_mixer_params(text: Mapping[str, Any], hidden: int) -> int:
    """One pure-Mamba layer's mixer weights (transformers MambaMixer / Mamba2Mixer; norms left out)."""
    state, kernel = _int(text.get("state_size")), _int(text.get("conv_kernel")) or 4
    if str(text.get("model_type", "")) == "mamba2":
        inner = int(float(text.get("expand") or 2) * hidden)
        heads, conv = _int(text.get("num_heads")), inner + 2 * (_int(text.get("n_groups")) or 1) * state
        return hidden * (inner + conv + heads) + conv * kernel + inner * hidden + inner + 3 * heads
    inner = _int(text.get("intermediate_size")) or 2 * hidden
    rank = _int(text.get("time_step_rank")) or -(-hidden // 16)
    return hidden * 2 * inner + inner * kernel + inner * (rank + 2 * state) + rank * inner + inner * (state + 2) \
        + inner * hidden


def _native_dtype(config: Mapping[str, Any], text: Mapping[str, Any]) -> str:
    quant = config.get("quantization_config") or text.get("quantization_config")
    if isinstance(quant, Mapping):
        method = str(quant.get("quant_method", "")).lower()
        if method == "mxfp4":
            return "mxfp4"
        if method == "modelopt" or quant.get("quant_algo"):
            algo = str(quant.get("quant_algo", "")).upper()
            return "nvfp4" if "FP4" in algo or algo == "MIXED_PRECISION" else "fp8"
        if method == "fp8" or "fp8" in str(quant.get("fmt", "")).lower():
            return "fp8"
        if method in ("awq", "gptq", "bitsandbytes", "compressed-tensors"):
            bits = quant.get("bits") or quant.get("w_bit")
            if method == "bitsandbytes":
                return "int8" if quant.get("load_in_8bit") else "nf4"
            if method == "compressed-tensors":
                groups: Mapping[str, Any] = quant.get("config_groups") or {}
                first: Mapping[str, Any] = next(iter(groups.values()), {}) if groups else {}
                weights: Mapping[str, Any] = first.get("weights") or {}
                if weights.get("type") == "float" and weights.get("num_bits") == 8:
                    return "fp8"
                bits = weights.get("num_bits", bits)
            return "int8" if bits == 8 else "int4"
    raw = str(_first(text, "torch_dtype", "dtype") or _first(config, "torch_dtype", "dtype") or "bfloat16")
    return _DTYPES.get(raw.lower(), "bf16")


def entry_from_hf_config(config: Mapping[str, Any], index: Mapping[str, Any] | None = None,
                         name: str | None = None) -> dict[str, Any]:
    """A catalog entry (a plain dict, YAML-ready) from a config.json and its safetensors index.

    Multimodal configs read the ``text_config``; ``vision_params`` is what the checkpoint holds
    beyond the text model when the index gives its size. Raises ``ConfigImportError`` on missing keys.
    """
    if not isinstance(config, Mapping):
        raise ConfigImportError("config.json is not a JSON object")
    text: Mapping[str, Any] = config.get("text_config") or config.get("thinker_config", {}).get("text_config") or config
    # InternVL-style configs nest the language model under llm_config, DeepSeek-VL2 and Janus under language_config.
    llm = config.get("llm_config") or config.get("language_config")
    if isinstance(llm, Mapping):
        text = llm
    if isinstance(text.get("attn_config"), Mapping) or isinstance(text.get("ffn_config"), Mapping):
        # DBRX nests kv_n_heads under attn_config and its experts under ffn_config (vllm dbrx.py reads them there).
        text = {**(text.get("ffn_config") or {}), **(text.get("attn_config") or {}), **text}
    hidden = _first(text, "hidden_size", "n_embd", "d_model")
    layers = _first(text, "num_hidden_layers", "n_layer", "num_layers", "n_layers")
    heads = _first(text, "num_attention_heads", "n_head", "n_heads")
    if heads is None and attention_free(text):
        heads = 1  # no attention layer: the heads only fill the entry (kv_layers is 0)
    vocab = _first(text, "vocab_size", "padded_vocab_size")
    for key, value in (("hidden_size", hidden), ("num_hidden_layers", layers), ("num_attention_heads", heads),
                       ("vocab_size", vocab)):
        if not isinstance(value, int) or value <= 0:
            raise ConfigImportError(f"config.json has no usable {key}")
    # Step 3's attention keeps one K/V group (num_attention_groups; vLLM step3_text.py builds it with num_kv_heads=1).
    kv = _first(text, "num_key_value_heads", "multi_query_group_num", "num_kv_heads", "n_head_kv",
                "num_attention_groups", "kv_n_heads") or heads
    if text.get("multi_query") and not text.get("num_kv_heads"):
        kv = 1
    head_dim = _first(text, "head_dim") or hidden // heads
    if attention_free(text):
        head_dim = hidden  # Mamba-2's head_dim is its SSM heads'; there is no attention head
    arch = str((config.get("architectures") or [config.get("model_type", "custom")])[0])
    ref = name or str(config.get("_name_or_path") or "").strip() or arch.lower()
    entry: dict[str, Any] = {
        "name": ref.rsplit("/", 1)[-1].lower(),
        "aliases": [ref] if "/" in ref else [],
        "family": str(text.get("model_type") or config.get("model_type") or "custom"),
        "params": 0.0,
        "layers": int(layers),
        "hidden_size": int(hidden),
        "heads": int(heads),
        "kv_heads": int(kv),
        "head_dim": int(head_dim),
        "vocab_size": int(vocab),
        "context": derived_max_len({**text, "model_type": config.get("model_type", text.get("model_type"))}),
        "dtype": _native_dtype(config, text),
        # LFM2 spells it tie_embedding
        "tie_embeddings": bool(text.get("tie_word_embeddings", config.get("tie_word_embeddings",
                                                                          text.get("tie_embedding", False)))),
    }
    inter = _first(text, "intermediate_size", "ffn_hidden_size", "n_inner", "ffn_dim")
    entry["intermediate_size"] = int(inter) if inter else 4 * int(hidden)
    # Up-and-down MLPs without a gate. Falcon (RW) is plain; Falcon-H1 and Falcon-Mamba are not, so the name is
    # matched whole (vllm falcon_h1.py builds a gated gate_up_proj).
    # Nemotron-H's MLP is up_proj, relu2, down_proj (vllm nemotron_h.py NemotronHMLP).
    if arch in ("FalconForCausalLM", "RWForCausalLM", "NemotronHForCausalLM") or any(
            a in arch for a in ("GPT2", "GPTBigCode", "Starcoder2", "PhiForCausalLM", "Bert", "Roberta")):
        entry["mlp"] = "plain"
    if is_encoder(arch):  # bidirectional encoders keep no KV cache: the engine pools one forward pass
        entry["task"] = "embed"
        entry["kv_layers"] = 0
    experts = _first(text, "num_local_experts", "n_routed_experts", "num_experts", "moe_num_experts")
    if not experts and text.get("shared_intermediate_size"):
        # GraniteMoeShared/Hybrid without routed experts (granite-4.0-h-micro): the shared MLP is the layer's MLP
        # (vllm granitemoehybrid.py builds only shared_mlp when num_local_experts is 0).
        entry["intermediate_size"] = int(text["shared_intermediate_size"])
    if experts:
        entry["experts"] = int(experts)
        entry["experts_per_token"] = int(_first(text, "num_experts_per_tok", "moe_top_k", "top_k", "top_k_experts",
                                                "moe_k") or 1)
        moe_inter = _first(text, "moe_intermediate_size", "expert_intermediate_size")
        if moe_inter:
            entry["moe_intermediate_size"] = int(moe_inter)
        elif text.get("intermediate_size_mlp"):  # Llama 4: experts use intermediate_size
            entry["moe_intermediate_size"] = int(inter)
            entry["intermediate_size"] = int(text["intermediate_size_mlp"])
        shared = _first(text, "n_shared_experts", "num_shared_experts")
        # Granite's MoE layers add one shared MLP of shared_intermediate_size (vllm granitemoeshared.py).
        shared_size = _first(text, "shared_expert_intermediate_size", "shared_intermediate_size")
        if not shared and str(text.get("model_type", "")).startswith("llama4"):
            shared = 1  # Llama 4's MoE layers always add one shared expert; its config has no key for it
        if not shared and text.get("enable_moe_block"):  # Gemma 4: the dense MLP runs beside the experts
            shared, shared_size = 1, int(inter or 0) or None
        if shared or shared_size:
            entry["shared_experts"] = int(shared or 1)
            if shared_size:
                entry["shared_expert_intermediate_size"] = int(shared_size)
        if text.get("first_k_dense_replace"):
            entry["first_dense_layers"] = int(text["first_k_dense_replace"])
        step = text.get("interleave_moe_layer_step")
        if isinstance(step, int) and step > 1:
            entry["moe_layers"] = int(layers) // step
        elif text.get("decoder_sparse_step", 1) not in (None, 1):
            entry["moe_layers"] = int(layers) // int(text["decoder_sparse_step"])
    for key in ("kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
        if text.get(key):
            entry[key] = int(text[key])
    entry.update(_compressed_fields(text, int(layers)))
    if text.get("kv_lora_rank"):
        entry["head_dim"] = int(text.get("v_head_dim") or head_dim)
    entry.update(_gemma4_fields(text, int(head_dim)))
    entry.update(_nas_fields(text, int(hidden), int(heads), int(layers)))
    layer_types = text.get("layer_types")
    shared_kv = _int(text.get("num_kv_shared_layers"))
    if isinstance(layer_types, list) and 0 < shared_kv < len(layer_types):
        # Gemma 3n / 4: the last layers reuse an earlier layer's cache and keep none of their own.
        layer_types = layer_types[: len(layer_types) - shared_kv]
        entry["kv_layers"] = len(layer_types)
    window = text.get("sliding_window")
    if text.get("use_sliding_window") is False:  # Qwen2-style configs name a window they do not use
        window = None
    if text.get("compress_ratios"):
        if isinstance(window, int) and window > 0:
            entry["sliding_window"] = window  # kept in every layer beside the compressed caches: no windowed layers
        window = None
        if not inter:
            del entry["intermediate_size"]  # every layer is MoE; there is no dense MLP to size
    if isinstance(window, int) and 0 < window < entry["context"]:
        entry["sliding_window"] = window
        if isinstance(layer_types, list) and layer_types:
            entry["sliding_window_layers"] = sum(1 for t in layer_types if "sliding" in str(t))
        elif isinstance(text.get("sliding_window_pattern"), str):
            # EXAONE 4 spells the pattern per layer ("LLLG": 3 local, 1 global), repeated over the layers
            # (transformers Exaone4Config derives layer_types from it; vllm exaone4.py reads layer_types).
            spelled = str(text["sliding_window_pattern"]).upper()
            entry["sliding_window_layers"] = sum(1 for i in range(int(layers)) if spelled[i % len(spelled)] == "L")
        elif text.get("sliding_window_pattern"):
            pattern = int(text["sliding_window_pattern"])
            entry["sliding_window_layers"] = int(layers) - int(layers) // pattern
        elif str(text.get("model_type", "")) == "gemma2":
            # Gemma 2 configs name the window without layer_types; transformers' Gemma2Config fills them as
            # sliding on even layers, full on odd (vllm gemma2.py reads config.layer_types).
            entry["sliding_window_layers"] = int(layers) - int(layers) // 2
        else:
            entry["sliding_window_layers"] = int(layers)
    if isinstance(layer_types, list) and layer_types and any("linear" in str(t) for t in layer_types):
        entry["kv_layers"] = sum(1 for t in layer_types if "full" in str(t) or "sliding" in str(t))
    elif text.get("full_attention_interval"):
        entry["kv_layers"] = int(layers) // int(text["full_attention_interval"])
    entry.update(hybrid_fields(text, int(layers), int(hidden)))
    quant = config.get("quantization_config") or text.get("quantization_config")
    if isinstance(quant, Mapping) and quant.get("quant_algo"):
        entry["quant_algo"] = str(quant["quant_algo"]).upper()
    if text.get("attention_chunk_size"):
        entry["attention_chunk_size"] = int(text["attention_chunk_size"])
        rope_every = text.get("no_rope_layer_interval") or 4
        entry["chunked_layers"] = int(layers) - int(layers) // int(rope_every)
    total_size = (index or {}).get("metadata", {}).get("total_size") if isinstance(index, Mapping) else None
    if isinstance(total_size, int | float) and total_size > 0:
        entry["checkpoint_bytes"] = int(total_size)
    spec = spec_from_mapping({**entry, "params": 1.0})
    text_params = computed_params(spec)
    if attention_free(text):  # the formula counts no recurrent mixer; a pure Mamba stack is nothing else
        text_params += int(layers) * _mamba_mixer_params(text, int(hidden))
    params = text_params
    bytes_per = {"bf16": 2, "fp16": 2, "fp32": 4}.get(entry["dtype"])
    if entry.get("checkpoint_bytes") and bytes_per:
        params = entry["checkpoint_bytes"] / bytes_per
        if config.get("vision_config") and params > text_params:
            entry["vision_params"] = float(f"{params - text_params:.4g}")
    entry["params"] = float(f"{params:.4g}")
    if experts:
        entry["active_params"] = float(f"{computed_params(spec, active=True) + params - text_params:.4g}")
    entry["verified"] = False
    return entry
