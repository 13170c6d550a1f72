"""TLS: 1.2 minimum with AEAD suites only, and a rotated certificate goes live without a failed request or a restart."""

from __future__ import annotations

import http.client
import shutil
import socket
import ssl
import threading
import time
import warnings
from pathlib import Path

import orjson
import pytest
from cryptography import x509

from tests.harness import serve_app
from webhook.config import Config
from webhook.serve.server import build_app
from webhook.serve.state import AppState
from webhook.tls.certs import KeyType, make_bundle, write_bundle
from webhook.tls.reload import CertReloader

from .conftest import SwappableInventory
from .helpers import cluster, example, review
from .tlsutil import client_context, request, serial_of

NAMES = ["localhost", "127.0.0.1"]


def _serve(cert_dir: Path, interval: float = 0.1):  # type: ignore[no-untyped-def]
    reloader = CertReloader.from_files(cert_dir / "tls.crt", cert_dir / "tls.key", interval)
    state = AppState(Config(), SwappableInventory(cluster()))
    running = serve_app(build_app(state, reloader), cert_dir=cert_dir,
                        ssl_context_factory=lambda config, default: reloader.context)
    return reloader, running


def test_tls_12_minimum(tmp_path: Path) -> None:
    write_bundle(make_bundle(NAMES), tmp_path)
    reloader, running = _serve(tmp_path)
    assert reloader.context.minimum_version == ssl.TLSVersion.TLSv1_2
    with running as srv:
        ctx = client_context(tmp_path / "ca.crt")
        with socket.create_connection(("127.0.0.1", srv.port)) as raw, \
                ctx.wrap_socket(raw, server_hostname="localhost") as s:
            assert s.version() in ("TLSv1.2", "TLSv1.3")
        old = client_context(tmp_path / "ca.crt")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            old.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
            old.maximum_version = ssl.TLSVersion.TLSv1_1
        with pytest.raises((ssl.SSLError, ConnectionError)), socket.create_connection(("127.0.0.1", srv.port)) as raw, \
                old.wrap_socket(raw, server_hostname="localhost"):
            pass


# (key type, CBC suites a TLS 1.2 client may offer, AEAD suites it may offer) for both keys `vramgate certs` makes.
SUITES = {
    "ecdsa": (("ECDHE-ECDSA-AES128-SHA256", "ECDHE-ECDSA-AES256-SHA384", "ECDHE-ECDSA-AES128-SHA"),
              ("ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-ECDSA-AES256-GCM-SHA384", "ECDHE-ECDSA-CHACHA20-POLY1305")),
    "rsa": (("ECDHE-RSA-AES128-SHA256", "ECDHE-RSA-AES128-SHA", "AES128-SHA", "AES256-SHA256", "AES128-GCM-SHA256"),
            ("ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-RSA-AES256-GCM-SHA384", "ECDHE-RSA-CHACHA20-POLY1305")),
}


def _tls12_client(ca: Path, cipher: str) -> ssl.SSLContext:
    """A client that speaks TLS 1.2 only and offers one suite."""
    ctx = client_context(ca)
    ctx.minimum_version = ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers(cipher)
    return ctx


@pytest.mark.parametrize("key_type", ["ecdsa", "rsa"])
def test_tls_12_offers_aead_suites_only(tmp_path: Path, key_type: KeyType) -> None:
    """A TLS 1.2 client offering only a CBC (or static-RSA) suite is refused; one offering an ECDHE AEAD suite gets it.
    TLS 1.3 is untouched."""
    write_bundle(make_bundle(NAMES, key_type=key_type), tmp_path)
    _, running = _serve(tmp_path)
    ca = tmp_path / "ca.crt"
    cbc, aead = SUITES[key_type]
    with running as srv:
        for cipher in cbc:
            with pytest.raises((ssl.SSLError, ConnectionError)), \
                    socket.create_connection(("127.0.0.1", srv.port), timeout=10) as raw, \
                    _tls12_client(ca, cipher).wrap_socket(raw, server_hostname="localhost"):
                pass
        agreed = []
        for cipher in aead:
            with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as raw, \
                    _tls12_client(ca, cipher).wrap_socket(raw, server_hostname="localhost") as s:
                assert s.version() == "TLSv1.2"
                name = s.cipher()
                assert name is not None and name[0] == cipher
                agreed.append(name[0])
        # An ordinary client still reaches a review over TLS 1.3, and is served.
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as raw, \
                client_context(ca).wrap_socket(raw, server_hostname="localhost") as s:
            assert s.version() == "TLSv1.3"
        status, _, _ = request(srv.port, client_context(ca))
        assert status == 200
    print(f"\n{key_type}: refused at TLS 1.2 {', '.join(cbc)}; agreed {', '.join(agreed)}")


def test_rotation_under_load_fails_nothing(tmp_path: Path) -> None:
    first, second = make_bundle(NAMES), make_bundle(NAMES)
    write_bundle(first, tmp_path)
    cas = tmp_path / "trust"
    cas.mkdir()
    (cas / "both.pem").write_bytes(first.ca_pem + second.ca_pem)
    old_serial = serial_of(tmp_path / "tls.crt")
    reloader, running = _serve(tmp_path)
    body = orjson.dumps(review(example("llama3-8b-deployment.yaml")))
    with running as srv:
        ctx = client_context(cas / "both.pem")
        results: list[tuple[float, int, int]] = []
        errors: list[BaseException] = []
        stop = threading.Event()

        def loop() -> None:
            while not stop.is_set():
                try:
                    started = time.monotonic()
                    status, serial, _ = request(srv.port, ctx, "POST", "/validate", body)
                    results.append((started, status, serial))
                except BaseException as exc:
                    errors.append(exc)

        threads = [threading.Thread(target=loop) for _ in range(2)]
        for t in threads:
            t.start()
        # A request in flight across the rotation: headers and half the body now, the rest afterwards.
        slow = socket.create_connection(("127.0.0.1", srv.port))
        slow_tls = ctx.wrap_socket(slow, server_hostname="127.0.0.1")
        slow_tls.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         + f"Content-Length: {len(body)}\r\n\r\n".encode() + body[: len(body) // 2])
        deadline = time.monotonic() + 10
        while len(results) < 3 and time.monotonic() < deadline:  # some requests see the old cert first
            time.sleep(0.05)
        write_bundle(second, tmp_path)  # renames tls.crt, then tls.key: a half-rotated pair is seen and skipped
        new_serial = serial_of(tmp_path / "tls.crt")
        deadline = time.monotonic() + 10
        while reloader.reloads == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        reloaded_at = time.monotonic()  # the live context holds the new cert from (at latest) here on
        deadline = time.monotonic() + 10
        while not any(s == new_serial for _, _, s in results) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        slow_tls.sendall(body[len(body) // 2:])
        reply = slow_tls.recv(65536)
        stop.set()
        for t in threads:
            t.join(timeout=10)
        slow_tls.close()

    assert errors == []
    assert reply.startswith(b"HTTP/1.1 200 ")
    assert all(status == 200 for _, status, _ in results)
    ordered = sorted(results)  # by connection start
    assert ordered[0][2] == old_serial and ordered[-1][2] == new_serial
    # Every connection opened after the reload sees the new cert. (Those in flight across it may see either:
    # with several clients, completion order says nothing about which handshake came first.)
    after = [serial for started, _, serial in ordered if started > reloaded_at]
    assert after and set(after) == {new_serial}
    assert len(results) > 5 and reloader.reloads == 1


def test_keep_alive_connection_survives_rotation(tmp_path: Path) -> None:
    first, second = make_bundle(NAMES), make_bundle(NAMES)
    write_bundle(first, tmp_path)
    reloader, running = _serve(tmp_path)
    both = tmp_path / "both.pem"
    both.write_bytes(first.ca_pem + second.ca_pem)
    old_serial = serial_of(tmp_path / "tls.crt")
    with running as srv:
        conn = http.client.HTTPSConnection("127.0.0.1", srv.port, context=client_context(both), timeout=10)
        conn.request("GET", "/healthz")
        assert conn.getresponse().read() and conn.sock is not None
        sock = conn.sock
        write_bundle(second, tmp_path)
        deadline = time.monotonic() + 5
        while reloader.reloads == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert reloader.reloads == 1
        conn.request("GET", "/healthz")  # the same connection, still on the old certificate
        resp = conn.getresponse()
        assert resp.status == 200 and resp.read() and conn.sock is sock
        der = sock.getpeercert(binary_form=True)
        assert der is not None
        assert x509.load_der_x509_certificate(der).serial_number == old_serial
        conn.close()
        assert request(srv.port, client_context(both))[1] == serial_of(tmp_path / "tls.crt") != old_serial


def test_bad_pair_keeps_the_current_certificate(tmp_path: Path) -> None:
    first, other = make_bundle(NAMES), make_bundle(NAMES)
    write_bundle(first, tmp_path)
    serial = serial_of(tmp_path / "tls.crt")
    reloader, running = _serve(tmp_path)
    with running as srv:
        ctx = client_context(tmp_path / "ca.crt")
        (tmp_path / "tls.crt").write_bytes(other.cert_pem)  # a cert that does not match the key
        deadline = time.monotonic() + 5
        while reloader.failures == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert reloader.failures == 1 and reloader.reloads == 0
        assert request(srv.port, ctx)[:2] == (200, serial)
        (tmp_path / "tls.crt").write_text("not a certificate")
        time.sleep(0.3)
        assert request(srv.port, ctx)[:2] == (200, serial)
        # Fixing the files brings the new pair in.
        shutil.rmtree(tmp_path / "trust", ignore_errors=True)
        write_bundle(other, tmp_path)
        deadline = time.monotonic() + 5
        while reloader.reloads == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert request(srv.port, client_context(tmp_path / "ca.crt"))[1] == serial_of(tmp_path / "tls.crt")
