"""Each engine's flag grammar, row by row from tests/fixtures/grammar/<engine>.yaml; each row cites the parser."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.engines import grammar as g

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "grammar"
ENGINES = ("vllm", "sglang", "tgi", "llamacpp", "ollama")


def _version(row: dict[str, Any]) -> tuple[int, ...] | None:
    v = row.get("version")
    return None if v is None else tuple(int(p) for p in str(v).split("."))


def _vllm(row: dict[str, Any]) -> object:
    if row["flag"] == "--max-model-len":
        return g.vllm_max_model_len(row["value"], _version(row))
    return g.vllm_positive_human_int(row["value"])


def _sglang(row: dict[str, Any]) -> object:
    flag, value = row["flag"], row["value"]
    if flag == "--mem-fraction-static":
        return g.sglang_fraction(value)
    if flag == "--chunked-prefill-size":
        n = g.sglang_chunked_prefill_size(value)
        return "disabled" if n is None else n
    return g.sglang_positive_int(value, human_readable=bool(row.get("human_readable")))


def _tgi(row: dict[str, Any]) -> object:
    flag, value = row["flag"], row["value"]
    if flag == "--num-shard":
        return g.tgi_num_shard(value)
    if flag == "--cuda-memory-fraction":
        return g.tgi_cuda_memory_fraction(value)
    if flag in ("--max-batch-prefill-tokens", "--max-batch-total-tokens"):
        return g.tgi_batch_tokens(value)
    return g.tgi_tokens(value)


def _llamacpp(row: dict[str, Any]) -> object:
    flag, value = row["flag"], row["value"]
    readers: dict[str, Callable[[], object]] = {
        "-c": lambda: g.llamacpp_ctx_size(value),
        "-ngl": lambda: g.llamacpp_ngl(value, words=row.get("words", True)),
        "-fa": lambda: g.llamacpp_flash_attn(value, takes_value=row.get("takes_value", True)),
        "--n-cpu-moe": lambda: g.llamacpp_n_cpu_moe(value),
        "-np": lambda: g.llamacpp_parallel(value),
        "-ctk": lambda: g.llamacpp_cache_type(value),
        "-ot": lambda: [list(pair) for pair in g.llamacpp_override_tensor(value)],
    }
    return readers[flag]()


def _ollama(row: dict[str, Any]) -> object:
    if row["flag"] == "num_ctx":
        return g.ollama_num_ctx(row["value"])
    env = g.ollama_env_uint(row["flag"], row["value"], _version(row))
    assert env.fell_back is bool(row.get("fell_back", False))
    return env.value


READERS: dict[str, Callable[[dict[str, Any]], object]] = {
    "vllm": _vllm, "sglang": _sglang, "tgi": _tgi, "llamacpp": _llamacpp, "ollama": _ollama,
}


def _rows() -> list[Any]:
    out = []
    for engine in ENGINES:
        rows = yaml.safe_load((FIXTURES / f"{engine}.yaml").read_text(encoding="utf-8"))["rows"]
        out += [pytest.param(engine, row, id=f"{engine}:{row['flag']}={row['value']!r}") for row in rows]
    return out


def _plain(got: object) -> object:
    return got.value if isinstance(got, g.Sentinel) else got


@pytest.mark.parametrize(("engine", "row"), _rows())
def test_row(engine: str, row: dict[str, Any]) -> None:
    assert row["source"].strip(), "every row cites the engine's parser"
    if row["accepted"]:
        got = _plain(READERS[engine](row))
        want = row["means"]
        if isinstance(want, float):
            assert isinstance(got, float) and math.isclose(got, want, rel_tol=0, abs_tol=1e-12)
        else:
            assert got == want
    else:
        with pytest.raises(g.GrammarError) as err:
            READERS[engine](row)
        assert err.value.rule and err.value.value == (row["value"] or "")


@pytest.mark.parametrize("engine", ENGINES)
def test_each_table_has_ten_rows_with_both_outcomes(engine: str) -> None:
    rows = yaml.safe_load((FIXTURES / f"{engine}.yaml").read_text(encoding="utf-8"))["rows"]
    assert len(rows) >= 10
    assert {r["accepted"] for r in rows} == {True, False} or engine == "ollama"


def test_grammar_error_is_a_value_error_that_quotes_the_engine() -> None:
    with pytest.raises(ValueError, match="human_readable_int") as err:
        g.vllm_max_model_len("1.5K")
    assert isinstance(err.value, g.GrammarError) and "K" in err.value.rule


@pytest.mark.parametrize(("text", "want"), [
    ("1e39", math.inf), ("-inf", -math.inf), ("Infinity", math.inf), ("5.e3", 5000.0), ("+0.25", 0.25),
])
def test_rust_f32_edges(text: str, want: float) -> None:
    assert g.rust_f32(text) == want


@pytest.mark.parametrize("text", ["", "+", ".", "e3", "1e", "0x10", "1_0", "inf ", "١"])
def test_rust_f32_refuses(text: str) -> None:
    with pytest.raises(g.GrammarError):
        g.rust_f32(text)


def test_rust_f32_nan_parses() -> None:
    assert math.isnan(g.rust_f32("nan"))


@pytest.mark.parametrize(("text", "want"), [("\t\n 42abc", 42), ("-0", 0), ("+7", 7), ("2147483647", 2**31 - 1)])
def test_cpp_stoi(text: str, want: int) -> None:
    assert g.cpp_stoi(text) == want


@pytest.mark.parametrize("text", ["", " ", "+", "-x", "2147483648", "\u00a042"])
def test_cpp_stoi_refuses(text: str) -> None:
    with pytest.raises(g.GrammarError):
        g.cpp_stoi(text)


def test_ollama_var_trims_spaces_then_quotes_only_in_that_order() -> None:
    assert g.ollama_var("  '\"4096\"'  ") == "4096"
    assert g.ollama_var("\"  4096\"") == "  4096"  # spaces inside the quotes stay, so ParseUint refuses it
    assert g.ollama_env_uint("OLLAMA_NUM_PARALLEL", "\"  4\"") == g.OllamaEnv(1, True)


def test_ollama_defaults_by_release() -> None:
    releases = ((0, 5, 13), (0, 6, 7), (0, 15, 5))
    assert [g.ollama_env_default("OLLAMA_CONTEXT_LENGTH", v) for v in releases] == [2048, 4096, 0]
    assert [g.ollama_env_default("OLLAMA_NUM_PARALLEL", v) for v in ((0, 9, 6), (0, 10, 0))] == [0, 1]


def test_vllm_version_gate_is_v0_14_0() -> None:
    assert g.VLLM_AUTO_SINCE == (0, 14, 0)
    assert g.vllm_max_model_len("auto", (0, 14, 0)) is g.AUTO
    assert g.vllm_max_model_len("8k", (0, 13, 0)) == 8000
    with pytest.raises(g.GrammarError, match=r"v0\.14\.0"):
        g.vllm_max_model_len("auto", (0, 13, 0))


def test_clap_u32_and_usize_differ_on_minus_zero() -> None:
    assert g.clap_u32("-0") == 0
    with pytest.raises(g.GrammarError):
        g.rust_usize("-0")
    assert g.rust_usize("18446744073709551615") == 2**64 - 1
    with pytest.raises(g.GrammarError):
        g.rust_usize("18446744073709551616")
