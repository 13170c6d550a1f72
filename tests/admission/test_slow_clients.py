"""Slow clients against `vramgate serve` with a lowered descriptor limit: held connections are aborted at the read
deadline, connections beyond the bound are refused at once, and fresh connections are served again."""

from __future__ import annotations

import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .helpers import EXAMPLES
from .test_server import VRAMGATE, free_port, serving_with_descriptors, wait_ready
from .tlsutil import client_context, request

NOFILE = 256  # a small container's soft limit, scaled down
HELD = 300  # more slow clients than descriptors
DEADLINE = 2.0
SLOW_PEER = "127.0.0.2"  # the slow clients' address; fresh requests come from 127.0.0.1


@pytest.fixture
def limited(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    with serving_with_descriptors(tmp_path, NOFILE, f"read_deadline_seconds: {DEADLINE}\nshutdown_delay_seconds: 0"
                                  ) as running:
        yield running


def _slow(port: int, ctx: ssl.SSLContext, i: int) -> ssl.SSLSocket | None:
    """A TLS connection that sends part of a request and then nothing (three ways, in turn)."""
    try:
        raw = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(SLOW_PEER, 0))
        tls = ctx.wrap_socket(raw, server_hostname="localhost")
        partial = (b"POST /validate HTTP/1.1\r\nHost: x\r\n",  # half the headers
                   b"POST /valid",  # half the request line
                   b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")[i % 3]  # half the body
        tls.sendall(partial)
        return tls
    except OSError:
        return None  # refused over the bound, or out of descriptors on our side


def _metric(port: int, ca: Path, name: str) -> float:
    status, _, body = request(port, client_context(ca), path="/metrics")
    assert status == 200
    for line in body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def test_slow_clients_are_cut_at_the_deadline_and_fresh_ones_served(limited: tuple[int, Path]) -> None:
    port, ca = limited
    ctx = client_context(ca)
    started = time.monotonic()
    held = [s for s in (_slow(port, ctx, i) for i in range(HELD)) if s is not None]
    # One peer holds at most half the bound (90 % of 256 descriptors): the rest of its connections are refused
    # at once, and a fresh request from another address is served while they are held.
    assert len(held) <= 230 // 2 + 5, len(held)
    assert request(port, ctx, path="/healthz")[0] == 200
    # Once the deadline has passed, every held connection is aborted; the peer, struck that often within a
    # minute, is refused from then on, and fresh connections from elsewhere are answered.
    time.sleep(max(0.0, started + DEADLINE + 1.5 - time.monotonic()))
    assert request(port, ctx, path="/healthz")[0] == 200
    refused = _metric(port, ca, "vramgate_connections_refused_total")
    closed = _metric(port, ca, "vramgate_connections_closed_slow_total")
    assert refused > 0
    assert closed >= 0.8 * len(held), (closed, len(held), refused)
    for s in held:
        s.close()
    assert _slow(port, ctx, 0) is None or _refused_now(port)
    assert sum(request(port, ctx, path="/healthz")[0] == 200 for _ in range(20)) == 20


def _refused_now(port: int) -> bool:
    """Whether a fresh TCP connection from the slow peer is closed at once (refused for its strikes)."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(SLOW_PEER, 0))
    try:
        raw.settimeout(2)
        return raw.recv(1) == b""
    except OSError:
        return True
    finally:
        raw.close()


def test_sigterm_with_idle_keepalive_clients_is_quiet(tmp_path: Path) -> None:
    """Idle keep-alive connections (the API server keeps them) do not hold shutdown up to its timeout."""
    import http.client
    import signal

    config = tmp_path / "config.yaml"
    config.write_text("server:\n  shutdown_delay_seconds: 0\n  shutdown_timeout_seconds: 3\n")
    port = free_port()
    proc = subprocess.Popen(
        [str(VRAMGATE), "serve", "--config", str(config), "--nodes", str(EXAMPLES / "cluster.yaml"),
         "--host", "127.0.0.1", "--port", str(port), "--dev"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        ca = tmp_path / "certs" / "ca.crt"
        wait_ready(port, ca, proc)
        idle = []
        for _ in range(5):
            conn = http.client.HTTPSConnection("127.0.0.1", port, context=client_context(ca), timeout=10)
            conn.request("GET", "/healthz")
            response = conn.getresponse()
            response.read()
            assert response.status == 200
            idle.append(conn)  # kept open: keep-alive, idle
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
        took = time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    assert b"timeout graceful shutdown exceeded" not in err, err.decode()[-2000:]
    assert took < 2.5, took
