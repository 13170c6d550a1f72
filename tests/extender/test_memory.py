"""The extender's body limit follows its container's memory limit, and large bodies are served one at a time."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import orjson
import pytest

from webhook.cluster.snapshot import FixedInventory
from webhook.config import Config, Extender
from webhook.serve import limits
from webhook.serve.app import create_app
from webhook.serve.extender import routes
from webhook.serve.state import AppState

from ..harness import Running, serve_app
from .cluster import fixed_snapshot, gpu_pod

MiB = 1024 * 1024


@pytest.fixture()
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[Running]:
    # A 160 MiB container holds (160 - 128) MiB / 10 = 3.2 MiB of body; the configured 64 MiB does not apply.
    monkeypatch.setattr(routes, "_MEMORY_LIMIT", 160 * MiB)
    state = AppState(Config(extender=Extender()), FixedInventory(fixed_snapshot()), role="extender")
    with serve_app(create_app(state)) as running:
        yield running


def names_body(size: int) -> bytes:
    """A NodeNames body of about ``size`` bytes (names the inventory does not know)."""
    count = size // 16
    return orjson.dumps({"Pod": gpu_pod(), "NodeNames": [f"ghost-{i:08d}" for i in range(count)]})


def test_body_limit_is_derived_from_the_memory_limit() -> None:
    assert limits.extender_body_limit(64 * MiB, None) == 64 * MiB
    assert limits.extender_body_limit(64 * MiB, 512 * MiB) == (512 - 128) * MiB // 10
    assert limits.extender_body_limit(16 * MiB, 4096 * MiB) == 16 * MiB
    assert limits.extender_body_limit(64 * MiB, 100 * MiB) == limits.MIN_BODY_BYTES
    assert "memory limit" in limits.too_large_hint(3 * MiB, 64 * MiB, 160 * MiB)
    assert "max_body_bytes" in limits.too_large_hint(64 * MiB, 64 * MiB, 4096 * MiB)


@pytest.mark.parametrize(("raw", "expected"), [("536870912", 536870912), ("", None), ("max", None), ("-5", None)])
def test_memory_limit_from_the_downward_api(monkeypatch: pytest.MonkeyPatch, raw: str, expected: int | None) -> None:
    monkeypatch.setenv("VRAMGATE_MEMORY_LIMIT_BYTES", raw)
    monkeypatch.setattr(limits, "Path", lambda _p: _Missing())
    assert limits.container_memory_limit() == expected


class _Missing:
    def read_text(self) -> str:
        raise FileNotFoundError


def test_a_body_past_the_memory_derived_limit_gets_413_that_says_what_to_raise(server: Running) -> None:
    with server.client() as c:
        r = c.post("/scheduler/filter", content=names_body(4 * MiB))
        assert r.status_code == 413, r.text
        assert "160 MiB memory limit" in r.text and "nodeCacheCapable" in r.text
        r = c.post("/scheduler/filter", content=names_body(2 * MiB))
        assert r.status_code == 200, r.text
        out = orjson.loads(r.content)
    assert out["NodeNames"] == [] and all(v.startswith("NotInInventory") for v in out["FailedNodes"].values())


def test_large_bodies_at_once_are_all_answered(server: Running) -> None:
    body = names_body(int(1.5 * MiB))
    statuses: list[int] = []

    def post() -> None:
        with server.client() as c:
            statuses.append(c.post("/scheduler/filter", content=body).status_code)

    threads = [threading.Thread(target=post) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert statuses == [200] * 4
    with server.client() as c:
        assert c.get("/healthz").status_code == 200
