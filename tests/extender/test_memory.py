"""The extender's body limit follows its container's memory limit, and large bodies are served one at a time."""

from __future__ import annotations

import socket
import ssl
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
    # A 384 MiB container holds (192 - 144) MiB / 16 = 3 MiB of body; the configured 64 MiB does not apply.
    monkeypatch.setattr(routes, "_MEMORY_LIMIT", 384 * MiB)
    state = AppState(Config(extender=Extender()), FixedInventory(fixed_snapshot()), role="extender")
    with serve_app(create_app(state)) as running:
        yield running


def names_body(size: int) -> bytes:
    """A NodeNames body of about ``size`` bytes (names the inventory does not know)."""
    count = size // 16
    return orjson.dumps({"Pod": gpu_pod(), "NodeNames": [f"ghost-{i:08d}" for i in range(count)]})


def test_body_limit_is_derived_from_the_memory_limit() -> None:
    assert limits.extender_body_limit(64 * MiB, None) == 64 * MiB
    assert limits.extender_body_limit(64 * MiB, 512 * MiB) == (256 - 144) * MiB // 16
    assert limits.extender_body_limit(16 * MiB, 4096 * MiB) == 16 * MiB
    assert limits.extender_body_limit(64 * MiB, 200 * MiB) == limits.MIN_BODY_BYTES
    assert "memory limit" in limits.too_large_hint(3 * MiB, 64 * MiB, 384 * MiB)
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
        assert "384 MiB memory limit" in r.text and "nodeCacheCapable" in r.text
        r = c.post("/scheduler/filter", content=names_body(int(2.5 * MiB)))
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


def _send_and_vanish(server: Running, body: bytes, declared: int) -> None:
    """Post ``body`` (declaring ``declared`` bytes) over TLS and close without reading the answer."""
    context = ssl.create_default_context(cafile=str(server.ca_path))
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        tls.sendall(b"POST /scheduler/filter HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n" % declared + body)


@pytest.mark.parametrize("whole", [True, False], ids=["gone-before-the-answer", "gone-mid-body"])
def test_a_scheduler_that_vanishes_gives_the_large_body_slot_back(server: Running, whole: bool) -> None:
    body = names_body(int(1.5 * MiB))
    for _ in range(3):
        _send_and_vanish(server, body if whole else body[: len(body) // 2], len(body))
    # Were the slot kept by a vanished client, this would wait for ever (the client's timeout is 10 s).
    with server.client() as c:
        assert c.post("/scheduler/filter", content=body).status_code == 200
