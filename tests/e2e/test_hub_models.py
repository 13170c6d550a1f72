"""config.hub against the real API server: a model the hub resolved is kept in a ConfigMap, and a restarted
vramgate judges with it at once, without asking the hub again."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from typing import Any

import pytest
import yaml

from tests.admission.helpers import review
from tests.admission.test_hub import FakeHub, deployment
from tests.e2e.harness import ApiError, ControlPlane
from tests.e2e.vramgate_fixture import NAMESPACE, Vramgate, _merge

pytestmark = pytest.mark.e2e
MODEL = "HuggingFaceTB/SmolLM3-3B"
CONFIGMAP = "vramgate-hub-models"


@pytest.fixture()
def hub() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeHub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def validate(gate: Vramgate, obj: dict[str, Any]) -> dict[str, Any]:
    import http.client

    conn = http.client.HTTPSConnection("127.0.0.1", gate.port, timeout=10, context=gate.client_context())
    try:
        conn.request("POST", "/validate", json.dumps(review(obj, uid=str(uuid.uuid4()))),
                     {"Content-Type": "application/json"})
        r = conn.getresponse()
        body = r.read()
    finally:
        conn.close()
    assert r.status == 200, body
    out: dict[str, Any] = json.loads(body)["response"]
    return out


def test_hub_models_survive_a_restart_through_their_configmap(cluster: ControlPlane, hub: str,
                                                              gpu_nodes: Any) -> None:
    # A namespace of its own for vramgate's ConfigMap: the shared one is deleted (terminating) between modules.
    home = f"vramgate-hub-{uuid.uuid4().hex[:8]}"
    cluster.request("POST", "/api/v1/namespaces",
                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": home}}, ok=(201,))
    gpu_nodes("hub-h100")
    gate = Vramgate(cluster)
    gate.config = _merge(gate.config, {"namespace": home, "admission": {"excluded_namespaces": [home, NAMESPACE]},
                                       "hub": {"enabled": True, "endpoint": hub, "configmap": CONFIGMAP}})
    gate.config_path.write_text(yaml.safe_dump(gate.config))
    path = f"/api/v1/namespaces/{home}/configmaps/{CONFIGMAP}"
    try:
        gate.start()
        gate.wait_inventory({"hub-h100"})
        FakeHub.requests.clear()
        first = validate(gate, deployment(MODEL))
        assert first["allowed"] and any("asking" in w for w in first["warnings"]), first
        kept = cluster.wait_for("the ConfigMap of hub-resolved models",
                                lambda: _models(cluster, path), timeout=15)
        assert [m["aliases"] for m in kept] == [[MODEL]] and kept[0]["layers"] == 36
        gate.restart()
        FakeHub.requests.clear()
        again = validate(gate, deployment(MODEL))
        assert again["allowed"] and not any("SmolLM3" in w for w in again.get("warnings", [])), again
        assert FakeHub.requests == [], FakeHub.requests  # judged with the kept entry; the hub was not asked
        assert "1 hub-resolved model(s) loaded from ConfigMap" in gate.log_text()
    finally:
        gate.stop()
        cluster.request("DELETE", f"/api/v1/namespaces/{home}", ok=(200, 202, 404))


def _models(cluster: ControlPlane, path: str) -> list[dict[str, Any]] | None:
    try:
        cm = cluster.request("GET", path)
    except ApiError:
        return None
    models = yaml.safe_load(cm["data"]["models.yaml"])["models"]
    return models if models else None
