"""The values of the flags vramgate reads, parsed as each serving engine's own argument parser parses them."""

from __future__ import annotations

import enum
import math
import re
import struct
from typing import Final, Literal, NamedTuple

Version = tuple[int, ...]


class GrammarError(ValueError):
    """The engine would refuse this value (or it means nothing vramgate can size); `rule` quotes the engine."""

    def __init__(self, value: str, rule: str) -> None:
        super().__init__(f"{value!r}: {rule}")
        self.value = value
        self.rule = rule


class Sentinel(enum.Enum):
    """A value that names no number: the engine decides it at start-up."""

    AUTO = "auto"  # vLLM --max-model-len auto/-1, llama.cpp -ngl auto: the engine picks what fits
    ALL = "all"  # llama.cpp -ngl all: every layer on the GPU
    MODEL = "model"  # llama.cpp -c 0: the model's training context (n_ctx_train)
    VRAM_TIER = "vram-tier"  # Ollama OLLAMA_CONTEXT_LENGTH 0 (v0.15.5+): 4k/32k/256k by total VRAM


AUTO: Final = Sentinel.AUTO
ALL: Final = Sentinel.ALL
MODEL: Final = Sentinel.MODEL
VRAM_TIER: Final = Sentinel.VRAM_TIER


def _at_least(version: Version | None, since: Version) -> bool:
    return version is None or tuple(version) >= since


# --------------------------------------------------------------------------- Python (vLLM, SGLang)

_PY_INT_RULE = (
    "argparse type=int calls Python int(): surrounding whitespace, a sign and '_' between digits pass; "
    "no '1e3', '1.0' or '8k'"
)
_PY_FLOAT_RULE = "argparse type=float calls Python float(): '1e3', '.5', 'inf' and 'nan' pass; no '8k' or '1,5'"


def py_int(text: str, rule: str = _PY_INT_RULE) -> int:
    """What Python's int(text) returns (argparse `type=int`), or GrammarError where it raises."""
    try:
        return int(text)
    except ValueError:
        raise GrammarError(text, rule) from None


def py_float(text: str, rule: str = _PY_FLOAT_RULE) -> float:
    """What Python's float(text) returns (argparse `type=float`), or GrammarError where it raises."""
    try:
        return float(text)
    except ValueError:
        raise GrammarError(text, rule) from None


# --------------------------------------------------------------------------- vLLM

VLLM_AUTO_SINCE: Version = (0, 14, 0)
_HUMAN = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_VLLM_HUMAN_RULE = (
    "vLLM reads this flag as a human-readable integer: a plain Python int, or digits with one suffix, "
    "k/m/g/t = ×1000^n (decimals allowed, truncated), K/M/G/T = ×1024^n (whole numbers only) "
    "(vllm/utils/argparse_utils.py:human_readable_int)"
)
_VLLM_LEN_RULE = (
    "vLLM reads --max-model-len as a human-readable integer (1k = 1000, 1K = 1024, 25.6k = 25600) or, "
    "from v0.14.0, auto/-1 (vllm/utils/argparse_utils.py@v0.14.0:human_readable_int_or_auto; "
    "ModelConfig.max_model_len Field(ge=-1))"
)


def vllm_human_int(text: str) -> int:
    """vLLM's human_readable_int: strip, then `<digits>[.<digits>]<kmgtKMGT>` or Python int()."""
    value = text.strip()
    match = _HUMAN.fullmatch(value)
    if match:
        number, suffix = match.groups()
        if suffix in _DECIMAL:
            return int(float(number) * _DECIMAL[suffix])
        try:
            return int(number) * _BINARY[suffix]
        except ValueError:
            raise GrammarError(
                text,
                f"vLLM refuses decimals with binary suffixes like {suffix} ('Did you mean to use "
                f"{number}{suffix.lower()} instead?', vllm/utils/argparse_utils.py:human_readable_int)",
            ) from None
    return py_int(value, _VLLM_HUMAN_RULE)


def vllm_max_model_len(text: str, version: Version | None = None) -> int | Literal[Sentinel.AUTO]:
    """--max-model-len: a positive length, or AUTO (from v0.14.0) for the largest length whose KV cache fits."""
    auto = _at_least(version, VLLM_AUTO_SINCE)
    value = text.strip()
    if auto and (value == "-1" or value.lower() == "auto"):
        return AUTO
    n = vllm_human_int(text) if auto or value.lower() != "auto" else None
    if n is None:
        raise GrammarError(
            text,
            "vLLM before v0.14.0 has no --max-model-len auto (int() refuses 'auto'); " + _VLLM_LEN_RULE,
        )
    if n == -1:  # '-01', '-1_0'... come through int() as -1, which ModelConfig reads as auto-fit too
        if auto:
            return AUTO
        raise GrammarError(
            text,
            "vLLM before v0.14.0 has no auto-fit: -1 parses but is no context length; " + _VLLM_LEN_RULE,
        )
    if n < 1:
        raise GrammarError(
            text,
            "a context length is at least 1 (ModelConfig.max_model_len is ge=-1; 0 sizes nothing); " + _VLLM_LEN_RULE,
        )
    return n


def vllm_positive_human_int(text: str) -> int:
    """--max-num-batched-tokens, --kv-cache-memory-bytes (and --max-num-scheduled-tokens): a human int ≥ 1."""
    n = vllm_human_int(text)
    if n < 1:
        raise GrammarError(text, "vramgate sizes nothing from a count below 1; " + _VLLM_HUMAN_RULE)
    return n


# --------------------------------------------------------------------------- SGLang

_SGL_SRC = " (python/sglang/srt/server_args.py:add_cli_args)"
_SGL_INT_RULE = "SGLang declares this flag type=int: " + _PY_INT_RULE + _SGL_SRC
_SGL_FLOAT_RULE = "SGLang declares this flag type=float: " + _PY_FLOAT_RULE + _SGL_SRC


def sglang_int(text: str, *, human_readable: bool = False) -> int:
    """An SGLang int flag. `human_readable`: the newest main routes --context-length, --max-total-tokens and
    --max-prefill-tokens through its own human_readable_int (read here with vLLM's grammar)."""
    return vllm_human_int(text) if human_readable else py_int(text, _SGL_INT_RULE)


def sglang_positive_int(text: str, *, human_readable: bool = False) -> int:
    """--context-length, --max-running-requests, --tp-size/--tp, --max-total-tokens: an int ≥ 1."""
    n = sglang_int(text, human_readable=human_readable)
    if n < 1:
        raise GrammarError(
            text,
            "argparse takes it, but a length, count or parallel degree below 1 sizes nothing; " + _SGL_INT_RULE,
        )
    return n


def sglang_chunked_prefill_size(text: str) -> int | None:
    """--chunked-prefill-size: an int; -1 (any value ≤ 0) turns chunked prefill off, returned as None."""
    n = py_int(text, _SGL_INT_RULE)
    return None if n <= 0 else n


def sglang_fraction(text: str) -> float:
    """--mem-fraction-static: argparse float, and a fraction in (0, 1] (nan and inf parse, but size nothing)."""
    f = py_float(text, _SGL_FLOAT_RULE)
    if not (math.isfinite(f) and 0.0 < f <= 1.0):
        raise GrammarError(text, "argparse float takes it, but a memory fraction lies in (0, 1]; " + _SGL_FLOAT_RULE)
    return f


# --------------------------------------------------------------------------- TGI (Rust, clap 4)

TGI_ENV = {
    "--max-total-tokens": "MAX_TOTAL_TOKENS",
    "--max-input-tokens": "MAX_INPUT_TOKENS",
    "--max-input-length": "MAX_INPUT_LENGTH",
    "--max-batch-prefill-tokens": "MAX_BATCH_PREFILL_TOKENS",
    "--max-batch-total-tokens": "MAX_BATCH_TOTAL_TOKENS",
    "--num-shard": "NUM_SHARD",
    "--cuda-memory-fraction": "CUDA_MEMORY_FRACTION",
}
_RUST_UINT = re.compile(r"\+?[0-9]+")
_RUST_INT = re.compile(r"[+-]?[0-9]+")
_RUST_FLOAT = re.compile(r"[+-]?(?:(?i:inf|infinity|nan)|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)")
_USIZE_RULE = (
    "TGI's launcher declares this Option<usize> (clap parses it with Rust str::parse::<usize>): ASCII digits, "
    "an optional '+', nothing else — no '-', '_', spaces or suffix (launcher/src/main.rs:Args)"
)
_U32_RULE = (
    "TGI's launcher declares this Option<u32>; clap's u32 parser reads an i64 (optional sign) "
    "and checks 0..=4294967295 "
    "(launcher/src/main.rs:Args; clap_builder RangedI64ValueParser)"
)
_F32_RULE = (
    "TGI's launcher declares this f32 (Rust str::parse::<f32>): [sign] digits[.digits][e[sign]digits], '.5', '5.', "
    "inf/infinity/nan in any case; no spaces or '_' (launcher/src/main.rs:Args)"
)


def rust_usize(text: str, rule: str = _USIZE_RULE) -> int:
    """Rust `text.parse::<usize>()` on a 64-bit target."""
    if not (_RUST_UINT.fullmatch(text) and text.isascii()):
        raise GrammarError(text, rule)
    n = int(text)
    if n > 2**64 - 1:
        raise GrammarError(text, "number too large to fit in target type; " + rule)
    return n


def clap_u32(text: str, rule: str = _U32_RULE) -> int:
    """clap 4's value_parser!(u32): i64 parse, then the u32 range check (so '-0' and '+7' pass, '-1' fails)."""
    if not (_RUST_INT.fullmatch(text) and text.isascii()):
        raise GrammarError(text, rule)
    n = int(text)
    if not 0 <= n <= 2**32 - 1:
        raise GrammarError(text, f"{n} is not in 0..=4294967295; " + rule)
    return n


def rust_f32(text: str, rule: str = _F32_RULE) -> float:
    """Rust `text.parse::<f32>()`, rounded to f32 (1e39 is inf, as Rust returns it)."""
    if not (_RUST_FLOAT.fullmatch(text) and text.isascii()):
        raise GrammarError(text, rule)
    f = float(text)
    if math.isfinite(f) and abs(f) >= 2.0**128 * (1 - 2.0**-25):
        return math.copysign(math.inf, f)
    return float(struct.unpack("f", struct.pack("f", f))[0])


def tgi_tokens(text: str) -> int:
    """--max-total-tokens, --max-input-tokens (--max-input-length): usize."""
    return rust_usize(text)


def tgi_batch_tokens(text: str) -> int:
    """--max-batch-prefill-tokens, --max-batch-total-tokens: u32."""
    return clap_u32(text)


def tgi_num_shard(text: str) -> int:
    """--num-shard: usize, and at least 1 (find_num_shards: "`num_shard` cannot be < 1")."""
    n = rust_usize(text)
    if n < 1:
        raise GrammarError(text, "TGI refuses it: \"`num_shard` cannot be < 1\" (launcher/src/main.rs:find_num_shards)")
    return n


def tgi_cuda_memory_fraction(text: str) -> float:
    """--cuda-memory-fraction: f32; the launcher does not range-check, vramgate sizes only (0, 1]."""
    f = rust_f32(text)
    if not (math.isfinite(f) and 0.0 < f <= 1.0):
        raise GrammarError(text, "clap takes any f32, but a memory fraction lies in (0, 1]; " + _F32_RULE)
    return f


# --------------------------------------------------------------------------- llama.cpp (C++)

_C_SPACE = " \t\n\v\f\r"
_STOI_RULE = (
    "llama.cpp reads int flags with std::stoi: leading whitespace, then an optional sign and decimal digits; "
    "whatever follows is ignored ('8k' is 8); no digits, or outside int32, throws "
    "(common/arg.cpp:common_params_parse_ex)"
)
LLAMACPP_CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
FlashAttn = Literal["on", "off", "auto"]


def cpp_stoi(text: str, rule: str = _STOI_RULE) -> int:
    """C++ std::stoi(text) with base 10 (strtol, then the int range)."""
    s = text.lstrip(_C_SPACE)
    m = re.match(r"[+-]?[0-9]+", s)
    if not m:
        raise GrammarError(text, "std::stoi throws invalid_argument: no digits; " + rule)
    n = int(m.group(0))
    if not -(2**31) <= n <= 2**31 - 1:
        raise GrammarError(text, "std::stoi throws out_of_range; " + rule)
    return n


def llamacpp_ctx_size(text: str) -> int | Literal[Sentinel.MODEL]:
    """-c/--ctx-size (LLAMA_ARG_CTX_SIZE): a length, or MODEL for 0 (the model's training context; with --fit on,
    the fitter may size a 0 context down to what fits)."""
    n = cpp_stoi(text)
    if n == 0:
        return MODEL
    if n < 0:
        raise GrammarError(
            text,
            "std::stoi takes it, but llama_context_params.n_ctx is uint32_t; " + _STOI_RULE,
        )
    return n


def llamacpp_ngl(text: str, *, words: bool = True) -> int | Literal[Sentinel.AUTO, Sentinel.ALL]:
    """-ngl/--n-gpu-layers (LLAMA_ARG_N_GPU_LAYERS). `words`: builds since the fit PR (ggml-org/llama.cpp#16653)
    take 'auto' (-1) and 'all' (-2) by exact match; older builds read std::stoi only."""
    if words:
        if text == "auto":
            return AUTO
        if text == "all":
            return ALL
    n = cpp_stoi(text)
    if words and n == -1:
        return AUTO
    if words and n == -2:
        return ALL
    if n < 0:
        raise GrammarError(
            text,
            "a negative layer count other than the engine's own -1/-2 names no placement; " + _STOI_RULE,
        )
    return n


def llamacpp_flash_attn(text: str | None, *, takes_value: bool = True) -> FlashAttn:
    """-fa/--flash-attn (LLAMA_ARG_FLASH_ATTN). New builds take on|enabled|1, off|disabled|0, auto|-1
    (exact, lowercase); older builds had a bare boolean `-fa` (text None) meaning on."""
    if not takes_value:
        if text is None:
            return "on"
        raise GrammarError(text, "older llama.cpp -fa/--flash-attn takes no value: present means on (common/arg.cpp)")
    if text in ("on", "enabled", "1"):
        return "on"
    if text in ("off", "disabled", "0"):
        return "off"
    if text in ("auto", "-1"):
        return "auto"
    raise GrammarError(
        "" if text is None else text,
        "llama.cpp -fa takes on/enabled/1, off/disabled/0 or auto/-1 (common/arg.cpp: is_truthy/is_falsey/is_autoy); "
        "a bare -fa swallows the next argument",
    )


def llamacpp_n_cpu_moe(text: str) -> int:
    """--n-cpu-moe/-ncmoe N (LLAMA_ARG_N_CPU_MOE): std::stoi, and 'invalid value' below 0."""
    n = cpp_stoi(text)
    if n < 0:
        raise GrammarError(
            text,
            "llama.cpp throws invalid_argument(\"invalid value\") for N < 0 (common/arg.cpp: --n-cpu-moe)",
        )
    return n


def llamacpp_parallel(text: str) -> int:
    """-np/--parallel N (LLAMA_ARG_N_PARALLEL): std::stoi; vramgate sizes a slot count of at least 1."""
    n = cpp_stoi(text)
    if n < 1:
        raise GrammarError(
            text,
            "std::stoi takes it, but vramgate sizes slots from a count of at least 1; " + _STOI_RULE,
        )
    return n


def llamacpp_cache_type(text: str) -> str:
    """-ctk/--cache-type-k, -ctv/--cache-type-v: an exact ggml type name from the allowed list."""
    if text not in LLAMACPP_CACHE_TYPES:
        raise GrammarError(
            text,
            "llama.cpp throws 'Unsupported cache type' unless the value is exactly one of "
            + ", ".join(LLAMACPP_CACHE_TYPES) + " (common/arg.cpp:kv_cache_type_from_str)",
        )
    return text


def llamacpp_override_tensor(text: str) -> list[tuple[str, str]]:
    """-ot/--override-tensor: comma-separated `<tensor regex>=<buffer type>`, split at each item's first '='.
    (Whether the buffer type exists — CPU, CUDA0, ... — depends on the build and is not checked here.)"""
    out: list[tuple[str, str]] = []
    for item in text.split(","):
        pattern, eq, buft = item.partition("=")
        if not eq:
            raise GrammarError(
                text,
                "llama.cpp throws 'invalid value': each -ot item needs '=' (common/arg.cpp: --override-tensor)",
            )
        out.append((pattern, buft))
    return out


# --------------------------------------------------------------------------- Ollama (Go)

_GO_SPACE = (  # unicode.IsSpace, which strings.TrimSpace uses
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)
_GO_UINT_RULE = "Go strconv.ParseUint(s, 10, 64): ASCII digits only — no sign, '_', spaces or suffix"
_GO_INT_RULE = "Go strconv.ParseInt(s, 10, 64): an optional sign and ASCII digits — no '_', spaces or suffix"


class OllamaEnv(NamedTuple):
    """What an Ollama Uint environment setting resolves to, and whether Ollama fell back to its default."""

    value: int | Literal[Sentinel.VRAM_TIER]
    fell_back: bool


def go_parse_uint(text: str) -> int:
    """Go strconv.ParseUint(text, 10, 64)."""
    if not (re.fullmatch(r"[0-9]+", text) and text.isascii()):
        raise GrammarError(text, _GO_UINT_RULE)
    n = int(text)
    if n > 2**64 - 1:
        raise GrammarError(text, "value out of range; " + _GO_UINT_RULE)
    return n


def go_parse_int(text: str) -> int:
    """Go strconv.ParseInt(text, 10, 64)."""
    if not (re.fullmatch(r"[+-]?[0-9]+", text) and text.isascii()):
        raise GrammarError(text, _GO_INT_RULE)
    n = int(text)
    if not -(2**63) <= n <= 2**63 - 1:
        raise GrammarError(text, "value out of range; " + _GO_INT_RULE)
    return n


def ollama_var(raw: str) -> str:
    """envconfig.Var: strings.Trim(strings.TrimSpace(v), "\\"'") — spaces, then any quotes at either end."""
    return raw.strip(_GO_SPACE).strip("\"'")


def ollama_env_default(name: str, version: Version | None = None) -> int:
    """The default of OLLAMA_CONTEXT_LENGTH / OLLAMA_NUM_PARALLEL in that release (envconfig/config.go)."""
    if name == "OLLAMA_CONTEXT_LENGTH":
        if _at_least(version, (0, 15, 5)):
            return 0
        return 4096 if _at_least(version, (0, 6, 7)) else 2048
    if name == "OLLAMA_NUM_PARALLEL":
        return 1 if _at_least(version, (0, 10, 0)) else 0
    raise KeyError(name)


def ollama_env_uint(name: str, raw: str | None, version: Version | None = None) -> OllamaEnv:
    """envconfig.Uint: empty → default; a value ParseUint refuses → default, with slog.Warn
    ("invalid environment variable, using default") — Ollama never refuses to start over it.
    OLLAMA_CONTEXT_LENGTH 0 from v0.15.5 is VRAM_TIER (server/routes.go: 4096 / 32768 / 262144 by total VRAM)."""
    default = ollama_env_default(name, version)
    s = "" if raw is None else ollama_var(raw)
    fell_back = False
    if s == "":
        n = default
    else:
        try:
            n = go_parse_uint(s)
        except GrammarError:
            n, fell_back = default, True
    if name == "OLLAMA_CONTEXT_LENGTH" and n == 0 and _at_least(version, (0, 15, 5)):
        return OllamaEnv(VRAM_TIER, fell_back)
    return OllamaEnv(n, fell_back)


def ollama_num_ctx(text: str) -> int:
    """Modelfile `PARAMETER num_ctx` (api.FormatParams: strconv.ParseInt, base 10; an error fails `ollama create`).
    The scheduler then raises a num_ctx below 4 to 4 and caps it at the model's training context."""
    return max(go_parse_int(text), 4)
