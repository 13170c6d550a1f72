"""A raw HTTPS client that reports the server certificate's serial, one new connection per request."""

from __future__ import annotations

import http.client
import ssl
from pathlib import Path

from cryptography import x509


def client_context(*ca_files: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    for ca in ca_files:
        ctx.load_verify_locations(cafile=str(ca))
    return ctx


def serial_of(path: Path) -> int:
    return x509.load_pem_x509_certificate(path.read_bytes()).serial_number


def request(port: int, ctx: ssl.SSLContext, method: str = "GET", path: str = "/healthz",
            body: bytes | None = None) -> tuple[int, int, bytes]:
    """(status, peer certificate serial, body) over a fresh TLS connection."""
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
    try:
        conn.connect()
        # Read the certificate before the exchange: a draining server answers "Connection: close", and
        # http.client drops the socket once that response is read.
        assert conn.sock is not None
        der = conn.sock.getpeercert(binary_form=True)
        assert der is not None
        conn.request(method, path, body=body, headers={"content-type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, x509.load_der_x509_certificate(der).serial_number, data
    finally:
        conn.close()
