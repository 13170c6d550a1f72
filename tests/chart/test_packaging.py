"""The Dockerfile (no docker here: checked by reading it) and docs/install.md against the chart's values."""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from tests.chart.render import CHART, ROOT

COMPONENTS = ("webhook", "scheduler", "standaloneExtender", "controller")
# Subtrees documented as one row (their inner keys are Kubernetes or vramgate config fields).
OPAQUE = {"config", "podSecurityContext", "containerSecurityContext", "resources"}


def _instructions() -> list[tuple[str, str]]:
    text = (ROOT / "Dockerfile").read_text()
    text = re.sub(r"\\\n", " ", text)
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_dockerfile_multi_stage_pinned_non_root() -> None:
    ins = _instructions()
    args = dict(a.split("=", 1) for w, a in ins if w == "ARG" and "=" in a)
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm", args["PYTHON_IMAGE"])
    froms = [a for w, a in ins if w == "FROM"]
    assert froms == ["${PYTHON_IMAGE} AS build", "${PYTHON_IMAGE}"]
    final = ins[max(i for i, (w, _) in enumerate(ins) if w == "FROM"):]
    final_words = [w for w, _ in final]
    assert "RUN" not in final_words, "the final stage installs nothing (no compilers, no package manager)"
    assert ("USER", "65532:65532") in final
    assert ("ENTRYPOINT", '["vramgate"]') in final and ("CMD", '["serve"]') in final
    env = " ".join(a for w, a in final if w == "ENV")
    assert "PYTHONDONTWRITEBYTECODE=1" in env and "HOME=/tmp" in env
    assert any(w == "COPY" and a.startswith("--from=build /opt/venv") for w, a in final)
    # Dependencies in their own layer: pyproject.toml is copied and installed before the code.
    build = ins[:len(ins) - len(final)]
    copies = [a for w, a in build if w == "COPY"]
    assert copies[0].startswith("pyproject.toml")
    dep_run = next(i for i, (w, a) in enumerate(build) if w == "RUN" and "-r /tmp/requirements.txt" in a)
    code_copy = next(i for i, (w, a) in enumerate(build) if w == "COPY" and a.startswith("webhook"))
    assert dep_run < code_copy


def test_dockerignore_keeps_context_small() -> None:
    lines = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()]
    assert lines[lines.index("*")] == "*"
    assert {"!pyproject.toml", "!README.md", "!webhook/"} <= set(lines)


def _leaves(node: dict[str, Any], prefix: str = "") -> list[str]:
    out = []
    for key, value in node.items():
        path = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict) and value and key not in OPAQUE:
            out += _leaves(value, path)
        else:
            out.append(path)
    return out


def test_install_doc_lists_every_value() -> None:
    doc = (ROOT / "docs" / "install.md").read_text()
    documented = set(re.findall(r"^\| `([^`]+)` \|", doc, flags=re.M))
    missing = []
    for path in _leaves(yaml.safe_load((CHART / "values.yaml").read_text())):
        head, _, rest = path.partition(".")
        if path in documented or (head in COMPONENTS and f"<component>.{rest}" in documented):
            continue
        missing.append(path)
    assert not missing, f"docs/install.md values table lacks {missing}"
    schema = json.loads((CHART / "values.schema.json").read_text())
    for row in documented:
        if row.startswith("<component>."):
            continue
        node = schema
        for part in row.split("."):
            assert part in node["properties"], f"docs/install.md documents unknown value {row}"
            node = node["properties"][part]


def test_install_doc_covers_the_modes() -> None:
    doc = (ROOT / "docs" / "install.md").read_text()
    for heading in ("### `selfSigned`", "### `certManager`", "### `provided`", "Register with an existing scheduler",
                    "## Upgrade", "## Uninstall", "## Values reference"):
        assert heading in doc
    uninstall = doc[doc.index("## Uninstall"):doc.index("## Values reference")]
    # The hook deletes the webhook configurations first; by hand, they go before `--no-hooks`.
    assert "pre-delete" in uninstall and "webhook.unregisterOnUninstall" in uninstall
    assert uninstall.index("delete validatingwebhookconfiguration") < uninstall.rindex("--no-hooks")
