"""Render charts/vramgate with `helm template` and return the objects (for the chart and e2e tests).

    from tests.chart.render import render_chart
    objs = render_chart({"webhook": {"clientConfig": "url", "url": "https://127.0.0.1:8443"},
                         "certs": {"mode": "provided", "secretName": "unused", "caBundle": ca_b64}})
    webhooks = [o for o in objs if o["kind"].endswith("WebhookConfiguration")]

Helm comes from .cache/bin/helm (installed by tests/chart/install_helm.sh), else $HELM, else PATH.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "vramgate"
HELM_CACHE = ROOT / ".cache" / "bin" / "helm"
INSTALL_HINT = "bash tests/chart/install_helm.sh   # go install helm.sh/helm/v3/cmd/helm@v3.22.0 into .cache/bin"
# The Kubernetes version templates are rendered for (Chart.yaml's kubeVersion needs ≥ 1.27; helm's
# offline default is older). Matches the e2e control plane.
KUBE_VERSION = "1.37.2"


class HelmMissingError(RuntimeError):
    """No helm binary: install it with tests/chart/install_helm.sh."""


class HelmError(RuntimeError):
    """helm exited non-zero; the message is its stderr."""


def helm_binary() -> str:
    """Path of the helm binary, or HelmMissingError naming the install command."""
    if HELM_CACHE.is_file() and os.access(HELM_CACHE, os.X_OK):
        return str(HELM_CACHE)
    env = os.environ.get("HELM")
    if env and Path(env).is_file():
        return env
    found = shutil.which("helm")
    if found:
        return found
    raise HelmMissingError(f"helm not found; install it with: {INSTALL_HINT}")


def run_helm(*args: str, timeout: float = 120) -> str:
    """Run helm with arguments; stdout, or HelmError with stderr."""
    proc = subprocess.run([helm_binary(), *args], capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise HelmError(f"helm {' '.join(args[:2])} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def render_manifest(
    values: dict[str, Any] | None = None,
    release: str = "vramgate",
    namespace: str = "vramgate",
    *,
    hooks: bool = True,
    kube_version: str = KUBE_VERSION,
    api_versions: Iterable[str] = (),
    chart: Path = CHART,
) -> str:
    """`helm template` output as text. Values go through a file, so any YAML type survives."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False, encoding="utf-8") as fh:
        json.dump(values or {}, fh)  # JSON is YAML
        values_file = fh.name
    try:
        args = ["template", release, str(chart), "--namespace", namespace, "--kube-version", kube_version,
                "-f", values_file]
        if not hooks:
            args.append("--no-hooks")
        for api in api_versions:
            args += ["--api-versions", api]
        return run_helm(*args)
    finally:
        os.unlink(values_file)


def render_chart(
    values: dict[str, Any] | None = None,
    release: str = "vramgate",
    namespace: str = "vramgate",
    **kwargs: Any,
) -> list[dict[str, Any]]:
    """Render the chart with ``values`` and return every object (hooks included) as a dict."""
    text = render_manifest(values, release, namespace, **kwargs)
    return [doc for doc in yaml.safe_load_all(text) if isinstance(doc, dict)]


def find(objects: Iterable[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    """Objects of a kind (and name)."""
    return [o for o in objects if o.get("kind") == kind and (name is None or o["metadata"]["name"] == name)]


def one(objects: Iterable[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    """The single object of a kind (and name); AssertionError when there is not exactly one."""
    found = find(objects, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def url_mode_values(url: str, ca_bundle_b64: str, **extra: Any) -> dict[str, Any]:
    """Values that point both webhooks at an out-of-cluster server (``url`` + ``/mutate`` or ``/validate``)."""
    values: dict[str, Any] = {
        "webhook": {"clientConfig": "url", "url": url},
        "certs": {"mode": "provided", "secretName": "vramgate-tls", "caBundle": ca_bundle_b64},
    }
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(values.get(key), dict):
            values[key] = {**values[key], **value}
        else:
            values[key] = value
    return values
