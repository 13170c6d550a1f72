"""Parsers for the human quantities people write in annotations: parameter counts, sizes, fractions."""

from __future__ import annotations

import importlib.util
import re
import sys
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

MIB = 1024 * 1024
GIB = 1024 * MIB

_COUNT_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([kKmMbBtT]?)\s*$")
_COUNT_SUFFIX = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "t": 10**12}
# Decimal units people write that are not Kubernetes quantity suffixes.
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kKmMgGtT])(i?)[bB]\s*$")
_SIZE_POW = {"k": 1, "m": 2, "g": 3, "t": 4}


class QuantityError(ValueError):
    """A value that is not a valid quantity of the expected kind."""


@cache
def _kubernetes_parse_quantity() -> Callable[[Any], Decimal]:
    """``kubernetes.utils.quantity.parse_quantity``, the client library's own parser, loaded from its file.

    ``import kubernetes.utils.quantity`` first runs the whole client's ``__init__`` (every API class, the config
    loaders: ~0.3 s), which every `vramgate check` and ``--help`` would pay for one function that needs only
    ``decimal``. Where the client is imported already, its module is used as it is.
    """
    loaded = sys.modules.get("kubernetes.utils.quantity")
    if loaded is None:
        package = importlib.util.find_spec("kubernetes")  # finds the package without running its __init__
        if package is None or package.origin is None:
            raise ImportError("the kubernetes client library is not installed")
        spec = importlib.util.spec_from_file_location(
            "webhook.units._kubernetes_quantity", Path(package.origin).parent / "utils" / "quantity.py")
        if spec is None or spec.loader is None:
            raise ImportError("kubernetes/utils/quantity.py not found")
        loaded = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(loaded)
    parse: Callable[[Any], Decimal] = loaded.parse_quantity
    return parse


def parse_quantity(value: Any) -> Decimal:
    """A Kubernetes quantity (``40Gi``, ``500m``, ``1e3``) as kubernetes.utils.quantity reads it."""
    return _kubernetes_parse_quantity()(value)


def parse_whole(value: Any) -> int:
    """A whole, non-negative number written as a Kubernetes quantity: kube-apiserver stores a resource amount in
    canonical form, so ``nvidia.com/gpumem: 8000`` reaches a webhook as ``8k`` (and 10240 stays ``10240``)."""
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a number")
    try:
        amount = parse_quantity(value)
    except (ValueError, ArithmeticError) as exc:
        raise QuantityError(f"{value!r} is not a quantity") from exc
    if amount < 0 or amount != amount.to_integral_value():
        raise QuantityError(f"{value!r} is not a whole number")
    return int(amount)


def parse_count(value: str | int | float) -> float:
    """Parse a parameter count such as ``15B``, ``7.6b``, ``350M``, ``1.5e9`` into a number."""
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a count")
    if isinstance(value, int | float):
        number = float(value)
    else:
        match = _COUNT_RE.match(value)
        if not match:
            raise QuantityError(f"{value!r} is not a count")
        number = float(match.group(1)) * _COUNT_SUFFIX[match.group(2).lower()]
    if not number > 0 or number != number or number == float("inf"):
        raise QuantityError(f"{value!r} is not a positive count")
    return number


def parse_size_bytes(value: str | int) -> int:
    """Parse a memory size: Kubernetes quantities (``40Gi``, ``40960Mi``, ``42G``) or ``42GB``/``80GiB``."""
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a size")
    if isinstance(value, int):
        number = Decimal(value)
    else:
        return _size_str(value)
    if not number.is_finite() or number <= 0:
        raise QuantityError(f"{value!r} is not a positive size")
    return int(number)


# Manifests repeat the same few quantities ("32Gi", "16Gi"): parse each string once.
@lru_cache(maxsize=4096)
def _size_str(value: str) -> int:
    text = value.strip()
    match = _SIZE_RE.match(text)
    if match:
        base = 1024 if match.group(3) else 1000
        number = Decimal(match.group(1)) * (base ** _SIZE_POW[match.group(2).lower()])
    else:
        try:
            number = parse_quantity(text)
        except (ValueError, InvalidOperation, TypeError) as exc:
            raise QuantityError(f"{value!r} is not a size") from exc
    if not number.is_finite() or number <= 0:
        raise QuantityError(f"{value!r} is not a positive size")
    return int(number)


def parse_size_mib(value: str | int) -> int:
    """Parse a size (see :func:`parse_size_bytes`) and return whole MiB, rounded up."""
    return -(-parse_size_bytes(value) // MIB)


def parse_gpu_memory_label(value: str) -> int:
    """Parse ``nvidia.com/gpu.memory``: a bare integer is MiB (as GFD writes it), else a human size.

    GPU sizes are binary even when written ``80GB`` (an "80GB" A100 has 81920 MiB), so ``GB`` is
    read as GiB here, unlike in workload annotations.
    """
    text = value.strip()
    if text.isascii() and text.isdigit():
        mib = int(text)
        if mib <= 0:
            raise QuantityError(f"{value!r} is not a positive size")
        return mib
    match = _SIZE_RE.match(text)
    if match:
        number = Decimal(match.group(1)) * (1024 ** _SIZE_POW[match.group(2).lower()])
        if number <= 0:
            raise QuantityError(f"{value!r} is not a positive size")
        return int(-(-number // MIB))
    return parse_size_mib(text)


def parse_fraction(value: str | float) -> float:
    """Parse a fraction in (0, 1], such as ``0.85``."""
    try:
        number = float(value)
    except (TypeError, ValueError) as exc:
        raise QuantityError(f"{value!r} is not a number") from exc
    if not 0 < number <= 1:
        raise QuantityError(f"{value!r} is not in (0, 1]")
    return number


def parse_positive_int(value: str | int) -> int:
    """Parse a positive integer such as a context length or batch size (``8192``, ``8k``)."""
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a positive integer")
    if isinstance(value, int):
        number = value
    else:
        text = value.strip().lower().replace("_", "")
        if not text.isascii():
            raise QuantityError(f"{value!r} is not a positive integer")
        try:
            if text.endswith("k") and text[:-1].isdigit():
                number = int(text[:-1]) * 1024
            else:
                number = int(text)
        except ValueError as exc:
            raise QuantityError(f"{value!r} is not a positive integer") from exc
    if number <= 0:
        raise QuantityError(f"{value!r} is not a positive integer")
    return number


def format_gib(mib: float, *, unit: bool = False, trim: bool = True) -> str:
    """MiB as GiB with one decimal, the way every message says it: ``22.5``, ``40`` (``trim``: no ``.0``),
    ``22.5 GiB`` (``unit``)."""
    text = f"{mib / 1024:.1f}"
    if trim:
        text = text.removesuffix(".0")
    return f"{text} GiB" if unit else text
