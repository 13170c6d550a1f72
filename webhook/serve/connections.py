"""Connections held without a request: a read deadline per connection, and a bound on how many are open.

uvicorn starts no timer on a connection until its first response, so a client that completes the TLS handshake
and then sends half a request line, half its headers or half its body holds a descriptor for as long as it
likes; a thousand of them exhaust a container's descriptor limit and every new connection — the API server's
webhook calls among them — fails: the validating webhook then fails closed, the mutating one open.

:class:`DeadlineProtocol` is uvicorn's httptools protocol with a timer armed when a request begins, disarmed when
the request is complete: a connection that has not delivered a complete request within
``server.read_deadline_seconds`` of its first byte is aborted. Idle connections (between requests, or before the
first: Go's HTTP client dials ahead and pools what it did not use) are closed after ``server.keep_alive_seconds``. A
connection made with a certificate that has since been replaced is closed after its next response. A connection
beyond ``server.max_connections`` (by default 90 % of the soft descriptor limit) is refused at once, so the
descriptors left are enough to serve. Aborts and refusals are counted (``vramgate_connections_closed_slow_total``,
``vramgate_connections_refused_total``) and logged at most once a minute.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import resource
import time
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from ..metrics import Metrics
from ..tls.reload import CertReloader
from .acceptor import PeerBook
from .peers import peer_names

log = logging.getLogger("vramgate.server")
_LOG_EVERY_S = 60.0
# Past this share of the descriptors in use, idle connections live PRESSED_KEEP_ALIVE_S instead of the configured
# keep-alive (120 s, above client-go's 90 s): held idle connections must not starve fresh ones.
PRESSURE = 0.5
PRESSED_KEEP_ALIVE_S = 10.0


def default_max_connections() -> int:
    """90 % of the soft descriptor limit (the rest for listeners, the watch, files), at least 64."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return 60_000
    return max(64, int(soft * 0.9))


class ConnectionGuard:
    """The limits a server's connections live under, and what they cost (counted, logged now and then)."""

    def __init__(self, read_deadline: float, max_connections: int, metrics: Metrics | None = None, *,
                 handshake_deadline: float = 5.0, max_per_peer: int | None = None) -> None:
        self.read_deadline = read_deadline
        self.max_connections = max_connections
        self.handshake_deadline = handshake_deadline
        self.metrics = metrics
        self.book = PeerBook(max_connections, max_per_peer or max(1, max_connections // 2))
        self.slow_count = 0
        self.refused_count = 0
        self.handshake_count = 0
        self.refusals: collections.Counter[str] = collections.Counter()
        self.connections: set[Any] | None = None  # uvicorn's open HTTP connections (set by the first one)
        self._swept_at = 0.0
        self._logged_at = 0.0

    def slow(self, peer: str = "") -> None:
        self.slow_count += 1
        if peer:
            self.book.strike(peer, time.monotonic())
        if self.metrics is not None:
            self.metrics.connections_closed_slow.inc()
        self._log()

    def handshake_timed_out(self, peer: str) -> None:
        """A socket that did not finish TLS within the handshake deadline (counted as slow)."""
        self.handshake_count += 1
        self.slow()

    def refused(self, reason: str = "max-connections", peer: str = "") -> None:
        self.refused_count += 1
        self.refusals[reason] += 1
        if self.metrics is not None:
            self.metrics.connections_refused.inc()
        self._log()

    def keep_alive(self, configured: float) -> float:
        """The idle keep-alive now: as configured, or PRESSED_KEEP_ALIVE_S once half the descriptors are in use."""
        return configured if self.book.pressure() < PRESSURE else min(configured, PRESSED_KEEP_ALIVE_S)

    def sweep_idle(self) -> int:
        """Under pressure, close connections idle longer than PRESSED_KEEP_ALIVE_S (at most once a second)."""
        now = time.monotonic()
        if self.connections is None or self.book.pressure() < PRESSURE or now - self._swept_at < 1.0:
            return 0
        self._swept_at = now
        closed = 0
        for conn in list(self.connections):
            since = getattr(conn, "vg_idle_since", None)
            if since is not None and now - since > PRESSED_KEEP_ALIVE_S:
                if not conn.vg_used and conn.vg_peer:  # opened, never asked anything, held while others wait
                    self.book.strike(conn.vg_peer, now)
                conn.vg_close_idle()
                closed += 1
        return closed

    def _log(self) -> None:
        now = time.monotonic()
        if now - self._logged_at >= _LOG_EVERY_S:
            self._logged_at = now
            log.warning("connections closed: no complete request or TLS handshake in time, or refused",
                        extra={"fields": {"closed_slow_total": self.slow_count, "refused_total": self.refused_count,
                                          "handshake_timeouts_total": self.handshake_count,
                                          "refused_by_reason": dict(self.refusals),
                                          "open_sockets": self.book.open,
                                          "read_deadline_s": self.read_deadline,
                                          "max_connections": self.max_connections}})


class DeadlineProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a per-connection read deadline and a bound on open connections."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._guard: ConnectionGuard | None = getattr(self.config, "vg_guard", None)
        self._read_timer: asyncio.TimerHandle | None = None
        self._reloader: CertReloader | None = getattr(self.config, "reloader", None)  # set by the server's config
        self._cert_generation = 0
        self.vg_peer = ""  # set by the TLS acceptor, which counted this socket: released once, when lost
        self.vg_idle_since: float | None = None
        self.vg_used = False  # a request began on it
        self._client_names: tuple[str, ...] = ()

    @property  # type: ignore[override]
    def timeout_keep_alive(self) -> float:
        """uvicorn arms the idle timer with this after each response: shorter while descriptors run low."""
        return self._guard.keep_alive(self._keep_alive) if self._guard is not None else self._keep_alive

    @timeout_keep_alive.setter
    def timeout_keep_alive(self, value: float) -> None:
        self._keep_alive = value

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.vg_idle_since = time.monotonic()
        self._client_names = peer_names(transport.get_extra_info("peercert"))
        if self._reloader is not None:
            self._cert_generation = self._reloader.reloads
        guard = self._guard
        if guard is None:
            return
        if guard.connections is None:
            guard.connections = self.connections
        # Nothing sent yet is idle, not slow: Go's HTTP client (the API server's, kube-scheduler's) dials ahead and
        # pools the connections it did not need. Closed like any idle keep-alive connection; the read deadline starts
        # with the first byte of a request (on_message_begin), and uvicorn cancels this timer when data arrives.
        self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive, self.timeout_keep_alive_handler)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.vg_idle_since = None
        self.vg_used = True
        if self._client_names:  # ASGI's TLS extension, with the names of a verified client certificate
            self.scope["extensions"] = {"tls": {"vg_client_names": self._client_names}}
        self._arm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self.vg_idle_since = time.monotonic()

    def vg_close_idle(self) -> None:
        """Close this idle connection as its keep-alive timer would (the guard's sweep under pressure)."""
        self.vg_idle_since = None
        if self.timeout_keep_alive_task is not None:
            self.timeout_keep_alive_task.cancel()
        self.timeout_keep_alive_handler()

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        if self._reloader is not None and self._reloader.reloads != self._cert_generation and self.cycle is not None:
            # Made with a certificate since replaced: answer, then close (``Connection: close``), so the client
            # reconnects with the current one. Idle connections live ``server.keep_alive_seconds`` (longer than the
            # API server's 90 s), and a busy one forever: without this the old certificate would stay in use.
            self.cycle.keep_alive = False

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self.vg_idle_since = None
        if self.vg_peer and self._guard is not None:
            self._guard.book.release(self.vg_peer)
            self.vg_peer = ""
        super().connection_lost(exc)

    def shutdown(self) -> None:
        """At shutdown an idle keep-alive connection is aborted, not closed: a TLS close waits for the peer's
        close_notify, which an idle API-server connection never sends, and uvicorn then logs "timeout graceful
        shutdown exceeded" at error level with nothing in flight."""
        if self.cycle is None or self.cycle.response_complete:
            self._disarm()
            self.transport.abort()
        else:
            super().shutdown()

    def _arm(self) -> None:
        if self._guard is not None and self._read_timer is None:
            self._read_timer = self.loop.call_later(self._guard.read_deadline, self._too_slow)

    def _disarm(self) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None

    def _too_slow(self) -> None:
        self._read_timer = None
        if self._guard is not None and self.transport is not None and not self.transport.is_closing():
            self._guard.slow(self.vg_peer)
            self.transport.abort()
