"""The vramgate.io/* annotation names, the error a malformed declaration raises, and a model id's quantization."""

from __future__ import annotations

import re


class DeclarationError(ValueError):
    """A malformed declaration: names the annotation (or env/arg), the value and what is accepted."""

    def __init__(self, where: str, value: str, accepted: str) -> None:
        self.where, self.value, self.accepted = where, value, accepted
        super().__init__(f"{where}: {value!r} is not valid; {accepted}")


ANNOTATION_PREFIX = "vramgate.io/"
A_MODEL = "vramgate.io/model"
A_PARAMS = "vramgate.io/model-params"
A_PRECISION = "vramgate.io/precision"
A_CONTEXT = "vramgate.io/context-length"
A_UTIL = "vramgate.io/gpu-memory-utilization"
A_KV_DTYPE = "vramgate.io/kv-cache-dtype"
A_BATCH = "vramgate.io/batch-size"
A_VRAM = "vramgate.io/vram"
A_WORKLOAD = "vramgate.io/workload"
A_TIER = "vramgate.io/tier"
A_CUDA = "vramgate.io/cuda"
A_PLACEMENT = "vramgate.io/placement"
A_ENGINE = "vramgate.io/engine"
A_ENGINE_VERSION = "vramgate.io/engine-version"
A_FINETUNE = "vramgate.io/finetune"
A_PARALLELISM = "vramgate.io/parallelism"
A_GRAD_CKPT = "vramgate.io/gradient-checkpointing"
# Opts one pod into sharing.fill (its share of the GPU written by the mutating webhook).
A_SHARE_FILL = "vramgate.io/share-fill"

# Env names a generic (unrecognised) serving image reads its model from.
MODEL_ENVS = ("MODEL_NAME", "MODEL_ID", "MODEL")

# A quantization named in a model id: Qwen2.5-7B-Instruct-AWQ, …-GPTQ-Int4, …-FP8, llama.Q4_K_M.gguf.
_QUANT_IN_ID = re.compile(
    r"(?:^|[-_./])(awq|gptq[-_]int4|gptq[-_]int8|gptq|fp8|int8|int4|w8a8|w4a16|bnb-4bit|nf4|"
    r"q8_0|q6_k|q5_k_m|q5_0|q4_k_m|q4_0)(?=$|[-_./])",
    re.IGNORECASE,
)


def quant_in_model_id(model: str) -> str | None:
    """A quantization a model id names (``-AWQ``, ``-GPTQ-Int4``, ``-FP8``, ``.Q4_K_M.gguf``)."""
    match = _QUANT_IN_ID.search(model.rsplit("/", 1)[-1])
    if not match:
        return None
    text = match.group(1).lower().replace("_", "-")
    return {"gptq-int4": "int4", "gptq-int8": "int8", "bnb-4bit": "nf4"}.get(text, text.replace("-", "_"))
