"""`server.metrics_port`: /metrics, /inventory and the status page on their own port, guarded under metrics_auth.

A real `vramgate serve --dev` process on two real sockets. What kube-apiserver answers (TokenReview,
SubjectAccessReview: 401, 403, 200) is tested against a real one in tests/e2e/test_metrics_auth.py; here, what the
guard decides without one: no token is 401 before any call, and an API server that cannot be reached is 503.
"""

from __future__ import annotations

import http.client
import socket
import subprocess
import time
from pathlib import Path

import orjson
import pytest
import yaml

from webhook.kube.access import TTLCache, User, access_review, user_of
from webhook.serve.auth import bearer_token, review_verb

from .helpers import EXAMPLES, example, review
from .test_server import VRAMGATE, free_port, running_serve
from .tlsutil import client_context

OPS = ("/metrics", "/inventory", "/status", "/")


def get(port: int, ca: Path, path: str, method: str = "GET", body: bytes | None = None,
        token: str | None = None) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=client_context(ca), timeout=15)
    headers = {"content-type": "application/json"}
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    try:
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def test_metrics_port_serves_only_its_routes_and_the_webhook_port_only_reviews(tmp_path: Path) -> None:
    mport = free_port()
    with running_serve(tmp_path, f"metrics_port: {mport}") as (_, port):
        ca = tmp_path / "certs" / "ca.crt"
        body = orjson.dumps(review(example("llama70b-one-gpu.yaml")))
        status, _, data = get(port, ca, "/validate", "POST", body)
        assert status == 200 and orjson.loads(data)["response"]["allowed"] is False
        for probe in ("/healthz", "/readyz"):
            assert get(port, ca, probe)[0] == 200
        for path in OPS:
            assert get(port, ca, path)[0] == 404, path  # not on the webhook and extender port any more
            assert get(mport, ca, path)[0] == 200, path
        assert b"vramgate_admission_requests_total" in get(mport, ca, "/metrics")[2]
        assert orjson.loads(get(mport, ca, "/inventory")[2])["nodes"]
        for path in ("/validate", "/mutate", "/scheduler/filter"):
            assert get(mport, ca, path, "POST", body)[0] in (404, 405), path
        for probe in ("/healthz", "/readyz"):
            assert get(mport, ca, probe)[0] == 404


def test_metrics_auth_refuses_anonymous_and_answers_503_when_it_cannot_ask(tmp_path: Path) -> None:
    """No token: 401 with a Bearer challenge, at once. A token and an API server that is not there: 503 within the
    review deadline (one attempt), never a hang; the probes and reviews on the other port are untouched."""
    mport, dead = free_port(), free_port()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{dead}",
                                               "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "vramgate-test"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }))
    settings = f"metrics_port: {mport}\nmetrics_auth: true\naccess_review_timeout_seconds: 1"
    with running_serve(tmp_path, settings, extra_args=["--kubeconfig", str(kubeconfig)]) as (_, port):
        ca = tmp_path / "certs" / "ca.crt"
        for path in OPS:
            status, headers, data = get(mport, ca, path)
            assert status == 401, path
            assert headers["www-authenticate"].startswith("Bearer")
            assert b"bearer token" in data
        assert get(mport, ca, "/metrics", token="")[0] == 401  # "Bearer " and nothing
        t0 = time.monotonic()
        status, headers, data = get(mport, ca, "/metrics", token="some-token")
        took = time.monotonic() - t0
        print(f"\nunreachable API server: {status} in {took:.2f} s")
        assert status == 503 and headers["retry-after"] == "1" and took < 2.5
        assert get(port, ca, "/healthz")[0] == 200


def test_a_frozen_api_server_costs_one_deadline(tmp_path: Path) -> None:
    """An API server that takes the connection and never answers (a frozen one): 503 within the review deadline,
    one attempt (urllib3's default retries would make it four); requests meanwhile on the webhook port are served."""
    mport = free_port()
    frozen = socket.socket()
    frozen.bind(("127.0.0.1", 0))
    frozen.listen(64)  # connections complete in the kernel's backlog; nobody reads them, the TLS handshake hangs
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{frozen.getsockname()[1]}",
                                               "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "vramgate-test"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }))
    settings = f"metrics_port: {mport}\nmetrics_auth: true\naccess_review_timeout_seconds: 1"
    try:
        with running_serve(tmp_path, settings, extra_args=["--kubeconfig", str(kubeconfig)]) as (_, port):
            ca = tmp_path / "certs" / "ca.crt"
            t0 = time.monotonic()
            status, _, _ = get(mport, ca, "/inventory", token="some-token")
            took = time.monotonic() - t0
            print(f"\nfrozen API server: {status} in {took:.2f} s (deadline 1 s)")
            assert status == 503 and 0.9 < took < 2.5
            assert get(port, ca, "/readyz")[0] == 200
    finally:
        frozen.close()


def test_a_metrics_port_in_use_or_equal_to_the_port_stops_the_start(tmp_path: Path) -> None:
    """Taken by another process: one error line and exit 1 (no traceback); the serving port itself: exit 2."""
    def serve(metrics_port: int, port: int) -> subprocess.CompletedProcess[str]:
        config = tmp_path / "config.yaml"
        config.write_text(f"server:\n  metrics_port: {metrics_port}\n  shutdown_delay_seconds: 0\n")
        return subprocess.run(
            [str(VRAMGATE), "serve", "--config", str(config), "--dev", "--nodes", str(EXAMPLES / "cluster.yaml"),
             "--host", "127.0.0.1", "--port", str(port)],
            cwd=tmp_path, capture_output=True, text=True, timeout=60)

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        proc = serve(taken.getsockname()[1], free_port())
    assert proc.returncode == 1, proc.stderr
    assert "cannot listen" in proc.stdout + proc.stderr and "Traceback" not in proc.stderr
    port = free_port()
    proc = serve(port, port)
    assert proc.returncode == 2 and "server.metrics_port" in proc.stderr


def test_bearer_token_and_verb() -> None:
    def scope(value: bytes) -> dict[str, object]:
        return {"headers": [(b"host", b"x"), (b"authorization", value)]}

    assert bearer_token(scope(b"Bearer abc.def")) == "abc.def"
    assert bearer_token(scope(b"bearer  abc ")) == "abc"
    assert bearer_token(scope(b"Basic dXNlcjpwdw==")) is None
    assert bearer_token(scope(b"Bearer ")) is None
    assert bearer_token({"headers": []}) is None
    assert review_verb("GET") == "get" and review_verb("HEAD") == "get" and review_verb("POST") == "post"


def test_token_review_status_and_access_review_body() -> None:
    assert user_of({"authenticated": False}) is None
    assert user_of({"authenticated": True, "user": {}}) is None
    user = user_of({"authenticated": True, "user": {
        "username": "system:serviceaccount:mon:prom", "uid": "u-1", "groups": ["system:serviceaccounts"],
        "extra": {"authentication.kubernetes.io/pod-name": ["prom-0"]}}})
    assert user == User("system:serviceaccount:mon:prom", "u-1", ("system:serviceaccounts",),
                        (("authentication.kubernetes.io/pod-name", ("prom-0",)),))
    spec = access_review(user, "/metrics", "get")["spec"]
    assert spec == {"user": "system:serviceaccount:mon:prom", "uid": "u-1", "groups": ["system:serviceaccounts"],
                    "extra": {"authentication.kubernetes.io/pod-name": ["prom-0"]},
                    "nonResourceAttributes": {"path": "/metrics", "verb": "get"}}


def test_ttl_cache_expires_and_stays_bounded() -> None:
    now = [0.0]
    cache: TTLCache[str, int] = TTLCache(3, clock=lambda: now[0])
    for i in range(10):
        cache.put(f"k{i}", i, ttl=60)
    assert len(cache) == 3 and cache.get("k0") is None and cache.get("k9") == 9
    cache.get("k7")  # used: k8 is now the oldest
    cache.put("k10", 10, ttl=60)
    assert cache.get("k8") is None and cache.get("k7") == 7
    now[0] = 61.0
    assert cache.get("k7") is None
    cache.put("zero", 1, ttl=0)
    assert cache.get("zero") is None


@pytest.mark.parametrize("port_key", ["metrics_port: 70000", "metrics_port: -1"])
def test_metrics_port_out_of_range_is_a_config_error(port_key: str) -> None:
    from pydantic import ValidationError

    from webhook.config import Config

    with pytest.raises(ValidationError):
        Config.model_validate({"server": yaml.safe_load(port_key)})
