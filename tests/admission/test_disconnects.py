"""A client that goes away mid-body (the API server at its webhook timeout, a broken connection) is counted,
logged at debug, and is not an error: no traceback, no error metric, and the service keeps answering."""

from __future__ import annotations

import logging
import socket
import ssl
import time
from urllib.parse import urlsplit

import pytest

from .helpers import Service

ENDPOINTS = ["/validate", "/mutate", "/scheduler/filter", "/scheduler/prioritize"]


def _half_body_then_close(svc: Service, path: str) -> None:
    parts = urlsplit(svc.url)
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with socket.create_connection((parts.hostname, parts.port), timeout=5) as raw, \
            context.wrap_socket(raw, server_hostname=parts.hostname) as tls:
        tls.sendall((f"POST {path} HTTP/1.1\r\nHost: {parts.hostname}\r\nContent-Type: application/json\r\n"
                     "Content-Length: 4096\r\n\r\n").encode() + b'{"apiVersion": "admission.k8s.io/v1", ')
        time.sleep(0.2)  # the server is now reading the body
    # closed here, 4 KiB short


def _counter(svc: Service, name: str, label: str) -> float:
    for line in svc.client.get("/metrics").text.splitlines():
        if line.startswith(f"{name}{{") and f'"{label}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.mark.parametrize("path", ENDPOINTS)
def test_a_client_that_leaves_mid_body_is_not_an_error(svc: Service, path: str,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    before = _counter(svc, "vramgate_client_disconnects_total", path)
    errors = {w: svc.state.metrics.admission_errors.labels(w)._value.get() for w in ("validate", "mutate")}
    verb = path.rsplit("/", 1)[-1]
    extender_errors = svc.state.metrics.extender_errors.labels(verb=verb)._value.get()
    with caplog.at_level(logging.INFO):
        _half_body_then_close(svc, path)
        deadline = time.monotonic() + 5
        while _counter(svc, "vramgate_client_disconnects_total", path) <= before and time.monotonic() < deadline:
            time.sleep(0.05)
    assert _counter(svc, "vramgate_client_disconnects_total", path) == before + 1
    assert {w: svc.state.metrics.admission_errors.labels(w)._value.get() for w in ("validate", "mutate")} == errors
    assert svc.state.metrics.extender_errors.labels(verb=verb)._value.get() == extender_errors
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert loud == [], [r.getMessage() for r in loud]
    assert svc.client.get("/healthz").status_code == 200  # and it keeps serving
