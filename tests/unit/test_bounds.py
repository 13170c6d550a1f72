"""Bounded work per input (issue #44): shell arithmetic in 64 bits, bounded YAML, size caps, the CPU budget, and
property tests that no generated command, config or YAML reaches anything but an answer or ``TooLarge``.

``VRAMGATE_FUZZ_EXAMPLES=10000 pytest tests/unit/test_bounds.py -s`` runs the issue's 10,000 examples per property.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from webhook.engines import engines
from webhook.engines.base import Settings
from webhook.engines.cmdline import UNKNOWN_VALUE, arithmetic_value, commands_of, split_script
from webhook.units.bounds import (
    MAX_CONFIG_BYTES,
    MAX_OBJECT_DEPTH,
    MAX_SCRIPT_BYTES,
    MAX_WORDS,
    MAX_YAML_BYTES,
    MAX_YAML_DEPTH,
    OverBudget,
    ParsedCache,
    TooLarge,
    budget,
    load_yaml,
    spend,
    too_deep,
)

EXAMPLES = int(os.environ.get("VRAMGATE_FUZZ_EXAMPLES", "300"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
BIG = "9" * 4300


# --- shell arithmetic ------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("expr", "env", "value"), [
    ("4 * 2", {}, "8"),
    ("LWS_GROUP_SIZE * 8", {"LWS_GROUP_SIZE": "2"}, "16"),
    ("$TP * (1 + 1)", {"TP": "4"}, "8"),
    ("-7 / 2", {}, "-3"),  # truncating division, as C and the shell do
    ("2 ** 62", {}, str(2**62)),
    ("9223372036854775807", {}, str(2**63 - 1)),
    ("-(-(3))", {}, "3"),
    ("2 ** 63", {}, UNKNOWN_VALUE),  # past signed 64 bits: the shell wraps around; here it is unknown
    ("(2**64)**64", {}, UNKNOWN_VALUE),  # was an OverflowError downstream (int too large to convert to float)
    ("9223372036854775807 + 1", {}, UNKNOWN_VALUE),
    ("99999999999999999999", {}, UNKNOWN_VALUE),  # 20 digits: not converted at all
    (f"({BIG}**64) * ({BIG}**64)", {}, UNKNOWN_VALUE),  # was seconds of big-integer multiplication
    ("X * 2", {"X": BIG}, UNKNOWN_VALUE),  # a variable's value is bounded the same way
    ("-" * 5000 + "1", {}, UNKNOWN_VALUE),  # was a RecursionError
    ("(" * 5000 + "1" + ")" * 5000, {}, UNKNOWN_VALUE),
    ("2**" * 5000 + "1", {}, UNKNOWN_VALUE),
    ("(" * 30 + "1" + ")" * 30, {}, "1"),  # nesting people write is still computed
    (" + ".join(["1"] * 100), {}, "100"),  # 199 tokens
    (" + ".join(["1"] * 300), {}, UNKNOWN_VALUE),  # more than 256 tokens
    ("2 ** -1", {}, UNKNOWN_VALUE),
    ("1 / 0", {}, UNKNOWN_VALUE),
    ("UNSET + 1", {}, UNKNOWN_VALUE),
])
def test_arithmetic_is_computed_in_64_bits_or_unknown(expr: str, env: dict[str, str], value: str) -> None:
    start = time.perf_counter()
    assert arithmetic_value(expr, env) == value
    assert time.perf_counter() - start < 0.05


def test_the_issues_arithmetic_leaves_the_flag_unknown() -> None:
    expr = " * ".join(f"({BIG}**64)" for _ in range(20))  # the issue's 87 KB pod: 12.2 s of the event loop
    start = time.perf_counter()
    assert arithmetic_value(expr, {}) == UNKNOWN_VALUE
    elapsed = time.perf_counter() - start
    three = " * ".join(f"({BIG}**64)" for _ in range(3))  # a script under the size bound: arithmetic decides
    (cmd,) = split_script(f"vllm serve m --max-model-len $(( {three} ))", {})
    print(f"\n20 factors of (4,300 digits ** 64): {elapsed * 1000:.1f} ms (12.2 s in the issue)")
    assert cmd.words[-1] == UNKNOWN_VALUE and elapsed < 0.05


# --- size bounds -----------------------------------------------------------------------------------------------

def test_a_script_past_the_bound_is_too_large_and_one_under_it_is_read() -> None:
    line = "echo preparing; \n"
    under = line * ((MAX_SCRIPT_BYTES - 100) // len(line)) + "vllm serve m"
    assert split_script(under, {})[-1].words == ("vllm", "serve", "m")
    with pytest.raises(TooLarge, match=r"sh -c script of 2,8\d\d,\d{3} characters, more than 16,384"):
        split_script(line * (2_900_000 // len(line)), {})


def test_a_command_line_past_the_bound_is_too_large_before_it_is_expanded() -> None:
    container = {"command": ["vllm", "serve", "m"], "args": [f"--unknown-{i}" for i in range(100_000)]}
    start = time.perf_counter()
    with pytest.raises(TooLarge, match=r"command line of 100,003 words, more than 4,096"):
        commands_of(container, {})
    assert time.perf_counter() - start < 0.05
    ok = {"command": ["vllm", "serve", "m"], "args": ["--x"] * (MAX_WORDS - 3)}
    assert len(commands_of(ok, {})[0].words) == MAX_WORDS


def test_argparse_prefixes_still_resolve_by_bisect() -> None:
    from webhook.engines.cmdline import OptionTable

    table = OptionTable(frozenset({"--max-model-len", "--max-num-seqs", "--model"}), {}, frozenset())
    assert table.canonical("--max-model") == "--max-model-len"
    assert table.canonical("--max-n") == "--max-num-seqs"
    assert table.canonical("--max") is None  # ambiguous
    assert table.canonical("--mod") == "--model"
    assert table.canonical("--zzz") is None


def test_object_depth_is_found_without_recursion() -> None:
    inner: Any = {}
    for _ in range(MAX_OBJECT_DEPTH - 2):
        inner = {"x": inner}
    assert not too_deep({"spec": inner})  # MAX_OBJECT_DEPTH objects, one in the other
    assert too_deep({"spec": [inner]})
    deeper: Any = {}
    for _ in range(900):
        deeper = {"x": deeper}
    assert too_deep({"spec": deeper}) and too_deep([deeper])
    assert not too_deep({"a": [1, "b", None, 2.5]})


# --- YAML ------------------------------------------------------------------------------------------------------

def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


LAUGHS = "a: &a [1,2,3,4,5,6,7,8,9]\n" + "".join(
    f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi", strict=True))


@pytest.mark.parametrize(("text", "says"), [
    ("applications: " + _nested(10_000), "of 20,014 characters, more than 16,384"),  # the issue's: RecursionError
    ("applications: " + _nested(5_000), f"nested more than {MAX_YAML_DEPTH} deep"),  # under the size bound
    ("a: " + _nested(500), f"nested more than {MAX_YAML_DEPTH} deep"),  # under libyaml's own 1,000
    ("a: " + _nested(MAX_YAML_DEPTH), f"nested more than {MAX_YAML_DEPTH} deep"),
    (LAUGHS, "expands to more than 200,000 values"),  # a billion laughs: 9^9 values
    ("a: &a " + _nested(40) + "\nb: " + "[" * 40 + "*a" + "]" * 40, "nested more than"),  # depth hidden in an alias
    ("x: " + "y" * MAX_YAML_BYTES, "characters, more than 16,384"),
])
def test_yaml_past_a_bound_is_too_large(text: str, says: str) -> None:
    start = time.perf_counter()
    with pytest.raises(TooLarge, match=says):
        load_yaml(text, "spec.serveConfigV2")
    assert time.perf_counter() - start < 0.25


@pytest.mark.parametrize("text", [
    "a: 1\nb: [x, {c: d}]\n",
    "a: " + _nested(MAX_YAML_DEPTH - 2),
    "base: &b {x: 1}\nother:\n  <<: *b\n  y: 2\n",
    "- 1\n- 2\n",
    "",
    "when: 2024-01-01\n",
])
def test_yaml_within_the_bounds_reads_as_pyyaml_does(text: str) -> None:
    assert load_yaml(text, "x") == yaml.safe_load(text)


def test_yaml_errors_carry_the_line_of_the_problem() -> None:
    with pytest.raises(yaml.YAMLError) as info:
        load_yaml("applications:\n  - name: [oops\n", "spec.serveConfigV2")
    assert "expected ',' or ']'" in str(info.value)  # PyYAML's own words, as Ray would print them


def test_config_files_are_parsed_once_per_content() -> None:
    cache = ParsedCache()
    text = "base_model: m\nsequence_len: 4096\n" + "datasets:\n" + "  - {path: a, type: alpaca}\n" * 2000
    first = cache.load(text, "ConfigMap c key k")
    again = cache.load("".join(text), "ConfigMap c key k")  # an equal string, as a re-read ConfigMap gives
    assert again is first and cache.parses == 1
    assert cache.load("x: " + "y" * MAX_YAML_BYTES, "c") == {"x": "y" * MAX_YAML_BYTES}  # configs may be longer
    for bad in ("x: " + "y" * MAX_CONFIG_BYTES, "a: [1"):
        for _ in range(3):
            with pytest.raises((TooLarge, yaml.YAMLError)):
                cache.load(bad, "ConfigMap c key k")
    assert cache.parses == 3  # refusals are remembered too (past the size bound: refused before any lookup)
    small = ParsedCache(entries=2)
    for i in range(5):
        small.load(f"a: {i}", "x")
    assert small.load("a: 4", "x") == {"a": 4} and small.parses == 5


def test_the_budget_is_cpu_time_and_only_within_its_block() -> None:
    spend("outside any budget")  # no budget: never raises
    with budget(None):
        spend("no budget")
    with budget(0.0001), pytest.raises(OverBudget, match=r"more than 0 ms of CPU, at the loop"):
        end = time.thread_time() + 0.01
        while time.thread_time() < end:
            pass
        spend("the loop")
    with budget(10):
        time.sleep(0.05)  # waiting is not spending
        spend("after a sleep")


# --- property tests --------------------------------------------------------------------------------------------

_SHELL = st.text(alphabet=st.sampled_from(list("ab=$(){}[]-+*/%<>|&;'\"\\#\n\t 0129xyzVLM_.,:")), max_size=300)
_NUMBER = st.one_of(st.integers(-(2**70), 2**70).map(str), st.just(BIG), st.sampled_from(["0", "-1", "64", "63"]))


@st.composite
def _arithmetic(draw: st.DrawFn, depth: int = 0) -> str:
    if depth > 6 or draw(st.booleans()):
        return draw(st.one_of(_NUMBER, st.sampled_from(["X", "$X", "${X}", "UNSET", "N"])))
    op = draw(st.sampled_from(["+", "-", "*", "/", "%", "**"]))
    left, right = draw(_arithmetic(depth + 1)), draw(_arithmetic(depth + 1))
    form = draw(st.sampled_from(["{l} {o} {r}", "({l}) {o} ({r})", "-{l}", "(({l}))", "{l}{o}{r}", "{l} {o}"]))
    return form.format(l=left, o=op, r=right)


@FUZZ
@given(expr=st.one_of(_arithmetic(), _SHELL), env=st.dictionaries(st.sampled_from(["X", "N"]), _NUMBER))
def test_arithmetic_never_raises_and_stays_in_64_bits(expr: str, env: dict[str, str]) -> None:
    start = time.perf_counter()
    value = arithmetic_value(expr, env)
    assert time.perf_counter() - start < 0.05
    assert value == UNKNOWN_VALUE or -(2**63) <= int(value) < 2**63


@FUZZ
@given(script=st.one_of(_SHELL, _arithmetic().map(lambda e: f"vllm serve m --max-model-len $(( {e} ))")),
       params=st.lists(_SHELL, max_size=3))
def test_scripts_never_raise(script: str, params: list[str]) -> None:
    try:
        for cmd in split_script(script, {"X": "3"}, ["sh", *params]):
            assert all(isinstance(w, str) for w in cmd.words)
        commands_of({"command": ["sh", "-c", script, *params]}, {})
    except TooLarge:
        assert len(script) > MAX_SCRIPT_BYTES  # the one thing a script may raise, and only past its bound


_SCALAR = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20))
_DOCS = st.recursive(_SCALAR, lambda kids: st.one_of(st.lists(kids, max_size=4),
                                                     st.dictionaries(st.text(max_size=10), kids, max_size=4)),
                     max_leaves=30)
_YAMLISH = st.lists(st.sampled_from([*list("ab:-[]{}&*!|>'\"#,?%@ \n\t0123.~<"), "<<: ", "&a ", "*a", "\n  "]),
                    max_size=120).map("".join)


@FUZZ
@given(text=st.one_of(_YAMLISH, _DOCS.map(lambda d: yaml.safe_dump(d, default_flow_style=None)),
                      st.integers(1, 3000).map(_nested)))
def test_yaml_is_an_answer_too_large_or_a_yaml_error(text: str) -> None:
    with contextlib.suppress(TooLarge, yaml.YAMLError):
        load_yaml(text, "x")


_READERS = [e for e in engines() if e.read_config_file is not None]


@FUZZ
@given(text=st.one_of(_YAMLISH, _DOCS.map(lambda d: yaml.safe_dump(d, default_flow_style=None)),
                      st.integers(1, 3000).map(lambda n: "a: " + _nested(n))),
       reader=st.sampled_from(_READERS))
def test_engine_config_readers_never_raise(text: str, reader: Any) -> None:
    settings_ = Settings(reader.name)
    with contextlib.suppress(TooLarge):
        assert reader.read_config_file(settings_, text, "ConfigMap c key k") in (True, False)
