"""Weight and KV-cache precisions: canonical names, aliases and storage cost per value."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Precision:
    """How one weight is stored."""

    name: str
    bits: float  # effective bits per weight, scales and zero points included
    quantized: bool  # embeddings and output head stay 16-bit (AWQ/GPTQ/bnb/fp8 checkpoints)
    gguf: bool = False  # bits are measured over the whole file, embeddings included


# int4 group quantization (AWQ/GPTQ, group size 128) stores an fp16 scale and a packed zero point
# per group: 4 + (16 + 4) / 128 ≈ 4.16 bits. bitsandbytes nf4 (block 64, double-quantized absmax)
# is 4.127 bits (Dettmers et al., QLoRA §2). GGUF figures: llama.cpp tools/quantize/README.md.
PRECISIONS: dict[str, Precision] = {
    "fp32": Precision("fp32", 32, False),
    "fp16": Precision("fp16", 16, False),
    "bf16": Precision("bf16", 16, False),
    "fp8": Precision("fp8", 8, True),
    "int8": Precision("int8", 8, True),
    "int4": Precision("int4", 4.16, True),
    # MXFP4 (OCP microscaling): 4-bit values with one 8-bit scale per 32 → 4.25 bits on disk. gpt-oss
    # keeps attention and routers in bf16 too, and vLLM's kernels pad the experts: "Model loading took
    # 64.38 GiB" for gpt-oss-120b and 13.47 GiB for gpt-oss-20b (llm-d H100 logs) ≈ 4.6 bits over the
    # non-embedding parameters. The vLLM model counts the experts per backend instead (engines/mxfp4.py).
    "mxfp4": Precision("mxfp4", 4.6, True),
    # NVFP4: 4-bit values, an fp8 scale per 16 and a per-tensor fp32 scale → 4.5 bits.
    "nvfp4": Precision("nvfp4", 4.5, True),
    "nf4": Precision("nf4", 4.127, True),
    "q8_0": Precision("q8_0", 8.5, True, gguf=True),
    "q6_k": Precision("q6_k", 6.56, True, gguf=True),
    "q5_k_m": Precision("q5_k_m", 5.70, True, gguf=True),
    "q5_0": Precision("q5_0", 5.5, True, gguf=True),
    "q4_k_m": Precision("q4_k_m", 4.89, True, gguf=True),
    "q4_0": Precision("q4_0", 4.5, True, gguf=True),
}

ALIASES: dict[str, str] = {
    "float32": "fp32",
    "float": "fp32",
    "full": "fp32",
    "float16": "fp16",
    "f16": "fp16",
    "f32": "fp32",
    "half": "fp16",
    "bfloat16": "bf16",
    "float8": "fp8",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
    # DeepSeek's sparse-MLA cache layout (fp8 values, bf16 rope part, scales), a --kv-cache-dtype vLLM takes and
    # the one it turns any fp8 into for DeepSeek-V3.2/V4 (model_executor/layers/deepseek_v4_attention.py).
    "fp8_ds_mla": "fp8",
    "e4m3": "fp8",
    "compressed-tensors": "fp8",
    "8bit": "int8",
    "bitsandbytes-8bit": "int8",
    "w8a8": "int8",
    "gptq-int8": "int8",
    "awq": "int4",
    "awq_marlin": "int4",
    "gptq": "int4",
    "gptq_marlin": "int4",
    "gptq-int4": "int4",
    "w4a16": "int4",
    # Intel AutoRound (vLLM --quantization auto_round): W4A16 unless the checkpoint says otherwise (its default
    # scheme, bits 4); a width in the model id wins (engines/precision.py lists it as a format).
    "auto_round": "int4",
    "auto-round": "int4",
    "autoround": "int4",
    "4bit": "int4",
    "marlin": "int4",
    "bitsandbytes": "nf4",
    "bitsandbytes-nf4": "nf4",
    "bnb": "nf4",
    "eetq": "int8",
    "fp4": "nvfp4",
    "modelopt_fp4": "nvfp4",
    "mx-fp4": "mxfp4",
    "fbgemm_fp8": "fp8",
    "modelopt": "fp8",
    "ptpc_fp8": "fp8",
    "experts_int8": "int8",
    "bitsandbytes-4bit": "nf4",
    "bnb-4bit": "nf4",
    "exl2": "int4",
    "hqq": "int4",
}

ACCEPTED = "fp32 fp16 bf16 fp8 int8 int4 (aliases half bfloat16 awq gptq nf4 q4_k_m q8_0 …)"

# The canonical names users are offered as smaller precisions, most accurate first.
DOWNGRADES: tuple[str, ...] = ("bf16", "fp8", "int8", "int4")


def canonical(value: str) -> str | None:
    """Return the canonical precision for a name or alias, or None if it is not one."""
    key = value.strip().lower().replace(" ", "")
    if key in PRECISIONS:
        return key
    if key in ALIASES:
        return ALIASES[key]
    key2 = key.replace("-", "_")
    if key2 in PRECISIONS:
        return key2
    return None


def kv_bytes(weight_precision: str, kv_cache_dtype: str | None) -> float:
    """Bytes per KV-cache element: the declared KV dtype, else the activation dtype of the weights."""
    if kv_cache_dtype:
        kv = canonical(kv_cache_dtype)
        if kv is not None:
            return PRECISIONS[kv].bits / 8
    # Quantized checkpoints compute (and cache) in 16-bit; only fp32 models cache in 32-bit.
    return 4.0 if weight_precision == "fp32" else 2.0


def is_kv_dtype(value: str) -> bool:
    """Whether a value names a KV-cache dtype an engine accepts (``auto`` included)."""
    key = value.strip().lower()
    return key == "auto" or canonical(key) in {"fp32", "fp16", "bf16", "fp8", "int8", "q8_0", "q4_0"}
