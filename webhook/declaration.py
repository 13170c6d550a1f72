"""Read what a GPU container declares: annotations first, then env, engine args and image tags."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

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

MODEL_ENVS = ("MODEL_NAME", "MODEL_ID", "MODEL")
MODEL_FLAGS = ("--model", "--model-id", "--model-path", "--model_id", "--hf-repo")
# llama.cpp's short model flag; `python -m module` is not a model.
SHORT_MODEL_FLAG = "-m"
CONTEXT_FLAGS = ("--max-model-len", "--max-total-tokens", "--ctx-size", "-c", "--context-length")
BATCH_FLAGS = ("--max-num-seqs", "--max-batch-size", "--max-running-requests", "--parallel", "-np")
DTYPE_FLAGS = ("--dtype",)
QUANT_FLAGS = ("--quantization", "--quantize", "-q")
UTIL_FLAGS = ("--gpu-memory-utilization", "--mem-fraction-static", "--cuda-memory-fraction")
KV_DTYPE_FLAGS = ("--kv-cache-dtype",)
TP_FLAGS = ("--tensor-parallel-size", "-tp", "--tp", "--tp-size", "--num-shard")

_SHELLS = {"sh", "bash", "/bin/sh", "/bin/bash", "/usr/bin/bash", "/usr/bin/env"}
# A quantization named in a model id: Qwen2.5-7B-Instruct-AWQ, …-GPTQ-Int4, …-FP8, llama.Q4_K_M.gguf.
_QUANT_IN_ID = re.compile(
    r"(?:^|[-_./])(awq|gptq[-_]int4|gptq[-_]int8|gptq|fp8|int8|int4|w8a8|w4a16|bnb-4bit|nf4|"
    r"q8_0|q6_k|q5_k_m|q5_0|q4_k_m|q4_0)(?=$|[-_./])",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Found:
    """A declared value and where it came from (for messages: "env DTYPE", "arg --max-model-len")."""

    value: str
    source: str


def tokens_of(container: dict[str, Any]) -> list[str]:
    """Command and args as one token list; ``sh -c "vllm serve …"`` scripts are split like a shell."""
    raw: list[str] = []
    for key in ("command", "args"):
        part = container.get(key) or []
        if isinstance(part, list):
            raw.extend(str(t) for t in part if isinstance(t, str | int | float))
    if not raw:
        return []
    shell = raw[0] in _SHELLS or raw[0].rsplit("/", 1)[-1] in {"sh", "bash"}
    if not shell:
        return raw
    # `sh -c "script"`: the shell and its own options are not the program's flags.
    rest = raw[1:]
    while rest and rest[0].startswith("-"):
        rest = rest[1:]
    out: list[str] = []
    for token in rest:
        if " " in token or "\n" in token:
            try:
                out.extend(shlex.split(token, comments=True))
            except ValueError:
                out.extend(token.split())
        else:
            out.append(token)
    return out


def _flags(tokens: list[str]) -> dict[str, str]:
    """The first value of every ``--flag value`` / ``--flag=value`` on a command line."""
    flags: dict[str, str] = {}
    last = len(tokens) - 1
    for i, token in enumerate(tokens):
        if token[:1] != "-":
            continue
        eq = token.find("=")
        if eq > 0:
            flags.setdefault(token[:eq], token[eq + 1 :])
        elif i < last:
            flags.setdefault(token, tokens[i + 1])
    return flags


def _env(container: dict[str, Any]) -> dict[str, str]:
    env = container.get("env") or []
    if not isinstance(env, list):
        return {}
    return {
        e["name"]: e["value"]
        for e in env
        if isinstance(e, dict) and isinstance(e.get("name"), str) and isinstance(e.get("value"), str) and e["value"]
    }


class Declared:
    """What one container says on its command line and in literal env values, parsed once."""

    __slots__ = ("container", "env", "flags", "tokens")

    def __init__(self, container: dict[str, Any]) -> None:
        self.container = container
        self.tokens = tokens_of(container)
        self.flags = _flags(self.tokens)
        self.env = _env(container)

    def flag(self, names: Iterable[str]) -> Found | None:
        """The value of the first of ``names`` present, in the order given."""
        for name in names:
            value = self.flags.get(name)
            if value is not None:
                return Found(value, f"arg {name}")
        return None

    def env_var(self, names: Iterable[str]) -> Found | None:
        """A literal env value (``valueFrom`` is not readable at admission) of the first name present."""
        for name in names:
            value = self.env.get(name)
            if value is not None:
                return Found(value, f"env {name}")
        return None

    def model(self) -> Found | None:
        """The model the serving command names: ``vllm serve <model>`` or one of the model flags."""
        tokens = self.tokens
        for i, token in enumerate(tokens[:-2]):
            if token == "serve" or tokens[i + 1] != "serve" or token.rsplit("/", 1)[-1] != "vllm":
                continue
            candidate = tokens[i + 2]
            if not candidate.startswith("-"):
                return Found(candidate, "arg vllm serve")
        found = self.flag(MODEL_FLAGS)
        if found is not None or SHORT_MODEL_FLAG not in self.flags:
            return found
        for i, token in enumerate(tokens[:-1]):
            if token == SHORT_MODEL_FLAG and not (i > 0 and "python" in tokens[i - 1].rsplit("/", 1)[-1]):
                return Found(tokens[i + 1], f"arg {SHORT_MODEL_FLAG}")
        return None

    def engine(self) -> str | None:
        """Which serving engine the container runs: vllm, sglang, tgi, llama.cpp, or None."""
        image = str(self.container.get("image") or "").lower()
        text = " ".join(self.tokens).lower()
        if "vllm" in image or "vllm" in text:
            return "vllm"
        if "sglang" in image or "sglang" in text:
            return "sglang"
        if "text-generation-inference" in image or "text-generation-launcher" in text or "--model-id" in self.flags:
            return "tgi"
        if "llama.cpp" in image or "llama-server" in text or "llama-cpp" in image:
            return "llama.cpp"
        return None


def quant_in_model_id(model: str) -> str | None:
    """A quantization a model id names (``-AWQ``, ``-GPTQ-Int4``, ``-FP8``, ``.Q4_K_M.gguf``)."""
    match = _QUANT_IN_ID.search(model.rsplit("/", 1)[-1])
    if not match:
        return None
    text = match.group(1).lower().replace("_", "-")
    return {"gptq-int4": "int4", "gptq-int8": "int8", "bnb-4bit": "nf4"}.get(text, text.replace("-", "_"))
