"""config.models_file: entries appended to config.models at start, reloaded on change, bad files refused."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.harness import serve_app
from webhook.cluster.snapshot import StaticInventory
from webhook.config import ConfigError, load_config
from webhook.kube.manifests import load_nodes
from webhook.serve.models_watch import ModelsWatcher
from webhook.serve.server import build_app
from webhook.serve.state import AppState

ROOT = Path(__file__).resolve().parents[2]
ENTRY: dict[str, Any] = {
    "name": "acme-chat-13b", "aliases": ["acme/chat-13b"], "params": 13.0e9, "layers": 40, "hidden_size": 5120,
    "heads": 40, "kv_heads": 8, "head_dim": 128, "vocab_size": 32000, "context": 16384, "dtype": "bf16",
    "intermediate_size": 13824,
}
INLINE: dict[str, Any] = {**ENTRY, "name": "acme-inline-7b", "aliases": ["acme/inline-7b"], "params": 7e9,
                          "layers": 32, "hidden_size": 4096, "heads": 32, "intermediate_size": 11008}


def write(path: Path, entries: list[dict[str, Any]]) -> None:
    path.write_text(yaml.safe_dump({"models": entries}))


def config_at(tmp_path: Path, models_file: Path, **extra: Any) -> Path:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump({"models": [INLINE], "models_file": str(models_file), **extra}))
    return cfg


def test_entries_appended_at_start(tmp_path: Path) -> None:
    models = tmp_path / "models.yaml"
    write(models, [ENTRY])
    config = load_config(config_at(tmp_path, models))
    assert [m["name"] for m in config.models] == ["acme-inline-7b", "acme-chat-13b"]
    assert config.inline_models == [INLINE]
    state = AppState(config, StaticInventory([], config))
    assert state.catalog.resolve("acme/chat-13b").spec.params == 13e9  # type: ignore[union-attr]
    assert state.catalog.resolve("acme/inline-7b") is not None


def test_missing_file_holds_none_and_bad_files_are_refused(tmp_path: Path) -> None:
    config = load_config(config_at(tmp_path, tmp_path / "absent.yaml"))
    assert [m["name"] for m in config.models] == ["acme-inline-7b"]
    bad = tmp_path / "bad.yaml"
    for text, message in (("models: [unclosed", "not YAML"), ("models: 3", "must be a list"),
                          ("models:\n  - {name: x, params: 1e9}\n", "entry 0 (x)"), ("other: 1", "only a `models:`")):
        bad.write_text(text)
        with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
            load_config(config_at(tmp_path, bad))


def test_watcher_swaps_the_catalog_on_change_and_keeps_it_on_a_bad_file(tmp_path: Path,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    models = tmp_path / "models.yaml"
    write(models, [])
    config = load_config(config_at(tmp_path, models))
    state = AppState(config, StaticInventory([], config))
    watcher = ModelsWatcher(state, models, config.inline_models, config.models_file_bytes, 1.0)
    assert not watcher.check()  # unchanged
    assert state.catalog.resolve("acme/chat-13b") is None
    write(models, [ENTRY])
    assert watcher.check()
    assert state.catalog.resolve("acme/chat-13b") is not None and state.catalog.resolve("acme/inline-7b") is not None
    in_use = state.catalog
    models.write_text("models:\n  - {name: broken}\n")
    assert not watcher.check() and state.catalog is in_use
    models.unlink()  # a removed file: no entries from it, and a warning that says how many went
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="vramgate.models"):
        assert watcher.check() and state.catalog.resolve("acme/chat-13b") is None
    (record,) = [r for r in caplog.records if r.name == "vramgate.models"]
    assert record.levelno == logging.WARNING and "deleted: 1 entries dropped" in record.getMessage()


def test_running_service_reloads_and_judges_with_the_new_entry(tmp_path: Path) -> None:
    models = tmp_path / "models.yaml"
    write(models, [])
    config = load_config(config_at(tmp_path, models, models_reload_interval_seconds=0.1))
    state = AppState(config, StaticInventory(load_nodes(ROOT / "examples" / "cluster.yaml"), config))
    with serve_app(build_app(state)) as running, running.client() as client:
        page = client.get("/status", params={"model": "acme/chat-13b", "context": "8192"}).text
        assert "unknown model" in page
        write(models, [ENTRY])
        deadline = time.monotonic() + 10
        while state.catalog.resolve("acme/chat-13b") is None:
            assert time.monotonic() < deadline, "models file never reloaded"
            time.sleep(0.05)
        page = client.get("/status", params={"model": "acme/chat-13b", "context": "8192"}).text
        assert "acme-chat-13b: 13B parameters, bf16" in page
        # the extender picks the new catalog up too
        body = {"Pod": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml"},
                        "spec": {"containers": [{"name": "m", "image": "vllm/vllm-openai:latest",
                                                 "args": ["serve", "acme/chat-13b", "--max-model-len", "8192"],
                                                 "resources": {"limits": {"nvidia.com/gpu": 1}}}]}},
                "NodeNames": ["gpu-t4-0", "gpu-h100-0"]}
        r = client.post("/scheduler/filter", json=body)
        assert r.status_code == 200
        out = r.json()
        failed = {**(out.get("FailedNodes") or {}), **(out.get("FailedAndUnresolvableNodes") or {})}
        assert out["NodeNames"] == ["gpu-h100-0"] and failed["gpu-t4-0"].startswith("VRAMTooSmall")
