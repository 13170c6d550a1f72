"""vLLM's KV pool for hybrid models: attention pages raised to the recurrent state's size, layers in groups.

Hybrid models (Qwen3-Next, Qwen3.5/3.6, Nemotron-H, Granite-4.0-H, Jamba, Falcon-H1, Kimi-Linear) keep a
per-token KV cache in their attention layers and one fixed-size state per sequence in their Mamba / Gated
DeltaNet / linear-attention layers. vLLM V1 puts both in one block pool of equal pages (read in vllm==0.33.0):

- A state page is Σ prod(shape) × dtype size of the layer's conv and ssm states (v1/kv_cache_interface.py
  ``MambaSpec.page_size_bytes``; shapes from model_executor/layers/mamba/mamba_utils.py
  ``MambaStateShapeCalculator``, both split over TP).
- The attention block is raised until an attention page holds a state page: ``block = align ×
  cdiv(state_page, align × attention_page_per_token)``, ``align`` = the backend's smallest kernel block
  (16; 128 for MLA), and the state page is padded to the attention page (platforms/interface.py
  ``_align_hybrid_block_size``: "Setting attention block size to %d tokens to ensure that attention page
  size is >= mamba page size").
- Layers are grouped by kind into groups of equal size: the smaller kind's count, or the larger's when it
  is under 1.5× the smaller (v1/core/kv_cache_planning.py ``_get_kv_cache_groups_uniform_page_size``); a
  block holds one page of every layer of a group, so ``num_blocks = pool // (group_size × page)``
  (``get_kv_cache_config_from_groups``).
- A request takes ``cdiv(max_model_len, block)`` blocks in each attention group and, per state group, one
  block, or two with prefix caching ("align" mode, ``MambaSpec.max_memory_usage_bytes``). Hybrids cache
  prefixes by default only from 0.28.0 (vllm-project/vllm#50991, "[Mamba] enable prefix cache by default":
  before it ``default_prefix_caching = is_prefix_caching_supported and not is_hybrid`` in
  engine/arg_utils.py); earlier releases keep one state block unless ``--enable-prefix-caching`` is given.
  Concurrency is blocks over that sum, and 0.20.1+ prints ``GPU KV cache size`` as
  ``int(concurrency × max_model_len)`` (v1/core/kv_cache_utils.py ``get_kv_cache_capacity``); 0.9–0.20.0
  printed ``num_blocks // groups × block``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..models.catalog import ModelSpec
from .base import Version

# The smallest kernel block of the attention backends vLLM picks on CUDA (FlashAttention MultipleOf(16),
# FlashInfer [16, 32, 64], Triton 16) and the platform's default block size.
KERNEL_BLOCK = 16
# Hybrid MLA models align the manager block to 128 (TRT-LLM / FlashInfer MLA decode kernels).
MLA_KERNEL_BLOCK = 128
# State blocks a request keeps per state group: the running state, and with prefix caching (vLLM's "align"
# mamba cache mode, the default for hybrids) the last cached one too.
STATE_BLOCKS_PREFIX_CACHING = 2
# The printed token count is derived from the concurrency from 0.20.1 on (vllm==0.33.0 kv_cache_utils.py:1120-1128).
# Published logs date the change: noonghunna/club-3090#91 (v0.20.1) prints 619,479 tokens for 2.36x at 262,144,
# int(423 / 179 × 262144), not a multiple of its 1600-token block; vllm-project/vllm#40691 (0.19.0) prints
# 290,864 = 371 × 784, the blocks-per-group form.
DERIVED_TOKENS_SINCE: Version = (0, 20, 1)
# vLLM turns prefix caching on for hybrids by default from 0.28.0 (vllm#50991; vllm-project/vllm-metal#645:
# "0.28.0 turns prefix caching on by default for hybrid models").
PREFIX_CACHING_DEFAULT_SINCE: Version = (0, 28, 0)


@dataclass(frozen=True)
class HybridPool:
    """One GPU's block geometry for a hybrid model: pages, groups and what a request takes."""

    block_size: int  # attention tokens per block after alignment
    page_bytes: int  # one layer's page: attention block, or a state padded to it
    group_size: int
    attention_groups: int
    state_groups: int
    state_blocks: int = STATE_BLOCKS_PREFIX_CACHING

    @property
    def bytes_per_block(self) -> int:
        return self.group_size * self.page_bytes

    @property
    def groups(self) -> int:
        return self.attention_groups + self.state_groups

    def blocks_per_request(self, context: int) -> int:
        attention = self.attention_groups * math.ceil(max(context, 1) / self.block_size)
        return attention + self.state_groups * self.state_blocks

    def sequence_bytes(self, context: int) -> int:
        """What the start check needs for one ``context``-token request, plus the null block it holds back."""
        return (self.blocks_per_request(context) + 1) * self.bytes_per_block

    def num_blocks(self, pool_bytes: float) -> int:
        return max(0, int(pool_bytes // self.bytes_per_block))

    def concurrency(self, pool_bytes: float, context: int) -> float:
        return self.num_blocks(pool_bytes) / self.blocks_per_request(context)

    def tokens(self, pool_bytes: float, context: int, version: Version) -> int:
        """The ``GPU KV cache size`` line this version prints."""
        if version >= DERIVED_TOKENS_SINCE:
            return int(self.concurrency(pool_bytes, context) * context)
        return self.num_blocks(pool_bytes) // max(self.groups, 1) * self.block_size


def prefix_caching_default(version: Version) -> bool:
    """Whether this vLLM caches a hybrid's prefixes (two state blocks a request) when no flag says."""
    return version >= PREFIX_CACHING_DEFAULT_SINCE


def group_size(attention_layers: int, state_layers: int) -> int:
    """``_get_kv_cache_groups_uniform_page_size``: the smaller count, or the larger under 1.5× the smaller."""
    counts = [n for n in (attention_layers, state_layers) if n > 0]
    if not counts:
        return 0
    small, large = min(counts), max(counts)
    return large if large < small * 1.5 else small


def pool_of(spec: ModelSpec, attention_page_per_token: float, tp: int, pp: int = 1, draft_tokens: int = 0,
            draft_attention_layers: int = 0) -> HybridPool | None:
    """The block geometry of ``spec`` on one of ``tp`` × ``pp`` ranks; None when it is not a hybrid.

    ``attention_page_per_token``: one token's K and V in one attention layer on this rank, in bytes.
    Speculative decoding with ``draft_tokens`` keeps that many more state blocks per state group
    (``MambaSpec.num_speculative_blocks``) and widens the conv state; MTP layers add attention layers to the
    pool (their KV cache is grouped with the model's: "Add 3 padding layers" for 17 attention and 48 GDN layers).
    """
    if not spec.hybrid:
        return None
    stages = max(pp, 1)
    attention = math.ceil((spec.cache_layers + max(draft_attention_layers, 0)) / stages)
    states = math.ceil((spec.state_layers or 0) / stages)
    state_page = spec.state_bytes_per_layer(tp, draft_tokens)
    align = MLA_KERNEL_BLOCK if spec.mla else KERNEL_BLOCK
    per_token = int(attention_page_per_token)
    if attention and per_token > 0:
        block = max(KERNEL_BLOCK, align * math.ceil(state_page / (align * per_token)))
        page = block * per_token
    else:  # state layers only (pure Mamba): one page per state, no attention block to match
        block, page = KERNEL_BLOCK, state_page
    size = group_size(attention, states)
    return HybridPool(
        block_size=block, page_bytes=page, group_size=size,
        attention_groups=math.ceil(attention / size) if attention else 0,
        state_groups=math.ceil(states / size) if states else 0,
        state_blocks=STATE_BLOCKS_PREFIX_CACHING + max(draft_tokens, 0),
    )


# SGLang (sglang==0.5.23 srt/mem_cache/kv_cache_configurator.py ``_handle_max_mamba_cache``): unless
# --max-mamba-cache-size is given (or the radix cache is off and --max-running-requests caps it), the memory
# left after the weights is split between the state pool and the KV pool by --mamba-full-memory-ratio
# (srt/arg_groups/fields/schedule.py: fallback 0.9): mamba budget = rest × r / (1 + r), and
# max_mamba_cache_size = (budget − per_req) // per_req states, each pool keeping one padding slot.
SGLANG_MAMBA_RATIO = 0.9


def sglang_pools(rest_bytes: float, state_bytes_per_request: float, ratio: float = SGLANG_MAMBA_RATIO,
                 max_states: int | None = None) -> tuple[int, float]:
    """SGLang's split of a hybrid's memory: (max_mamba_cache_size, bytes left for the KV pool)."""
    if state_bytes_per_request <= 0:
        return 0, max(0.0, rest_bytes)
    if max_states is None:
        budget = rest_bytes * ratio / (1 + ratio)
        max_states = int((budget - state_bytes_per_request) // state_bytes_per_request)
    states = max(0, max_states)
    return states, max(0.0, rest_bytes - (states + 1) * state_bytes_per_request)
