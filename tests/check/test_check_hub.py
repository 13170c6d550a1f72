"""`vramgate check --hub`: unknown hub ids read from a real hub server on loopback, kept on disk, offline on failure."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson
import pytest

from webhook.cli.main import main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hub"
NODES = Path(__file__).resolve().parents[2] / "examples" / "cluster.yaml"
REPO = "HuggingFaceTB/SmolLM3-3B"  # not in the catalog; its config.json is in tests/fixtures/hub
MANIFEST = f"""
apiVersion: apps/v1
kind: Deployment
metadata: {{name: smol}}
spec:
  selector: {{matchLabels: {{app: smol}}}}
  template:
    metadata: {{labels: {{app: smol}}}}
    spec:
      containers:
      - name: vllm
        image: vllm/vllm-openai:v0.10.1
        args: ["vllm", "serve", "{REPO}", "--max-model-len", "8192"]
        resources: {{limits: {{nvidia.com/gpu: "1"}}}}
"""


class Hub(BaseHTTPRequestHandler):
    """The hub's ``/{repo}/resolve/{revision}/{file}`` API over tests/fixtures/hub; ``/down/...`` answers 503."""

    protocol_version = "HTTP/1.1"
    seen: list[str] = []

    def do_GET(self) -> None:
        Hub.seen.append(self.path)
        if self.path.startswith("/down/"):
            body = b'{"error": "overloaded"}'
            self.send_response(503)
        else:
            repo, _, rest = self.path.lstrip("/").partition("/resolve/")
            path = FIXTURES / repo / rest.partition("/")[2]
            if path.is_file():
                body = path.read_bytes()
                self.send_response(200)
            else:
                body = orjson.dumps({"error": "EntryNotFound"})
                self.send_response(404)
                self.send_header("X-Error-Code", "EntryNotFound")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def hub() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


@pytest.fixture()
def manifest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    path = tmp_path / "smol.yaml"
    path.write_text(MANIFEST)
    return path


def _config(tmp_path: Path, endpoint: str) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(f"hub:\n  endpoint: {endpoint}\n  timeout_seconds: 5\n")
    return str(path)


def test_without_hub_the_model_stays_unknown(manifest: Path, capsys: pytest.CaptureFixture[str]) -> None:
    Hub.seen.clear()
    code = main(["check", "-f", str(manifest), "--nodes", str(NODES)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"model '{REPO}'" in out and "not in the catalog" in out
    assert not Hub.seen  # offline unless asked


def test_hub_resolves_then_the_cache_answers(hub: str, manifest: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    config = _config(tmp_path, hub)
    Hub.seen.clear()
    code = main(["--config", config, "check", "--hub", "--explain", "-f", str(manifest), "--nodes", str(NODES)])
    captured = capsys.readouterr()
    assert code == 0, captured.out + captured.err
    assert f"/{REPO}/resolve/main/config.json" in Hub.seen
    assert "not in the catalog" not in captured.out
    assert "3.08B" in captured.out or "3.1B" in captured.out or "3.08" in captured.out, captured.out
    assert f"hub: {REPO}: read from 127.0.0.1" in captured.err
    cached = tmp_path / "cache" / "vramgate" / "hub" / hub.split("//")[1].replace(":", "_") / f"{REPO}.json"
    assert cached.is_file()
    first = captured.out

    Hub.seen.clear()
    code = main(["--config", config, "check", "--hub", "--explain", "-f", str(manifest), "--nodes", str(NODES)])
    captured = capsys.readouterr()
    assert code == 0
    assert Hub.seen == []  # the second run asks the hub nothing
    assert f"hub: {REPO}: from the cache" in captured.err
    assert captured.out == first  # and judges the same


def test_a_failing_hub_is_a_warning_and_the_check_runs_offline(hub: str, manifest: Path, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    config = _config(tmp_path, f"{hub}/down")
    Hub.seen.clear()
    code = main(["--config", config, "check", "--hub", "-f", str(manifest), "--nodes", str(NODES)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert any(p.startswith("/down/") for p in Hub.seen)
    assert f"warning: hub: {REPO}: 127.0.0.1" in captured.err and "could not say" in captured.err
    assert "judged without it, offline" in captured.err
    assert "ADMIT   deployment/smol" in captured.out and "not in the catalog" in captured.out
    assert not (tmp_path / "cache" / "vramgate" / "hub").exists() or not any(
        (tmp_path / "cache" / "vramgate" / "hub").rglob("*.json"))  # a failure is not cached


def test_an_unreachable_hub_is_a_warning(manifest: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = _config(tmp_path, f"http://127.0.0.1:{port}")
    code = main(["--config", config, "check", "--hub", "-f", str(manifest), "--nodes", str(NODES)])
    captured = capsys.readouterr()
    assert code == 0
    assert f"warning: hub: {REPO}" in captured.err and "could not say" in captured.err


def test_an_annotated_hub_id_is_guessed_offline_but_read_with_hub(
        hub: str, manifest: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = MANIFEST.replace("    metadata: {labels: {app: smol}}",
                            f"    metadata: {{labels: {{app: smol}}, annotations: {{vramgate.io/model: {REPO}}}}}")
    manifest.write_text(text)
    assert main(["check", "-f", str(manifest), "--nodes", str(NODES)]) == 0
    assert "assumed 3B parameters from its name" in capsys.readouterr().out  # offline: its name is all there is
    config = _config(tmp_path, hub)
    code = main(["--config", config, "check", "--hub", "-f", str(manifest), "--nodes", str(NODES)])
    captured = capsys.readouterr()
    assert code == 0, captured.out
    assert "ADMIT   deployment/smol" in captured.out and "not in the catalog" not in captured.out
    assert "3.08B" in captured.out or "weights 5.7" in captured.out or "weights 5.8" in captured.out, captured.out


def test_a_broken_cache_file_is_read_again_from_the_hub(hub: str, manifest: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    config = _config(tmp_path, hub)
    cached = tmp_path / "cache" / "vramgate" / "hub" / hub.split("//")[1].replace(":", "_") / f"{REPO}.json"
    cached.parent.mkdir(parents=True)
    cached.write_text('{"name": "cut short"}')  # not an entry: no parameters, no shape
    Hub.seen.clear()
    code = main(["--config", config, "check", "--hub", "-f", str(manifest), "--nodes", str(NODES)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert f"/{REPO}/resolve/main/config.json" in Hub.seen
    assert f"hub: {REPO}: read from 127.0.0.1" in captured.err
    assert orjson.loads(cached.read_bytes()).get("params")  # replaced by the entry the hub gave
