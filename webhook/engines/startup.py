"""Engines' start-up log lines: the figures each prints of what it allocated, read back by the engine's own lines.

Every engine prints what it took once it has loaded: vLLM "Model loading took 15.0 GiB", "GPU KV cache size: N
tokens"; SGLang "KV Cache is allocated. #tokens: N"; TGI "Setting max batch total tokens to N"; llama.cpp "CUDA0
model buffer size = N MiB"; TensorRT-LLM "Allocated N GiB for max tokens in paged KV cache (T)". Each engine
module lists its lines (:class:`Line`) and registers the reader as ``Engine.parse_log``; the names of the figures
are those of ``reported`` in tests/fixtures/accuracy, where every published log these lines read is held to the
figures its record quotes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

Figures = dict[str, float]

# A number as engines print it: "619,479", "-1.05", "5.2032".
NUMBER = r"-?\d[\d,]*(?:\.\d+)?"


@dataclass(frozen=True)
class Line:
    """One figure a log line prints.

    ``pattern`` has a group ``n`` (the number) and may have ``dev`` (a device index: the key's ``{dev}``) and
    ``unit`` (``GiB``/``MiB``/``GB``…: the key's ``{unit}``, lower-cased, with GB read as GiB where ``gb_is_gib``,
    as vLLM and SGLang print bytes/2^30 as "GB"). The first line that matches gives a key its value (every rank
    prints the same), except keys with ``{dev}``, one per device.
    """

    key: str
    pattern: re.Pattern[str]
    gb_is_gib: bool = True
    # Ranks that print different figures: the engine sizes by the smallest (vLLM's KV pool is the least any
    # worker has), so the least line counts, not the first.
    least: bool = False


def line(key: str, pattern: str, *, least: bool = False) -> Line:
    return Line(key, re.compile(pattern.replace("{N}", f"(?P<n>{NUMBER})")), least=least)


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def read(text: str, lines: Iterable[Line]) -> Figures:
    """The figures ``lines`` find in ``text`` (a log, or excerpts of one); nothing kept but the numbers."""
    out: Figures = {}
    for spec in lines:
        mine: set[str] = set()  # the keys this line set (a later line never overrides an earlier one)
        for m in spec.pattern.finditer(text):
            groups = m.groupdict()
            key = spec.key
            if "{unit}" in key:
                unit = (groups.get("unit") or "").lower()
                unit = "gib" if unit == "gb" and spec.gb_is_gib else unit
                key = key.replace("{unit}", unit)
            if "{dev}" in key:
                key = key.replace("{dev}", groups.get("dev") or "0")
            elif key in out and not (spec.least and key in mine):
                continue
            value = _number(m.group("n"))
            out[key] = min(out[key], value) if spec.least and key in mine else value
            mine.add(key)
            if "{dev}" not in spec.key and "{unit}" not in spec.key and not spec.least:
                break
    return out


def single_device(figures: Figures, stems: Iterable[str]) -> Figures:
    """Where a log shows one device (``..._gpu0`` and no ``..._gpu1``), the same figure also without its index."""
    out = dict(figures)
    for stem in stems:
        if f"{stem}0" in figures and f"{stem}1" not in figures:
            out.setdefault(stem, figures[f"{stem}0"])
    return out
