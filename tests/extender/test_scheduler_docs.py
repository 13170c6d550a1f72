"""docs/scheduler.md's KubeSchedulerConfigurations load in the real kube-scheduler (validation and extender TLS)."""

from __future__ import annotations

import base64
import re
import subprocess
from pathlib import Path

import pytest

from webhook.tls.certs import make_bundle, write_bundle

from ..e2e.harness import REPO_ROOT, bin_dir

DOC = REPO_ROOT / "docs" / "scheduler.md"
KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: unused}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
"""


def configs() -> list[str]:
    blocks = re.findall(r"```yaml\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    return [b for b in blocks if "kind: KubeSchedulerConfiguration" in b]


def test_the_doc_has_both_setups() -> None:
    found = configs()
    assert len(found) == 2
    assert "schedulerName: vramgate-scheduler" in found[0] and "clientConnection" in found[1]
    for cfg in found:
        for field in ("urlPrefix:", "filterVerb: filter", "prioritizeVerb: prioritize", "weight:",
                      "nodeCacheCapable: true", "name: nvidia.com/gpu", "ignoredByScheduler: false", "ignorable:",
                      "httpTimeout:", "enableHTTPS: true", "tlsConfig:"):
            assert field in cfg, field


@pytest.mark.parametrize("index", [0, 1])
def test_kube_scheduler_accepts_the_documented_config(index: int, tmp_path: Path) -> None:
    scheduler = bin_dir() / "kube-scheduler"
    if not scheduler.exists():
        pytest.fail("kube-scheduler not built: run bash tests/e2e/build.sh (make test does)")
    write_bundle(make_bundle(["vramgate-webhook.vramgate.svc"]), tmp_path)
    (tmp_path / "kubeconfig").write_text(KUBECONFIG)
    cfg = configs()[index]
    # Stand-ins the machine has: a real CA (the doc's caData is a placeholder), a kubeconfig.
    cfg = cfg.replace("/certs/ca.crt", str(tmp_path / "ca.crt"))
    cfg = re.sub(r"caData: \S+", "caData: " + base64.b64encode((tmp_path / "ca.crt").read_bytes()).decode(), cfg)
    cfg = cfg.replace("/etc/kubernetes/scheduler.conf", str(tmp_path / "kubeconfig"))
    if "clientConnection" not in cfg:
        cfg = cfg.replace("kind: KubeSchedulerConfiguration\n", "kind: KubeSchedulerConfiguration\n"
                          f"clientConnection:\n  kubeconfig: {tmp_path / 'kubeconfig'}\n")
    (tmp_path / "config.yaml").write_text(cfg)
    out = tmp_path / "effective.yaml"
    proc = subprocess.run([str(scheduler), "--config", str(tmp_path / "config.yaml"), "--write-config-to", str(out),
                           "--secure-port=0"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    effective = out.read_text()
    assert "nodeCacheCapable: true" in effective and "urlPrefix: https://" in effective
