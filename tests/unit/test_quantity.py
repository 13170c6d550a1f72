"""Parsers for counts, sizes, fractions and GPU memory labels."""

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webhook.units.quantity import (
    QuantityError,
    parse_count,
    parse_fraction,
    parse_gpu_memory_label,
    parse_positive_int,
    parse_size_bytes,
    parse_size_mib,
)


@pytest.mark.parametrize(
    ("text", "value"),
    [("15B", 15e9), ("7.6b", 7.6e9), ("350M", 350e6), ("1.5e9", 1.5e9), ("70b", 70e9), ("125k", 125e3),
     ("1T", 1e12), (" 8B ", 8e9), ("123456", 123456.0)],
)
def test_parse_count(text: str, value: float) -> None:
    assert parse_count(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["", "B", "15X", "-3B", "0", "15 GB", "abc", "1e999", "nan"])
def test_parse_count_rejects(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_count(text)


@pytest.mark.parametrize(
    ("text", "mib"),
    [("40Gi", 40960), ("40960Mi", 40960), ("42GB", 40055), ("80GiB", 81920), ("42G", 40055), ("1Ti", 1048576),
     ("512Mi", 512), ("1073741824", 1024)],
)
def test_parse_size_mib(text: str, mib: int) -> None:
    assert parse_size_mib(text) == mib


@pytest.mark.parametrize("text", ["", "forty", "-1Gi", "0", "12XB", "Gi"])
def test_parse_size_rejects(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_size_bytes(text)


@pytest.mark.parametrize(("text", "mib"), [("81920", 81920), ("80GB", 81920), ("80Gi", 81920), ("24GiB", 24576)])
def test_gpu_memory_label(text: str, mib: int) -> None:
    assert parse_gpu_memory_label(text) == mib


def test_gpu_memory_label_rejects_garbage() -> None:
    for bad in ("", "lots", "0", "-5"):
        with pytest.raises(QuantityError):
            parse_gpu_memory_label(bad)


def test_fraction_and_int() -> None:
    assert parse_fraction("0.85") == 0.85
    assert parse_positive_int("8192") == 8192
    assert parse_positive_int("8k") == 8192
    for bad in ("0", "1.5", "-1", "x"):
        with pytest.raises(QuantityError):
            parse_fraction(bad) if bad in ("0", "1.5", "x") else parse_positive_int(bad)


@given(st.floats(min_value=1e-3, max_value=1e6, allow_nan=False), st.sampled_from(["", "K", "M", "B", "T", "b", "m"]))
def test_count_roundtrip(number: float, suffix: str) -> None:
    scale = {"": 1, "K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12, "b": 1e9, "m": 1e6}[suffix]
    assert parse_count(f"{number!r}{suffix}") == pytest.approx(number * scale)


@given(st.integers(min_value=1, max_value=10**7), st.sampled_from(["Mi", "Gi", "Ki"]))
def test_size_binary_roundtrip(number: int, suffix: str) -> None:
    scale = {"Ki": 1024, "Mi": 1024**2, "Gi": 1024**3}[suffix]
    assert parse_size_bytes(f"{number}{suffix}") == number * scale


@given(st.text(max_size=20))
def test_parsers_never_raise_other_errors(text: str) -> None:
    for parser in (parse_count, parse_size_bytes, parse_gpu_memory_label, parse_fraction, parse_positive_int):
        with contextlib.suppress(QuantityError):
            parser(text)
