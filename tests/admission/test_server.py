"""`vramgate serve` as a process: --dev certs, HTTPS with reload, JSON logs, and a graceful SIGTERM."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from cryptography import x509

from webhook.tls.certs import make_bundle, write_bundle

from .helpers import EXAMPLES, example, review
from .tlsutil import client_context, request, serial_of

VRAMGATE = Path(sys.executable).with_name("vramgate")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(port: int, ca: Path, proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else "exited"
        if ca.exists():
            try:
                if request(port, client_context(ca), path="/readyz")[0] == 200:
                    return
            except OSError:
                pass
        time.sleep(0.1)
    raise AssertionError("service did not become ready")


@contextlib.contextmanager
def running_serve(tmp_path: Path, server_config: str = "", *, pipes: bool = False, extra_args: list[str] | None = None
                  ) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """``vramgate serve --dev`` on the example cluster with ``server:`` settings (YAML lines; no drain delay unless
    they set one); yields the process and its port."""
    if "shutdown_delay_seconds" not in server_config:
        server_config = f"shutdown_delay_seconds: 0\n{server_config}"
    config = tmp_path / "config.yaml"
    config.write_text("server:\n" + "".join(f"  {line}\n" for line in server_config.splitlines()))
    port = free_port()
    out = subprocess.PIPE if pipes else subprocess.DEVNULL
    proc = subprocess.Popen(
        [str(VRAMGATE), "serve", "--config", str(config), "--dev", "--nodes", str(EXAMPLES / "cluster.yaml"),
         "--host", "127.0.0.1", "--port", str(port), *(extra_args or [])],
        cwd=tmp_path, stdout=out, stderr=out,
    )
    try:
        wait_ready(port, tmp_path / "certs" / "ca.crt", proc)
        yield proc, port
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


@contextlib.contextmanager
def serving_with_descriptors(tmp_path: Path, nofile: int, server_config: str) -> Iterator[tuple[int, Path]]:
    """``vramgate serve --dev`` on the example cluster with ``server:`` settings and a soft and hard descriptor
    limit of ``nofile`` (a small container's, scaled); yields its port and the CA to trust."""
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    config = tmp_path / "config.yaml"
    config.write_text("server:\n" + "".join(f"  {line}\n" for line in server_config.splitlines()))
    port = free_port()
    proc = subprocess.Popen(
        [str(VRAMGATE), "serve", "--config", str(config), "--dev", "--nodes", str(EXAMPLES / "cluster.yaml"),
         "--host", "127.0.0.1", "--port", str(port)],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=limit,
    )
    try:
        wait_ready(port, tmp_path / "certs" / "ca.crt", proc)
        yield port, tmp_path / "certs" / "ca.crt"
    finally:
        proc.kill()
        proc.wait(timeout=10)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], int, Path]]:
    with running_serve(tmp_path, "shutdown_delay_seconds: 1.5\ntls_reload_interval_seconds: 0.2", pipes=True) as (
            proc, port):
        yield proc, port, tmp_path


def connection_header(port: int, ctx: ssl.SSLContext, body: bytes) -> str | None:
    """The Connection header of a /validate answer on a fresh keep-alive connection."""
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
    try:
        conn.request("POST", "/validate", body, {"Content-Type": "application/json"})
        r = conn.getresponse()
        r.read()
        assert r.status == 200
        return r.getheader("connection")
    finally:
        conn.close()


def test_serve_dev_reload_and_graceful_sigterm(served: tuple[subprocess.Popen[bytes], int, Path]) -> None:
    proc, port, cwd = served
    certs = cwd / "certs"
    assert {p.name for p in certs.iterdir()} >= {"ca.crt", "tls.crt", "tls.key"}
    assert oct((certs / "tls.key").stat().st_mode & 0o777) == "0o600"
    cert = x509.load_pem_x509_certificate((certs / "tls.crt").read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    names = set(sans.get_values_for_type(x509.DNSName)) | {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)}
    assert {"localhost", "127.0.0.1", "vramgate.vramgate.svc", "vramgate.vramgate.svc.cluster.local"} <= names

    ctx = client_context(certs / "ca.crt")
    body = orjson.dumps(review(example("llama3-8b-deployment.yaml")))
    status, serial, data = request(port, ctx, "POST", "/validate", body)
    assert status == 200 and orjson.loads(data)["response"]["allowed"] is True
    assert serial == serial_of(certs / "tls.crt")
    assert connection_header(port, ctx, body) is None  # keep-alive while serving

    # Rotate: new CA and pair in place; the running process picks them up.
    fresh = make_bundle(["localhost", "127.0.0.1"])
    trust = cwd / "trust.pem"
    trust.write_bytes((certs / "ca.crt").read_bytes() + fresh.ca_pem)
    write_bundle(fresh, certs)
    both = client_context(trust)
    deadline = time.monotonic() + 10
    while request(port, both)[1] != serial_of(certs / "tls.crt"):
        assert time.monotonic() < deadline, "rotated certificate never served"
        time.sleep(0.1)

    # A review in flight across SIGTERM: headers and half the body before, the rest after the listener closed.
    slow = both.wrap_socket(socket.create_connection(("127.0.0.1", port)), server_hostname="127.0.0.1")
    slow.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 + f"Content-Length: {len(body)}\r\n\r\n".encode() + body[:100])
    time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    # Draining: not ready any more, but still serving new connections.
    assert request(port, both, path="/readyz")[0] == 503
    assert request(port, both, "POST", "/validate", body)[0] == 200
    # ... and telling clients to close their keep-alive connections (they reconnect elsewhere).
    assert connection_header(port, both, body) == "close"
    deadline = time.monotonic() + 10  # past shutdown_delay_seconds the listener closes
    while True:
        try:
            request(port, both, path="/healthz")
        except OSError:
            break
        assert time.monotonic() < deadline, "listener still open"
        time.sleep(0.1)
    assert proc.poll() is None  # still waiting for the review in flight
    slow.sendall(body[100:])
    reply = slow.recv(65536)
    slow.close()
    assert reply.startswith(b"HTTP/1.1 200 ")
    assert proc.wait(timeout=15) == 0

    # Every stderr line is one JSON object; one per review, none carrying env values.
    assert proc.stderr is not None
    lines = [json.loads(line) for line in proc.stderr.read().decode().splitlines() if line.strip()]
    reviews = [entry for entry in lines if entry.get("msg") == "review"]
    assert len(reviews) == 5 and all(entry["webhook"] == "validate" for entry in reviews)
    assert any(entry.get("msg") == "TLS certificate reloaded" for entry in lines)
    assert not any("llama-3-8b-instruct" in json.dumps(entry) for entry in lines)


def test_serve_without_certs_exits_2(tmp_path: Path) -> None:
    proc = subprocess.run(
        [str(VRAMGATE), "serve", "--nodes", str(EXAMPLES / "cluster.yaml"), "--port", str(free_port())],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, env={**os.environ},
    )
    assert proc.returncode == 2
    assert "certs/tls.crt" in proc.stderr and "--dev" in proc.stderr


def test_serve_dev_stops_at_once_and_sets_inventory_gauges(tmp_path: Path) -> None:
    """`serve --dev` has no drain delay (production: 5 s); a fixed inventory's gauges are set from the start."""
    port = free_port()
    proc = subprocess.Popen(
        [str(VRAMGATE), "serve", "--dev", "--nodes", str(EXAMPLES / "cluster.yaml"),
         "--host", "127.0.0.1", "--port", str(port)],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        wait_ready(port, tmp_path / "certs" / "ca.crt", proc)
        ctx = client_context(tmp_path / "certs" / "ca.crt")
        status, _, data = request(port, ctx, path="/metrics")
        text = data.decode()
        assert status == 200
        assert "vramgate_inventory_nodes 8.0" in text
        assert 'vramgate_nodes_by_health{health="healthy"} 6.0' in text
        assert 'vramgate_nodes_by_health{health="unhealthy"} 1.0' in text
        assert 'vramgate_node_gpus{node="gpu-a100-80-1",state="healthy"}' in text
        start = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
        assert time.monotonic() - start < 4.0  # well under the 5 s production drain
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
