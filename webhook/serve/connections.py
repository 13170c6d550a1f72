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
import logging
import resource
import time
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from ..metrics import Metrics
from ..tls.reload import CertReloader

log = logging.getLogger("vramgate.server")
_LOG_EVERY_S = 60.0


def default_max_connections() -> int:
    """90 % of the soft descriptor limit (the rest for listeners, the watch, files), at least 64."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return 60_000
    return max(64, int(soft * 0.9))


class ConnectionGuard:
    """The limits a server's connections live under, and what they cost (counted, logged now and then)."""

    def __init__(self, read_deadline: float, max_connections: int, metrics: Metrics | None = None) -> None:
        self.read_deadline = read_deadline
        self.max_connections = max_connections
        self.metrics = metrics
        self.slow_count = 0
        self.refused_count = 0
        self._logged_at = 0.0

    def slow(self) -> None:
        self.slow_count += 1
        if self.metrics is not None:
            self.metrics.connections_closed_slow.inc()
        self._log()

    def refused(self) -> None:
        self.refused_count += 1
        if self.metrics is not None:
            self.metrics.connections_refused.inc()
        self._log()

    def _log(self) -> None:
        now = time.monotonic()
        if now - self._logged_at >= _LOG_EVERY_S:
            self._logged_at = now
            log.warning("connections closed: no complete request within the read deadline, or over the limit",
                        extra={"fields": {"closed_slow_total": self.slow_count, "refused_total": self.refused_count,
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

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if self._reloader is not None:
            self._cert_generation = self._reloader.reloads
        guard = self._guard
        if guard is None:
            return
        if len(self.connections) > guard.max_connections:
            guard.refused()
            transport.abort()
            return
        # Nothing sent yet is idle, not slow: Go's HTTP client (the API server's, kube-scheduler's) dials ahead and
        # pools the connections it did not need. Closed like any idle keep-alive connection; the read deadline starts
        # with the first byte of a request (on_message_begin), and uvicorn cancels this timer when data arrives.
        self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive, self.timeout_keep_alive_handler)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm()

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
            self._guard.slow()
            self.transport.abort()
