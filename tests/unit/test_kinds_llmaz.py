"""llmaz Playground (inference.llmaz.io): the model-runner pod from its OpenModel (llmaz.io) and backend."""

from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.cli.main import main
from webhook.kinds import Context, Runtimes, roles

HERE = Path(__file__).resolve().parents[1] / "fixtures" / "kinds" / "llmaz"
NODES = Path(__file__).resolve().parents[1] / "fixtures" / "distributed" / "nodes"


def load(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((HERE / name).read_text()) if d]


def test_the_runner_serves_the_openmodels_hub_model_on_its_flavors_gpus() -> None:
    model, playground = load("sglang-playground.yaml")
    rs = roles(playground, Context(runtimes=Runtimes.of([model])))
    assert rs is not None and not rs.warnings
    (role,) = rs.roles
    (c,) = role.view.spec["containers"]
    assert c["command"] == ["python3", "-m", "sglang.launch_server"]
    assert c["args"][:2] == ["--model-path", "/workspace/models/models--Qwen--Qwen2-0.5B-Instruct"]
    assert c["resources"]["limits"] == {"nvidia.com/gpu": 1} and role.replicas == 1


def test_published_playgrounds_are_admitted(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["check", "-f", str(HERE / "sglang-playground.yaml"), "--nodes", str(NODES / "l4x8.yaml"),
                 "--explain"])
    out = capsys.readouterr().out
    assert code == 0 and "ADMIT   playground/qwen2-0--5b" in out and "catalog qwen2-0.5b-instruct" in out, out


def test_without_its_openmodel_or_with_another_backend_a_playground_says_why() -> None:
    model, playground = load("huggingface-playground.yaml")
    rs = roles(playground, Context())
    assert rs is not None and rs.roles == () and "OpenModel 'opt-125m' is not visible to vramgate at admission" in \
        rs.warnings[0]
    playground["spec"]["backendRuntimeConfig"] = {"backendName": "ollama"}
    rs = roles(playground, Context(runtimes=Runtimes.of([model])))
    assert rs is not None and rs.roles == () and "backend 'ollama' is not read here" in rs.warnings[0]
    # The Playground's own resources and args go on the runner; a flavor's limits overwrite them.
    playground["spec"]["backendRuntimeConfig"] = {"args": ["--max-model-len", "2048"],
                                                  "resources": {"limits": {"nvidia.com/gpu": 4, "cpu": 2}}}
    rs = roles(playground, Context(runtimes=Runtimes.of([model])))
    assert rs is not None
    (c,) = rs.roles[0].view.spec["containers"]
    assert c["args"][-2:] == ["--max-model-len", "2048"]
    assert c["resources"]["limits"] == {"nvidia.com/gpu": 1, "cpu": 2}
