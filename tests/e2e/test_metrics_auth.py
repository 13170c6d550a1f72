"""Who may read the metrics port, through a real kube-apiserver: anonymous 401, a ServiceAccount without RBAC 403,
one bound to the chart's ``vramgate-metrics-reader`` 200; the webhook port still serves the API server.

vramgate runs as the chart's webhook does: ``--role webhook`` under the ``vramgate-webhook`` ServiceAccount's
token, with the chart's ClusterRole and binding applied, so the TokenReviews and SubjectAccessReviews it makes are
the ones the chart grants (and the inventory watch lives on the same grants). docs/security.md.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.admission.helpers import EXAMPLES
from tests.chart.render import find, one
from tests.e2e.conftest import registered
from tests.e2e.harness import ControlPlane
from tests.e2e.vramgate_fixture import NAMESPACE, Vramgate

pytestmark = pytest.mark.e2e

PATHS = ("/metrics", "/inventory", "/status", "/")
READER = "vramgate-metrics-reader"


def service_account_token(cluster: ControlPlane, namespace: str, name: str) -> str:
    """A ServiceAccount (made if missing) and a token for it from the TokenRequest API (``kubectl create token``)."""
    cluster.kubectl("-n", namespace, "create", "serviceaccount", name, check=False)
    return cluster.kubectl("-n", namespace, "create", "token", name, "--duration=1h").stdout.strip()


def token_kubeconfig(cluster: ControlPlane, path: Path, token: str) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "sa",
        "clusters": [{"name": "e2e", "cluster": {"server": cluster.server, "certificate-authority": str(cluster.ca)}}],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "e2e", "user": "sa"}}],
    }))
    return path


def bind(cluster: ControlPlane, name: str, role: str, namespace: str, sa: str) -> None:
    cluster.kubectl("create", "clusterrolebinding", name, f"--clusterrole={role}", f"--serviceaccount={namespace}:{sa}")


@pytest.fixture(scope="module")
def vramgate(cluster: ControlPlane) -> Iterator[Vramgate]:
    """`vramgate serve --role webhook` with the chart's metrics_auth, as the chart's webhook ServiceAccount."""
    cluster.fresh_namespace(NAMESPACE)
    gate = Vramgate(cluster, role="webhook", metrics_auth=True)
    assert gate.config["server"]["metrics_auth"] is True  # the chart's default, kept
    rbac = [o for o in gate.chart if o["kind"] in ("Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")
            and o["metadata"]["name"].startswith("vramgate-webhook")]
    gate.apply([one(gate.chart, "ServiceAccount", "vramgate-webhook"), *rbac, one(gate.chart, "ClusterRole", READER)])
    token = service_account_token(cluster, NAMESPACE, "vramgate-webhook")
    gate.kubeconfig = token_kubeconfig(cluster, gate.dir / "webhook-sa.kubeconfig", token)
    # The harness's own reads of /inventory and /metrics: a ServiceAccount bound to the reader role.
    reader = f"e2e-reader-{uuid.uuid4().hex[:6]}"
    bind(cluster, reader, READER, NAMESPACE, reader)
    gate.token = service_account_token(cluster, NAMESPACE, reader)
    try:
        with registered(cluster, gate, extender=False) as running:
            cluster.wait_for("the reader's first 200", lambda: running.get("/metrics")[0] == 200, timeout=30)
            yield running
    finally:
        cluster.kubectl("delete", "clusterrolebinding", reader, "--ignore-not-found")
        made = [*find(rbac, "ClusterRoleBinding"), *find(rbac, "ClusterRole"), one(gate.chart, "ClusterRole", READER)]
        for o in made:
            cluster.kubectl("delete", o["kind"].lower(), o["metadata"]["name"], "--ignore-not-found", "--wait=false")


def test_anonymous_and_made_up_tokens_get_401(gate: Vramgate) -> None:
    for path in PATHS:
        status, body = gate.get(path, anonymous=True)
        assert status == 401, (path, body)
        assert b"bearer token" in body
        status, body = gate.get(path, token="not-a-token")
        assert status == 401, (path, body)
        assert b"did not accept the token" in body
    # Every route of the metrics port is behind the guard; the kubelet's probes are on the other port.
    assert gate.get("/healthz", port=gate.metrics_port, anonymous=True)[0] == 401
    assert gate.get("/healthz")[0] == 200 and gate.get("/readyz")[0] == 200


def test_a_service_account_without_rbac_gets_403(cluster: ControlPlane, gate: Vramgate, namespace: str) -> None:
    token = service_account_token(cluster, namespace, "nobody")
    for path in PATHS:
        status, body = gate.get(path, token=token)
        assert status == 403, (path, body)
        message = json.loads(body)["message"]
        assert f"system:serviceaccount:{namespace}:nobody" in message and f"get {path}" in message


def test_a_service_account_with_the_reader_role_gets_200(cluster: ControlPlane, gate: Vramgate,
                                                          namespace: str) -> None:
    token = service_account_token(cluster, namespace, "scraper")
    binding = f"e2e-scraper-{namespace}"
    bind(cluster, binding, READER, namespace, "scraper")
    try:
        # RBAC reaches the API server's authorizer through an informer: wait for the grant to be seen (a denial
        # seen meanwhile is kept 15 s at most).
        t0 = time.monotonic()
        cluster.wait_for("the binding to take effect", lambda: gate.get("/metrics", token=token)[0] == 200,
                         timeout=40, interval=0.5)
        granted = time.monotonic() - t0
        for path in PATHS:
            status, body = gate.get(path, token=token)
            assert status == 200, (path, body)
        status, body = gate.get("/metrics", token=token)
        assert b"vramgate_access_requests_total" in body
        assert json.loads(gate.get("/inventory", token=token)[1])["synced"] is True
        assert b"<html" in gate.get("/status", token=token)[1].lower()
        # Answers are kept: a second request asks kube-apiserver nothing and costs a plain GET.
        fresh = service_account_token(cluster, namespace, "scraper")
        cold = _timed(lambda: gate.get("/inventory", token=fresh))
        warm = _timed(lambda: gate.get("/inventory", token=token))
        print(f"\nbinding seen in {granted:.1f} s; a new token (TokenReview + SubjectAccessReview) "
              f"{cold * 1000:.0f} ms, cached {warm * 1000:.0f} ms")
        counted = {r: gate.metric("vramgate_access_requests_total", result=r)
                   for r in ("allowed", "no_token", "bad_token", "forbidden")}
        print(f"vramgate_access_requests_total: {counted}")
        assert counted["allowed"] >= len(PATHS)
    finally:
        cluster.kubectl("delete", "clusterrolebinding", binding, "--ignore-not-found")


def test_the_grant_is_per_path(cluster: ControlPlane, gate: Vramgate, namespace: str) -> None:
    """A ClusterRole for /metrics only (what Prometheus needs) opens /metrics, not the inventory or the page."""
    role = f"e2e-metrics-only-{namespace}"
    cluster.kubectl("create", "clusterrole", role, "--verb=get", "--non-resource-url=/metrics")
    token = service_account_token(cluster, namespace, "prometheus")
    bind(cluster, role, role, namespace, "prometheus")
    try:
        cluster.wait_for("the binding to take effect", lambda: gate.get("/metrics", token=token)[0] == 200,
                         timeout=40, interval=0.5)
        for path in ("/inventory", "/status", "/"):
            assert gate.get(path, token=token)[0] == 403, path
    finally:
        cluster.kubectl("delete", "clusterrolebinding", role, "--ignore-not-found")
        cluster.kubectl("delete", "clusterrole", role, "--ignore-not-found")


def test_reviews_are_asked_once_and_kept_bounded(cluster: ControlPlane, namespace: str) -> None:
    """The reviewer the guard uses, against the real API server: one TokenReview per token and one
    SubjectAccessReview per (user, path, verb) while cached, rejected tokens included; the caches stay bounded."""
    from webhook.kube.access import AccessReviewer
    from webhook.kube.apiserver import RawApi
    from webhook.kube.client import api_client

    reviewer = AccessReviewer(lambda: RawApi(api_client(str(cluster.kubeconfig), retries=False), timeout=3.0),
                              ttl=60.0, size=2)
    token = service_account_token(cluster, namespace, "cached")
    user = reviewer.authenticate(token)
    assert user is not None and user.name == f"system:serviceaccount:{namespace}:cached"
    assert {"system:serviceaccounts", f"system:serviceaccounts:{namespace}"} <= set(user.groups) and user.uid
    assert all(reviewer.authenticate(token) == user for _ in range(50)) and reviewer.reviews == 1
    assert reviewer.authenticate("made-up") is None and reviewer.authenticate("made-up") is None
    assert reviewer.reviews == 2
    denied = reviewer.authorize(user, "/metrics", "get")
    assert not denied.allowed and reviewer.authorize(user, "/metrics", "get") == denied and reviewer.reviews == 3
    for i in range(5):
        reviewer.authenticate(f"made-up-{i}")
    assert len(reviewer.tokens) == 2 and reviewer.reviews == 8


def test_the_webhook_port_still_serves_the_api_server_and_nothing_else(
    cluster: ControlPlane, gate: Vramgate, gpu_nodes: Callable[..., Any], namespace: str
) -> None:
    gpu_nodes("auth-h100", gpus=1)
    gate.wait_inventory({"auth-h100"})
    too_big = _without_namespace(EXAMPLES / "llama70b-one-gpu.yaml")
    r = cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(too_big), check=False)
    assert r.returncode != 0 and 'admission webhook "validate.vramgate.io" denied the request' in r.stderr, r.stderr
    fitting = _without_namespace(EXAMPLES / "llama3-8b-deployment.yaml")
    template = fitting["spec"]["template"]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "llama3-8b", **template["metadata"]},
           "spec": template["spec"]}
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(pod))
    created = cluster.request("GET", f"/api/v1/namespaces/{namespace}/pods/llama3-8b")
    assert "vramgate.io/estimate" in created["metadata"]["annotations"]  # /mutate answered
    for path in PATHS:
        assert gate.get(path, port=gate.port, anonymous=True)[0] == 404, path  # not on the webhook port
    assert gate.metric("vramgate_admission_requests_total", verdict="denied") >= 1


def _without_namespace(path: Path) -> dict[str, Any]:
    obj: dict[str, Any] = yaml.safe_load(path.read_text())
    obj["metadata"].pop("namespace", None)
    return obj


def _timed(call: Callable[[], tuple[int, bytes]]) -> float:
    t0 = time.monotonic()
    status, _ = call()
    assert status == 200
    return time.monotonic() - t0


def test_recent_rejections_are_shown_only_where_the_viewer_may_list_pods(
    cluster: ControlPlane, gate: Vramgate, gpu_nodes: Callable[..., Any], namespace: str
) -> None:
    """The status page lists a rejection only to a viewer who may list pods in its namespace (a
    SubjectAccessReview per namespace shown); the others are counted, not named."""
    gpu_nodes("auth-h100-b", gpus=1)
    gate.wait_inventory({"auth-h100-b"})
    secret_ns = f"{namespace}-secret"
    cluster.request("POST", "/api/v1/namespaces",
                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": secret_ns}}, ok=(201, 409))
    too_big = _without_namespace(EXAMPLES / "llama70b-one-gpu.yaml")
    for ns, name in ((namespace, "visible-70b"), (secret_ns, "confidential-70b")):
        too_big["metadata"]["name"] = name
        r = cluster.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(too_big), check=False)
        assert r.returncode != 0, r.stdout
    viewer = "page-viewer"
    token = service_account_token(cluster, namespace, viewer)
    binding = f"e2e-viewer-{namespace}"
    bind(cluster, binding, READER, namespace, viewer)
    cluster.kubectl("-n", namespace, "create", "role", "pod-lister", "--verb=list", "--resource=pods")
    cluster.kubectl("-n", namespace, "create", "rolebinding", "pod-lister", "--role=pod-lister",
                    f"--serviceaccount={namespace}:{viewer}")
    try:
        def page() -> bytes:
            status, body = gate.get("/status", token=token)
            return body if status == 200 else b""

        cluster.wait_for("the page for the viewer, with its namespace's rejection",
                         lambda: b"visible-70b" in page(), timeout=40, interval=0.5)
        body = page()
        assert b"confidential-70b" not in body and secret_ns.encode() not in body, body[-2000:]
        assert b"more in namespaces where you may not list pods" in body
        # The reader used by the harness (no pod rights anywhere) sees none of them named.
        reader_page = gate.get("/status")[1]
        assert b"visible-70b" not in reader_page and b"confidential-70b" not in reader_page
    finally:
        cluster.kubectl("delete", "clusterrolebinding", binding, "--ignore-not-found")
