"""Unknown models resolved from a model hub off the hot path: a local server speaking the hub's resolve API."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson
import pytest

from webhook.cluster.snapshot import FixedInventory
from webhook.config import Config
from webhook.models.hub import HubError, fetch_entry, repo_id
from webhook.serve.app import create_app
from webhook.serve.state import AppState

from ..harness import Running, serve_app
from .helpers import cluster, validate_object

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hub"
GATED = "meta-llama/Llama-5-Gated"


class FakeHub(BaseHTTPRequestHandler):
    """``/{org}/{name}/resolve/{revision}/{file}`` as the hub answers it: files, 404 EntryNotFound, 401 gated."""

    requests: list[str] = []

    def _answer(self, with_body: bool) -> None:
        FakeHub.requests.append(f"{self.command} {self.path}")
        parts = self.path.split("?", 1)[0].strip("/").split("/")
        if len(parts) < 5 or parts[2] != "resolve":
            return self._error(404, "RepoNotFound")
        repo, name = "/".join(parts[:2]), "/".join(parts[4:])
        if repo == GATED:
            return self._error(401, "GatedRepo")
        path = FIXTURES / repo / name
        if not (FIXTURES / repo).is_dir():
            return self._error(404, "RepoNotFound")
        if not path.is_file():
            return self._error(404, "EntryNotFound")
        data = path.read_bytes()
        self.send_response(200)
        self.send_header("ETag", f'"{hashlib.sha1(data).hexdigest()}"')
        self.send_header("X-Repo-Commit", "0" * 40)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if with_body:
            self.wfile.write(data)

    def _error(self, status: int, code: str) -> None:
        body = orjson.dumps({"error": code})
        self.send_response(status)
        self.send_header("X-Error-Code", code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._answer(True)

    def do_HEAD(self) -> None:
        self._answer(False)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def hub() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeHub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


@pytest.fixture()
def service(hub: str) -> Iterator[tuple[Running, AppState]]:
    config = Config.model_validate({"hub": {"enabled": True, "endpoint": hub, "timeout_seconds": 5,
                                            "retry_after_seconds": 0.2}})
    state = AppState(config, FixedInventory(cluster()))
    with serve_app(create_app(state)) as running:
        yield running, state
    assert state.hub is not None
    state.hub.stop()


def deployment(model: str) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "smol", "namespace": "ml"},
            "spec": {"selector": {"matchLabels": {"app": "smol"}}, "template": {
                "metadata": {"labels": {"app": "smol"}},
                "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.11.0",
                                         "command": ["vllm", "serve", model],
                                         "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}}


validate = validate_object


def wait_state(state: AppState, model: str, wanted: str) -> None:
    assert state.hub is not None
    deadline = time.monotonic() + 10
    while state.hub.status(model) != wanted:
        assert time.monotonic() < deadline, f"{model}: {state.hub.status(model)}, not {wanted}"
        time.sleep(0.02)


def test_repo_ids() -> None:
    assert repo_id("HuggingFaceTB/SmolLM3-3B") == "HuggingFaceTB/SmolLM3-3B"
    assert repo_id("hf://Qwen/Qwen3-8B@main") == "Qwen/Qwen3-8B"
    for not_hub in ("/models/llama", "s3://bucket/llama", "llama3.1:8b", "a/b/c", "../etc", "Org/..", ""):
        assert repo_id(not_hub) is None, not_hub


def test_fetch_entry_reads_the_published_config(hub: str) -> None:
    entry = fetch_entry("HuggingFaceTB/SmolLM3-3B", endpoint=hub, token=False)
    assert entry["aliases"] == ["HuggingFaceTB/SmolLM3-3B"] and entry["layers"] == 36 and entry["kv_heads"] == 4
    assert entry["context"] == 65536 and entry["dtype"] == "bf16"
    assert abs(entry["params"] - 3.08e9) / 3.08e9 < 0.01  # the model card's 3.08B
    with pytest.raises(HubError, match=r"GatedRepo|401|gated|Unauthorized"):
        fetch_entry(GATED, endpoint=hub, token=False)
    with pytest.raises(HubError, match="Org/Nothing"):
        fetch_entry("Org/Nothing", endpoint=hub, token=False)


def test_an_unknown_model_is_resolved_in_the_background_and_judged_with_from_then_on(
        service: tuple[Running, AppState]) -> None:
    running, state = service
    FakeHub.requests.clear()
    first = validate(running, deployment("HuggingFaceTB/SmolLM3-3B"))
    assert first["allowed"]
    warnings = first.get("warnings", [])
    assert any("assumed 3B parameters from its name" in w for w in warnings), warnings
    assert any(w.startswith("model HuggingFaceTB/SmolLM3-3B: asking 127.0.0.1:") for w in warnings), warnings
    wait_state(state, "HuggingFaceTB/SmolLM3-3B", "resolved")
    assert state.catalog.get("HuggingFaceTB/SmolLM3-3B") is not None
    again = validate(running, deployment("HuggingFaceTB/SmolLM3-3B"))
    assert again["allowed"] and not any("SmolLM3" in w for w in again.get("warnings", [])), again
    # Asked once: config.json, then the optional files, never again for the same model.
    asked = [r for r in FakeHub.requests if "SmolLM3-3B" in r]
    assert sum("config.json" in r and "quantization" not in r for r in asked) == 1, asked
    with running.client() as c:
        assert 'vramgate_hub_lookups_total{result="resolved"} 1.0' in c.get("/metrics").text


def test_a_gated_model_says_why_and_is_asked_again_later(service: tuple[Running, AppState]) -> None:
    running, state = service
    validate(running, deployment(GATED))
    wait_state(state, GATED, "failed")
    out = validate(running, deployment(GATED))
    assert out["allowed"]
    assert any(w.startswith(f"model {GATED}: 127.0.0.1:") and "could not say" in w for w in out["warnings"]), out
    with running.client() as c:
        assert 'vramgate_hub_lookups_total{result="failed"} 1.0' in c.get("/metrics").text
    time.sleep(0.25)  # retry_after_seconds
    out = validate(running, deployment(GATED))
    assert any("asking" in w for w in out["warnings"]), out


def test_no_hub_lookup_when_off_or_for_paths(service: tuple[Running, AppState]) -> None:
    running, _ = service
    out = validate(running, deployment("/models/some-local-model"))
    assert out["allowed"] and not any("asking" in w for w in out.get("warnings", [])), out
    assert AppState(Config(), FixedInventory(cluster())).hub is None


def test_an_annotation_naming_an_unknown_hub_model_is_asked_for_not_rejected(
        service: tuple[Running, AppState]) -> None:
    running, state = service
    obj = deployment("/models/smol")  # a path: the annotation says which model it is
    obj["spec"]["template"]["metadata"]["annotations"] = {"vramgate.io/model": "HuggingFaceTB/SmolLM3-3B"}
    out = validate(running, obj)
    assert out["allowed"] and any("asking" in w for w in out["warnings"]), out
    wait_state(state, "HuggingFaceTB/SmolLM3-3B", "resolved")
    out = validate(running, obj)
    assert out["allowed"] and not any("SmolLM3" in w for w in out.get("warnings", [])), out
    # A name that tells no size: rejected as undeclarable without the hub, asked for (and admitted) with it.
    obj["spec"]["template"]["metadata"]["annotations"] = {"vramgate.io/model": "acme/mystery-model"}
    out = validate(running, obj)
    assert out["allowed"] and any("acme/mystery-model: asking" in w for w in out["warnings"]), out
    off = AppState(Config(), FixedInventory(cluster()))
    with serve_app(create_app(off)) as plain:
        out = validate(plain, obj)
    assert not out["allowed"] and "not in the catalog" in out["status"]["message"], out
