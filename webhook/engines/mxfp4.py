"""vLLM's MXFP4 MoE weights on a GPU: the backend a GPU and release pick, and the padding and copies each keeps.

vLLM quantizes only the routed experts of an MXFP4 checkpoint (gpt-oss): ``Mxfp4Config.get_quant_method``
gives every ``LinearBase`` (attention, router) ``UnquantizedLinearMethod`` and only ``FusedMoE`` layers
``Mxfp4MoEMethod`` (vllm/model_executor/layers/quantization/mxfp4.py, 0.10.1 to main, read at commit
007d500), so embeddings, head, attention, sinks and routers load in bf16. ``Mxfp4MoEMethod.create_weights``
allocates per TP rank and expert w13 [2·i, h/2] and w2 [h, i/2] uint8 (two FP4 values a byte), their
uint8 E8M0 scales (one per 32 values) and bf16 biases, with i = round_up(intermediate / TP, a) and
h = round_up(hidden, b) by backend:

- Marlin (compute capability < 9.0, and Hopper without ``triton_kernels``): a = 128, b = 256
  ("n % 256 == 0 and k % 128 == 0"); ``prepare_moe_fp4_layer_for_marlin``
  (utils/marlin_utils_fp4.py) repacks values and scales at the same size and keeps bf16 biases.
- Triton (compute capability 9.x–10.x with ``triton_kernels``): a = 64, b = 1. Its
  ``process_weights_after_loading`` casts the biases to fp32 and swizzles weights and scales
  (utils/mxfp4_utils.py ``_swizzle_mxfp4``); it deletes the original weights ("need to delete the
  original weights to save memory on single GPU") but not ``w13_weight_scale``/``w2_weight_scale``, so the
  scales are held twice. triton_kernels' Hopper scale layout (tensor_details/layout_details/hopper_scale.py
  ``swizzle_data``) pads the scale rows to 2·num_warps·2·8 = 256 (num_warps 8 without batched experts);
  its Hopper value layout of the triton_kernels then pinned pads only to the MMA tile (16 × 32 bytes,
  memory_layout/hopper_value.py ``swizzle_mxfp4_value_hopper``), nothing at gpt-oss sizes. (Newer
  triton_kernels pad the values to 64 × 256 bytes, layout_details/hopper_value.py ``_padded_shape``; the
  0.14.1 log below shows no such padding, and no log shows which vLLM release first ships it.)
- FlashInfer on SM90 (opt-in ``VLLM_USE_FLASHINFER_MOE_MXFP4_BF16``): a = b = 128, bf16 biases.
- FlashInfer on SM100 (Blackwell with FlashInfer): a = b = 256, fp32 biases.

Hopper picks Triton by default from 0.11.1: vllm#27370 (merged 2025-10-22) made ``triton_kernels`` (tag
v3.5.0) a dependency; before it users installed it by hand, and a plain install ran Marlin (vllm#23278: an
H100 printing Marlin's "Your GPU does not have native support for FP4 computation").

Logged against this arithmetic ("Model loading took", GiB per GPU): gpt-oss-20b A100 0.19.0 (Marlin) 13.72
vs 13.67; gpt-oss-120b 4 × A100 TP 4 0.10.1.1 (Marlin) 17.22 vs 17.19; gpt-oss-120b H100 ~0.10.1
(Marlin) 65.97 vs 65.90; gpt-oss-120b H100 0.14.1 ("Using Triton backend") 64.38 vs 64.30; gpt-oss-20b
H100 (llm-d, Triton) 13.47 vs 13.41.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..models.catalog import ModelSpec
from ..models.vram import EstimateRequest
from .base import Version

# First release whose Hopper default is Triton (triton_kernels a dependency, vllm#27370).
TRITON_BY_DEFAULT: Version = (0, 11, 1)
# The Triton backend's num_warps outside batched (EP all-to-all) experts, and the scale-row alignment
# triton_kernels' Hopper scale layout derives from it (2 · num_warps · 2 · 8).
_SCALE_ROW_ALIGN = 2 * 8 * 2 * 8
MXFP4_BLOCK = 32

_HOPPER = re.compile(r"(?<![a-z0-9])g?h(100|200|800|20)(?![0-9])", re.IGNORECASE)
_BLACKWELL_DC = re.compile(r"(?<![a-z0-9])g?b(100|200|300)(?![0-9])", re.IGNORECASE)
_NOT_NVIDIA = re.compile(r"(?<![a-z0-9])(mi\d{3}|instinct|radeon|gaudi|tpu)", re.IGNORECASE)


@dataclass(frozen=True)
class Layout:
    """How one vLLM MXFP4 MoE backend holds a layer's experts after loading."""

    name: str
    intermediate_align: int  # the per-rank intermediate size is rounded up to this
    hidden_align: int  # the hidden size is rounded up to this
    bias_bytes: int  # bytes per bias value after loading (bf16 2, fp32 4)
    scales_twice: bool  # the original scales stay registered beside a swizzled, padded copy


MARLIN = Layout("marlin", 128, 256, 2, False)
TRITON = Layout("triton", 64, 1, 4, True)
FLASHINFER_SM90 = Layout("flashinfer-sm90", 128, 128, 2, False)
FLASHINFER_SM100 = Layout("flashinfer-sm100", 256, 256, 4, False)
ALL = (MARLIN, TRITON, FLASHINFER_SM90, FLASHINFER_SM100)


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def layouts(product: str | None, version: Version) -> tuple[Layout, tuple[Layout, ...]]:
    """(the backend a start most likely uses, every backend it may use) on ``product`` at ``version``.

    By compute capability (mxfp4.py ``get_mxfp4_backend``): below 9.0 (A100, L40S, L4, RTX; also 12.x,
    which triton_kernels and FlashInfer's SM100 path leave out) only Marlin; Hopper Triton from 0.11.1,
    Marlin before, FlashInfer SM90 on request. An unknown GPU, a Blackwell B-series (FlashInfer when
    installed, otherwise Triton or Marlin; no published log) or a non-NVIDIA one may use any: Marlin is
    the expected figure, the padding every GPU before Hopper and every Hopper before 0.11.1 runs.
    """
    if product is None or _NOT_NVIDIA.search(product) or _BLACKWELL_DC.search(product):
        return MARLIN, ALL
    if _HOPPER.search(product):
        return (TRITON if version >= TRITON_BY_DEFAULT else MARLIN), (TRITON, MARLIN, FLASHINFER_SM90)
    return MARLIN, (MARLIN,)


def expert_bytes(spec: ModelSpec, tp: int, layout: Layout) -> float:
    """Bytes of every MoE layer's routed experts on one TP rank, as ``layout`` holds them."""
    experts = spec.experts or 0
    inter = _round_up(max(1, (spec.moe_intermediate_size or spec.intermediate_size or 0) // tp),
                      layout.intermediate_align)
    hidden = _round_up(spec.hidden_size, layout.hidden_align)
    values = 3 * inter * hidden  # w13 (2·i × h) and w2 (h × i)
    scales = values / MXFP4_BLOCK
    if layout.scales_twice:
        scales += (_round_up(2 * inter, _SCALE_ROW_ALIGN) * _round_up(hidden // MXFP4_BLOCK, 2)
                   + _round_up(hidden, _SCALE_ROW_ALIGN) * _round_up(inter // MXFP4_BLOCK, 2))
    bias = (2 * inter + hidden) * layout.bias_bytes
    moe_layers = spec.layers - (spec.first_dense_layers or 0) if spec.moe_layers is None else spec.moe_layers
    return float(moe_layers * experts * (values / 2 + scales + bias))


def rank_bytes(req: EstimateRequest, spec: ModelSpec, layout: Layout) -> float:
    """Weight bytes on one GPU: the bf16 rest split over TP, the experts as ``layout`` pads them.

    Pipeline stages take their share of the layers (``ModelSpec.stage_shares``, the heaviest stage).
    """
    pp = max(req.pipeline, 1)
    tp = max(1, max(req.gpus, 1) // pp)
    scale = req.params / spec.params if spec.params else 1.0
    rest = max(0.0, req.params - spec.routed_expert_params() * scale) * 2 / tp
    whole = rest + expert_bytes(spec, tp, layout) * scale
    return whole * max(spec.stage_shares(pp)) if pp > 1 else whole


def applies(req: EstimateRequest, spec: ModelSpec | None) -> bool:
    """An MXFP4 MoE checkpoint on plain TP/PP ranks (expert and attention layouts keep the generic split)."""
    return (spec is not None and req.precision == "mxfp4" and bool(spec.experts)
            and not (req.expert_split or req.attention_split))


def band(req: EstimateRequest, spec: ModelSpec, version: Version) -> tuple[float, float, float]:
    """Weight bytes per GPU: (least any backend the GPU may run keeps, the expected backend's, the most).

    The low end is what admission rejects by, so it is the smallest layout the GPU may use: on Hopper the
    opt-in FlashInfer SM90 one, then Triton's (below Marlin's even with its scales held twice); with the GPU
    unknown, the smallest of all (ROCm's 128/256 alignment, mxfp4.py ``get_padding_alignment``, lies
    between FlashInfer SM90's and SM100's). The middle is the expected backend's, the high end the largest.
    """
    expected, possible = layouts(req.gpu_product, version)
    sizes = [rank_bytes(req, spec, layout) for layout in possible]
    return min(sizes), rank_bytes(req, spec, expected), max(sizes)
