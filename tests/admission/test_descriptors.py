"""Descriptors under attack (issue #44): `vramgate serve` at 1,024 descriptors against 1,100 TCP connections that
never start TLS, idle TLS connections and slow clients that reconnect whenever they are cut, each kept topped up
from an address of its own, while fresh clients from another address ask /healthz. Figures with ``pytest -s``."""

from __future__ import annotations

import resource
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from .test_server import serving_with_descriptors
from .tlsutil import client_context, request

NOFILE = 1024
WINDOW_S = 30.0


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 5000:
        pytest.fail(f"the attack needs ~4,000 client sockets; this machine's hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 20000) if hard != resource.RLIM_INFINITY else 20000,
                                                hard))
    try:
        with serving_with_descriptors(tmp_path, NOFILE, "shutdown_delay_seconds: 0") as running:
            yield running
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


class Pool(threading.Thread):
    """Keeps ``size`` connections from ``peer`` open, opening a new one for each the server closes."""

    def __init__(self, port: int, peer: str, size: int, opener: Callable[[socket.socket], socket.socket]) -> None:
        super().__init__(daemon=True)
        self.port, self.peer, self.size, self.opener = port, peer, size, opener
        self.stop = threading.Event()
        self.opened = self.failed = 0
        self.socks: list[socket.socket] = []

    def run(self) -> None:
        while not self.stop.is_set():
            for _ in range(min(50, self.size - len(self.socks))):
                try:
                    raw = socket.create_connection(("127.0.0.1", self.port), timeout=2,
                                                   source_address=(self.peer, 0))
                    self.socks.append(self.opener(raw))
                    self.opened += 1
                except OSError:
                    self.failed += 1
            self._drop_closed()
            self.stop.wait(0.05)
        for s in self.socks:
            s.close()

    def _drop_closed(self) -> None:
        if not self.socks:
            return
        poller = select.poll()  # select() takes no descriptor above 1,024
        by_fd = {s.fileno(): s for s in self.socks}
        for fd in by_fd:
            poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        for fd, _ in poller.poll(0):
            s = by_fd[fd]
            try:
                s.setblocking(False)
                gone = s.recv(1) == b""
            except (ssl.SSLWantReadError, BlockingIOError):
                gone = False
            except OSError:
                gone = True
            if gone:
                s.close()
                self.socks.remove(s)


def test_fresh_connections_are_served_under_a_descriptor_attack(served: tuple[int, Path]) -> None:
    port, ca = served
    ctx = client_context(ca)

    def tcp_only(raw: socket.socket) -> socket.socket:
        return raw

    def idle_tls(raw: socket.socket) -> socket.socket:
        return ctx.wrap_socket(raw, server_hostname="localhost")

    def slow(raw: socket.socket) -> socket.socket:
        tls = ctx.wrap_socket(raw, server_hostname="localhost")
        tls.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        return tls

    pools = [Pool(port, "127.0.0.2", 1100, tcp_only), Pool(port, "127.0.0.3", 1100, idle_tls),
             Pool(port, "127.0.0.4", 1100, slow)]
    for p in pools:
        p.start()
    results: list[tuple[float, bool]] = []
    started = time.monotonic()
    try:
        while (t := time.monotonic() - started) < WINDOW_S:
            try:
                ok = request(port, ctx, path="/healthz")[0] == 200
            except OSError:
                ok = False
            results.append((t, ok))
            time.sleep(0.25)
        held = [len(p.socks) for p in pools]
    finally:
        for p in pools:
            p.stop.set()
        for p in pools:
            p.join(timeout=30)
    failed = sum(not ok for _, ok in results)
    share = failed / len(results)
    early = [ok for t, ok in results if t < 10]
    late = [ok for t, ok in results if t >= 10]
    print(f"\n{len(results)} fresh connections in {WINDOW_S:.0f} s under attack at {NOFILE} descriptors: "
          f"{failed} failed ({share:.0%}); first 10 s {early.count(False)}/{len(early)}, "
          f"after {late.count(False)}/{len(late)}; held at the end (TCP-only, idle TLS, slow): {held}; "
          f"opened {[p.opened for p in pools]}, refused/failed {[p.failed for p in pools]}")
    assert share <= 0.40, share
    # The service is whole afterwards.
    time.sleep(1)
    assert sum(request(port, ctx, path="/healthz")[0] == 200 for _ in range(10)) == 10
