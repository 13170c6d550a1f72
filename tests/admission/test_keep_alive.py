"""Keep-alive connections of `vramgate serve`: idle ones live for ``server.keep_alive_seconds``, not uvicorn's 5 s (the
API server and kube-scheduler keep idle connections for 90 s, and the side that closes first must be theirs); one
that has sent nothing is idle, not slow; one made with a certificate since replaced is closed after its next answer."""

from __future__ import annotations

import http.client
import socket
import ssl
import time
from pathlib import Path

from cryptography import x509

from webhook.config import Config
from webhook.tls.certs import make_bundle, write_bundle

from .test_server import running_serve
from .tlsutil import client_context, request, serial_of

KEEP_ALIVE = 7.0  # above uvicorn's 5 s, so the first check fails under its default


def test_default_outlives_the_api_servers_idle_connections() -> None:
    assert Config().server.keep_alive_seconds > 90.0


def test_an_idle_connection_is_kept_for_keep_alive_seconds_then_closed(tmp_path: Path) -> None:
    with running_serve(tmp_path, f"keep_alive_seconds: {KEEP_ALIVE}") as (_, port):
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=client_context(tmp_path / "certs" / "ca.crt"),
                                           timeout=10)
        conn.request("GET", "/healthz")
        assert conn.getresponse().read() is not None
        sock = conn.sock
        time.sleep(6.0)  # idle past uvicorn's default
        conn.request("GET", "/healthz")
        resp = conn.getresponse()
        assert resp.status == 200 and resp.read() is not None
        assert conn.sock is sock  # the same connection: no new TLS handshake
        started = time.monotonic()
        sock.settimeout(KEEP_ALIVE + 5)
        assert sock.recv(1) == b""  # the server closes it once idle for keep_alive_seconds
        waited = time.monotonic() - started
        assert KEEP_ALIVE - 1 < waited < KEEP_ALIVE + 2, waited
        conn.close()


def test_a_connection_that_has_sent_nothing_is_idle_not_slow(tmp_path: Path) -> None:
    """Go's HTTP client dials ahead and pools the connections it did not use: one that has sent nothing yet lives as
    an idle keep-alive connection, not the read deadline of a request begun and not finished."""
    with running_serve(tmp_path, "read_deadline_seconds: 1\nkeep_alive_seconds: 3") as (_, port):
        ctx = client_context(tmp_path / "certs" / "ca.crt")
        pooled = _connect(port, ctx)
        time.sleep(2.0)  # past the read deadline, within the keep-alive
        assert _get(pooled).startswith(b"HTTP/1.1 200")
        pooled.close()
        silent = _connect(port, ctx)
        started = time.monotonic()
        assert silent.recv(1) == b""  # closed once idle for keep_alive_seconds
        assert 2.5 < time.monotonic() - started < 5.0
        silent.close()
        metrics = request(port, ctx, path="/metrics")[2].decode()
        assert "vramgate_connections_closed_slow_total 0.0" in metrics


def test_a_connection_made_with_a_replaced_certificate_is_closed_after_its_next_answer(tmp_path: Path) -> None:
    """With idle connections kept for minutes, a rotated-out certificate would stay in use on them: each is answered
    once more with ``Connection: close``, and the client's next connection gets the current certificate."""
    certs = tmp_path / "certs"
    with running_serve(tmp_path) as (_, port):
        second = make_bundle(["localhost", "127.0.0.1"])
        both = tmp_path / "both.pem"
        both.write_bytes((certs / "ca.crt").read_bytes() + second.ca_pem)
        ctx = client_context(both)
        old = _connect(port, ctx)
        head = _get(old)
        assert head.startswith(b"HTTP/1.1 200") and b"connection: close" not in head.lower()  # kept alive
        old_serial = x509.load_der_x509_certificate(old.getpeercert(binary_form=True)).serial_number
        write_bundle(second, certs)
        new_serial = serial_of(certs / "tls.crt")
        deadline = time.monotonic() + 10
        while request(port, ctx)[1] != new_serial:  # the reload is polled every second
            assert time.monotonic() < deadline, "certificate not reloaded"
            time.sleep(0.1)
        assert x509.load_der_x509_certificate(old.getpeercert(binary_form=True)).serial_number == old_serial
        head = _get(old)  # still answered on the old connection
        assert head.startswith(b"HTTP/1.1 200") and b"connection: close" in head.lower()
        assert old.recv(1) == b""  # then closed by the server
        old.close()
        fresh = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
        for _ in range(2):  # on the current certificate, and kept alive
            fresh.request("GET", "/healthz")
            resp = fresh.getresponse()
            assert resp.status == 200 and resp.read() is not None and resp.getheader("connection") is None
        assert x509.load_der_x509_certificate(fresh.sock.getpeercert(binary_form=True)).serial_number == new_serial
        fresh.close()


def _connect(port: int, ctx: ssl.SSLContext) -> ssl.SSLSocket:
    return ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10), server_hostname="localhost")


def _get(tls: ssl.SSLSocket) -> bytes:
    """GET /healthz on an open connection; the response head (the body is a few bytes and read with it)."""
    tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = tls.recv(4096)
        assert chunk, "closed before an answer"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    length = int(next(line.split(b":")[1] for line in lines if line.lower().startswith(b"content-length")))
    while len(body) < length:
        body += tls.recv(4096)
    return head
