"""Credentials and namespace found as kubectl finds them: --kubeconfig, $KUBECONFIG, ~/.kube/config, in-cluster;
--context; -n, else the context's namespace, else default."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from webhook.kube.kubectl import NoCluster, connect


def kubeconfig(path: Path, current: str, contexts: dict[str, str | None]) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": current,
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": n, "context": {"cluster": "c", "user": "u", **({"namespace": ns} if ns else {})}}
                     for n, ns in contexts.items()],
    }))
    return path


def test_order_context_and_namespace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(NoCluster):
        connect()
    (tmp_path / ".kube").mkdir()
    kubeconfig(tmp_path / ".kube" / "config", "home", {"home": "from-home"})
    assert connect().namespace == "from-home" and connect().source.endswith(".kube/config")
    env = kubeconfig(tmp_path / "env.yaml", "dev", {"dev": "team-a", "prod": None})
    monkeypatch.setenv("KUBECONFIG", str(env))
    found = connect()
    assert found.source == "$KUBECONFIG" and found.namespace == "team-a"
    assert connect(context="prod").namespace == "default"
    assert connect(namespace="x").namespace == "x"
    flag = kubeconfig(tmp_path / "flag.yaml", "f", {"f": "from-flag"})
    assert connect(str(flag)).namespace == "from-flag"
    with pytest.raises(NoCluster):
        connect(context="nope")
