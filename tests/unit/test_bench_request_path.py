"""`python -m bench.request_path` runs: both paths answer every hot route with 200 (a figure, not a timing test)."""

from __future__ import annotations

import asyncio

import pytest

from bench import request_path


def test_request_path_bench_measures_all_four_routes_both_ways(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(request_path, "ROUNDS", 1)
    monkeypatch.setattr(request_path, "CALLS", 60)
    rows = asyncio.run(request_path._rows(300))
    assert [path for path, _, _ in rows] == ["/scheduler/filter", "/scheduler/prioritize", "/mutate", "/validate"]
    assert all(stack > 0 and direct > 0 for _, stack, direct in rows)
