"""ConfigMap reads at admission keep to the review's budget (issue #44 part 2) against an API server that hangs.

The API server here is a loopback HTTPS endpoint that accepts each request and holds it until released (a frozen
or very slow kube-apiserver, as the e2e suite's real one would be when SIGSTOPped); the client is the official
kubernetes client from a kubeconfig, as the service builds it. Before: 2 s x 4 attempts (urllib3's default retries)
= 8 s per review, past the webhook's 5 s timeoutSeconds, with not a line in the log nor a metric.
"""

from __future__ import annotations

import base64
import http.server
import json
import ssl
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from webhook.kube.apiserver import RawApi
from webhook.kube.client import api_client
from webhook.kube.configmaps import ConfigMapReader
from webhook.tls.certs import make_bundle, write_bundle

from .helpers import Service

CONFIGMAP = {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": "flags", "namespace": "ml", "resourceVersion": "7"},
             "data": {"MAX_MODEL_LEN": "4096"}}


@dataclass
class FrozenApi:
    """An HTTPS endpoint that answers ConfigMap GETs only once ``release`` is set."""

    url: str
    kubeconfig: Path
    release: threading.Event = field(default_factory=threading.Event)
    requests: int = 0


@pytest.fixture
def frozen() -> Iterator[FrozenApi]:
    with tempfile.TemporaryDirectory() as tmp:
        bundle = make_bundle(["localhost", "127.0.0.1"])
        write_bundle(bundle, Path(tmp))
        state: dict[str, FrozenApi] = {}

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                api = state["api"]
                api.requests += 1
                if not api.release.wait(timeout=30):
                    return
                body = json.dumps(CONFIGMAP).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        server.handle_error = lambda *args: None  # type: ignore[method-assign]  # a client that gave up: expected
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(Path(tmp) / "tls.crt", Path(tmp) / "tls.key")
        server.socket = context.wrap_socket(server.socket, server_side=True)
        url = f"https://127.0.0.1:{server.server_address[1]}"
        kubeconfig = Path(tmp) / "kubeconfig"
        kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "t",
            "clusters": [{"name": "t", "cluster": {"server": url, "certificate-authority-data":
                                                   base64.b64encode(bundle.ca_pem).decode()}}],
            "contexts": [{"name": "t", "context": {"cluster": "t", "user": "u"}}],
            "users": [{"name": "u", "user": {"token": "t"}}]}))
        api = FrozenApi(url, kubeconfig)
        state["api"] = api
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield api
        finally:
            api.release.set()
            server.shutdown()
            server.server_close()


def _reader(api: FrozenApi, retries: Any = False) -> ConfigMapReader:
    # As serve/server.py:configmap_reader builds it: no client retries, 2 s per call.
    return ConfigMapReader(lambda: RawApi(api_client(str(api.kubeconfig), retries=retries), timeout=2.0))


def test_a_frozen_api_server_costs_a_review_its_budget_and_no_more(frozen: FrozenApi) -> None:
    reader = _reader(frozen)
    reader.connect()  # the client, as the first review makes it (the kubeconfig read is not the API server's time)
    start = time.monotonic()
    found, late = reader.read_timed("ml", ["flags"], start + 1.0)
    elapsed = time.monotonic() - start
    print(f"\nfrozen API server, 1 s budget: answered in {elapsed:.2f} s (8.0 s before), late: {late}")
    assert found == [] and late == ["flags"]
    assert elapsed < 1.4
    assert frozen.requests == 1  # one attempt: no retries
    assert reader.pending() == [("ml", "flags")]
    frozen.release.set()  # the API server answers again: the background read lands for the next review
    deadline = time.monotonic() + 10
    while reader.pending() and time.monotonic() < deadline:
        time.sleep(0.02)
    start = time.monotonic()
    found, late = reader.read_timed("ml", ["flags"], start + 1.0)
    assert [o["metadata"]["name"] for o in found] == ["flags"] and late == []
    assert time.monotonic() - start < 0.05  # from the cache: no read in the review


def test_a_late_configmap_is_named_in_the_answer_and_counted(svc: Service, frozen: FrozenApi) -> None:
    from bench import hostile

    pod = hostile._pod(["vllm", "serve", "meta-llama/Llama-3.1-8B"])
    pod["spec"]["containers"][0]["env"] = [
        {"name": "VLLM_MAX_MODEL_LEN", "valueFrom": {"configMapKeyRef": {"name": "flags", "key": "MAX_MODEL_LEN"}}}]
    svc.state.configmaps = _reader(frozen)
    counted = svc.state.metrics.configmap_reads_late._value.get()
    try:
        start = time.monotonic()
        resp = svc.ask("validate", hostile.review(pod))
        elapsed = time.monotonic() - start
    finally:
        svc.state.configmaps = None
        frozen.release.set()
    print(f"\nreview with a frozen API server: {elapsed:.2f} s; warnings: {resp.get('warnings')}")
    assert resp["allowed"] and elapsed < 1.5
    text = " ".join(w.rstrip("…").lstrip("…") for w in resp.get("warnings", []))
    assert "ConfigMap flags not read within 1 s" in text, text
    assert svc.state.metrics.configmap_reads_late._value.get() == counted + 1
