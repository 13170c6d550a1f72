"""Every accepted socket counted and bounded before TLS: a handshake deadline, a share per peer, strikes by rate.

asyncio's own TLS server (``create_server(ssl=...)``) hands a connection to the HTTP protocol only once its handshake
is done, and gives a socket that never starts one 60 s: 1,100 TCP connections that sent nothing held all of a
1,024-descriptor pod, and every fresh connection failed, unlogged. Here the listener is plain TCP and
:class:`TLSAcceptor` decides at once, by what it knows at accept time:

- over ``server.max_connections`` sockets open (TLS or not): aborted, counted as refused;
- a peer holding ``server.max_connections_per_peer`` already, or one struck ``STRIKES`` times in the last
  ``STRIKE_WINDOW_S`` (a handshake not done in ``server.handshake_deadline_seconds``, a request not delivered
  within the read deadline): aborted, so a client that reconnects each time it is cut stops costing the others;
- otherwise TLS starts (``loop.start_tls``, with the handshake deadline) on the reloader's live context, and the
  HTTP protocol (connections.DeadlineProtocol) gets the TLS transport.

Bytes that arrive between the handshake and the HTTP protocol taking the transport are kept and replayed
(:class:`_Holding`): asyncio's SSL protocol reads what TLS 1.3 clients send with their Finished at once.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("vramgate.server")

STRIKES = 10
STRIKE_WINDOW_S = 60.0


@dataclass
class _Peer:
    open: int = 0
    strikes: collections.deque[float] = field(default_factory=collections.deque)


class PeerBook:
    """Open sockets and recent strikes per peer address; the total of open sockets."""

    def __init__(self, max_open: int, max_per_peer: int) -> None:
        self.max_open = max_open
        self.max_per_peer = max_per_peer
        self.open = 0
        self._peers: dict[str, _Peer] = {}

    def admit(self, peer: str, now: float) -> str | None:
        """Count a new socket from ``peer``, or say why it is refused (nothing counted then)."""
        if self.open >= self.max_open:
            return "max-connections"
        p = self._peers.get(peer)
        if p is not None:
            if p.open >= self.max_per_peer:
                return "per-peer"
            while p.strikes and now - p.strikes[0] > STRIKE_WINDOW_S:
                p.strikes.popleft()
            if len(p.strikes) >= STRIKES:
                return "strikes"
        else:
            p = self._peers[peer] = _Peer()
        p.open += 1
        self.open += 1
        return None

    def release(self, peer: str) -> None:
        p = self._peers.get(peer)
        self.open = max(0, self.open - 1)
        if p is None:
            return
        p.open = max(0, p.open - 1)
        if not p.open and not p.strikes:
            del self._peers[peer]

    def strike(self, peer: str, now: float) -> None:
        p = self._peers.setdefault(peer, _Peer())
        p.strikes.append(now)
        if len(p.strikes) > STRIKES:
            p.strikes.popleft()

    def pressure(self) -> float:
        """The share of ``max_open`` in use."""
        return self.open / self.max_open if self.max_open else 0.0


class _Holding(asyncio.Protocol):
    """The TLS transport's first protocol: keeps what arrives until the HTTP protocol takes over."""

    def __init__(self) -> None:
        self.data: list[bytes] = []
        self.eof = False
        self.lost: tuple[bool, Exception | None] = (False, None)

    def data_received(self, data: bytes) -> None:
        self.data.append(data)

    def eof_received(self) -> bool | None:
        self.eof = True
        return True  # keep the transport open until the HTTP protocol has seen the data

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = (True, exc)


class TLSAcceptor(asyncio.Protocol):
    """A raw TCP connection: admitted or refused at once, then TLS, then the HTTP protocol ``make_http()``."""

    def __init__(self, make_http: Callable[[], Any], context: Callable[[], ssl.SSLContext], guard: Any) -> None:
        self._make_http = make_http
        self._context = context
        self._guard = guard
        self._peer = ""
        self._raw: Any = None
        self._early: list[bytes] = []

    def connection_made(self, transport: Any) -> None:  # asyncio's or uvloop's TCP transport
        peer = transport.get_extra_info("peername")
        self._peer = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
        self._guard.sweep_idle()
        refusal = self._guard.book.admit(self._peer, time.monotonic())
        if refusal is not None:
            self._guard.refused(refusal, self._peer)
            transport.abort()
            return
        transport.pause_reading()  # the ClientHello waits for the TLS protocol, not for this one
        self._raw = transport
        asyncio.get_running_loop().create_task(self._start_tls(transport))

    def data_received(self, data: bytes) -> None:
        # uvloop starts reading after connection_made whatever it was told there: the ClientHello may land here.
        self._early.append(data)
        if self._raw is not None:
            self._raw.pause_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        pass  # released by _start_tls (failed handshake) or by the HTTP protocol (after)

    async def _replay(self, raw: Any, handshake: asyncio.Future[Any]) -> None:
        """Hand the bytes read before TLS started to its protocol, once start_tls has installed it (it keeps them
        in its incoming buffer until the handshake reads them, whichever runs first)."""
        for _ in range(10):
            await asyncio.sleep(0)  # start_tls runs up to its first await: set_protocol(its SSLProtocol)
            proto = raw.get_protocol()
            if proto is not self or handshake.done():
                break
        else:
            return
        data, self._early = b"".join(self._early), []
        if proto is self or not data:
            return
        if hasattr(proto, "get_buffer"):  # asyncio's and uvloop's SSLProtocol are buffered protocols
            view = memoryview(data)
            while view:
                buf = proto.get_buffer(len(view))
                n = min(len(buf), len(view))
                buf[:n] = view[:n]
                proto.buffer_updated(n)
                view = view[n:]
        else:
            proto.data_received(data)

    async def _start_tls(self, raw: Any) -> None:
        loop = asyncio.get_running_loop()
        holding = _Holding()
        guard = self._guard
        started = time.monotonic()
        try:
            handshake = asyncio.ensure_future(loop.start_tls(raw, holding, self._context(), server_side=True,
                                                             ssl_handshake_timeout=guard.handshake_deadline))
            await self._replay(raw, handshake)  # always: bytes may land here until start_tls takes the socket
            tls = await handshake
        except Exception as exc:
            now = time.monotonic()
            # asyncio and uvloop end a late handshake with ConnectionAbortedError ("SSL handshake is taking longer
            # than ..."): told apart from a client that hung up or spoke no TLS by the time it took.
            if isinstance(exc, TimeoutError) or now - started >= 0.95 * guard.handshake_deadline:
                guard.book.strike(self._peer, now)
                guard.handshake_timed_out(self._peer)
            guard.book.release(self._peer)
            raw.abort()
            return
        if tls is None:
            guard.book.release(self._peer)
            raw.abort()
            return
        http = self._make_http()
        http.vg_peer = self._peer  # released by the HTTP protocol's connection_lost
        http.connection_made(tls)
        tls.set_protocol(http)
        for chunk in holding.data:
            http.data_received(chunk)
        lost, why = holding.lost
        if lost:
            http.connection_lost(why)
        elif holding.eof:
            http.eof_received()
