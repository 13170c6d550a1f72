"""Chart `models:` values: a ConfigMap every vramgate pod mounts, read as `config.models_file`."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from tests.chart.conftest import Render
from tests.chart.render import HelmError, find, one, render_chart
from webhook.config import Config
from webhook.models.catalog import builtin_catalog
from webhook.models.models_file import catalog_with, parse_models

NS = "gpu-system"
ENTRY: dict[str, Any] = {
    "name": "acme-chat-13b", "aliases": ["acme/chat-13b"], "family": "acme", "params": 13.0e9, "layers": 40,
    "hidden_size": 5120, "heads": 40, "kv_heads": 8, "head_dim": 128, "vocab_size": 32000, "context": 16384,
    "dtype": "bf16", "intermediate_size": 13824, "verified": False,
}
ALL = {"standaloneExtender": {"enabled": True}}


def _config_of(objs: list[dict[str, Any]]) -> dict[str, Any]:
    cms = [c for c in find(objs, "ConfigMap") if "config.yaml" in c.get("data", {})]
    return dict(yaml.safe_load(cms[0]["data"]["config.yaml"]))


def test_models_become_a_mounted_configmap_the_config_names(render: Render) -> None:
    objs = render({**ALL, "models": [ENTRY]}, namespace=NS)
    cm = one(objs, "ConfigMap", "vramgate-models")
    entries = parse_models(cm["data"]["models.yaml"].encode(), "chart")
    assert entries == [ENTRY]
    config = _config_of(objs)
    assert config["models_file"] == "/etc/vramgate-models/models.yaml"
    Config(**config)  # the service accepts it
    catalog = catalog_with([], entries)
    found = catalog.resolve("acme/chat-13b")
    assert found is not None and found.spec.name == "acme-chat-13b"
    assert builtin_catalog().resolve("acme/chat-13b") is None
    # every pod that runs `vramgate serve` mounts it where the config says, and every mount has its volume
    served = 0
    for dep in find(objs, "Deployment"):
        pod = dep["spec"]["template"]["spec"]
        for c in pod["containers"]:
            if "serve" not in (c.get("args") or []):
                continue
            served += 1
            assert {m["name"] for m in c["volumeMounts"]} <= {v["name"] for v in pod["volumes"]}
            mounts = {m["name"]: m for m in c["volumeMounts"]}
            assert mounts["models"]["mountPath"] == "/etc/vramgate-models" and mounts["models"]["readOnly"]
            volumes = {v["name"]: v for v in pod["volumes"]}
            assert volumes["models"]["configMap"]["name"] == "vramgate-models"
            # changing `models:` does not roll the pods: the service reloads the file
            assert "checksum/models" not in dep["spec"]["template"]["metadata"].get("annotations", {})
    assert served >= 3  # webhook, controller, the scheduler's extender sidecar, the standalone extender


def test_no_models_is_an_empty_list(render: Render) -> None:
    cm = one(render({}, namespace=NS), "ConfigMap", "vramgate-models")
    assert parse_models(cm["data"]["models.yaml"].encode(), "chart") == []


def test_config_models_keep_their_schema_beside_the_file(render: Render) -> None:
    objs = render({"config": {"models": [ENTRY], "models_file": "/elsewhere/models.yaml"}}, namespace=NS)
    config = _config_of(objs)
    assert config["models"] == [ENTRY] and config["models_file"] == "/elsewhere/models.yaml"


@pytest.mark.parametrize("entry, message", [
    ({k: v for k, v in ENTRY.items() if k != "params"}, "params"),
    ({**ENTRY, "parms": 1}, "parms"),
    ({**ENTRY, "layers": "forty"}, "layers"),
])
def test_bad_entries_are_refused_by_the_schema(helm: str, entry: dict[str, Any], message: str) -> None:
    with pytest.raises(HelmError, match=re.escape(message)):
        render_chart({"models": [entry]}, namespace=NS)
