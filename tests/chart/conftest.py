"""Fixtures for the chart tests: helm must be installed (a missing helm fails, never skips)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.chart.render import INSTALL_HINT, HelmMissingError, helm_binary, render_chart

Render = Callable[..., list[dict[str, Any]]]


@pytest.fixture(scope="session")
def helm() -> str:
    """The helm binary; fails the test (with the install command) when there is none."""
    try:
        return helm_binary()
    except HelmMissingError:
        pytest.fail(f"helm is required for the chart tests; install it with: {INSTALL_HINT}", pytrace=False)


@pytest.fixture(scope="session")
def render(helm: str) -> Render:
    """``render(values, release=..., namespace=...)``: render_chart with results cached per arguments."""
    cache: dict[str, list[dict[str, Any]]] = {}

    def _render(values: dict[str, Any] | None = None, release: str = "vramgate", namespace: str = "vramgate",
                **kwargs: Any) -> list[dict[str, Any]]:
        import copy
        import json

        key = json.dumps([values, release, namespace, kwargs], sort_keys=True, default=str)
        if key not in cache:
            cache[key] = render_chart(values, release, namespace, **kwargs)
        return copy.deepcopy(cache[key])

    return _render
