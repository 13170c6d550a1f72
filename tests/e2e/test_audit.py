"""The background audit against a real API server: a fitting Deployment turns `fail` in its namespace's
PolicyReport when the only big-GPU node is deleted (one Warning Event), and `pass` again when the node
returns; `vramgate audit` and `vramgate explain` read the same cluster; the report stays under its cap."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.chart.render import one, render_chart
from tests.e2e.harness import REPO_ROOT, ControlPlane
from tests.e2e.test_controller import LEASE, RENEW, RETRY, Replica
from webhook.config import Audit, Config, Controller

pytestmark = pytest.mark.e2e

REPORTS = "/apis/wgpolicyk8s.io/v1alpha2"
MODEL = {"name": "MODEL_NAME", "value": "llama-3-8b-instruct"}  # ~17 GiB: fits 80 GiB, not 16 GiB
BIG_MODEL = {"name": "MODEL_NAME", "value": "llama-3-70b-instruct"}  # fits nowhere on one 16 GiB GPU


@pytest.fixture(scope="module")
def report_crd(cluster: ControlPlane) -> str:
    """The chart's PolicyReport CRD (reports.installCRDs=true), installed as helm would."""
    crd = one(render_chart({"reports": {"installCRDs": True}}), "CustomResourceDefinition",
              "policyreports.wgpolicyk8s.io")
    cluster.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd, ok=(201, 409))

    def established() -> bool:
        name = crd["metadata"]["name"]
        got = cluster.request("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        return any(c["type"] == "Established" and c["status"] == "True" for c in got["status"].get("conditions", []))

    cluster.wait_for("PolicyReport CRD established", established, timeout=30)
    return str(crd["metadata"]["name"])


@pytest.fixture
def controller(cluster: ControlPlane, report_crd: str) -> Iterator[Callable[..., Replica]]:
    started: list[Replica] = []
    lease_ns = f"vg-aud-{uuid.uuid4().hex[:8]}"
    cluster.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                   "metadata": {"name": lease_ns}})

    def start(**audit: Any) -> Replica:
        config = Config(
            namespace=lease_ns,
            controller=Controller(lease_duration_seconds=LEASE, renew_deadline_seconds=RENEW,
                                  retry_period_seconds=RETRY, reconcile_interval_seconds=0.2,
                                  unhealthy_after_seconds=0.5, healthy_after_seconds=0.5),
            audit=Audit(**{"interval_seconds": 1.0, "min_interval_seconds": 0.0, **audit}),
        )
        r = Replica(config, str(cluster.kubeconfig), f"audit-{len(started)}").start()
        started.append(r)
        return r

    yield start
    for r in started:
        if r.thread.is_alive():
            r.stop()
    cluster.request("DELETE", f"/api/v1/namespaces/{lease_ns}", ok=(200, 202, 404))


def deployment(cluster: ControlPlane, namespace: str, name: str, env: dict[str, str], replicas: int = 1) -> None:
    cluster.request("POST", f"/apis/apps/v1/namespaces/{namespace}/deployments", {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{
                    "name": "vllm", "image": "vllm/vllm-openai:v0.6.3", "env": [env],
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }]},
            },
        },
    })


def report(cluster: ControlPlane, namespace: str) -> dict[str, Any] | None:
    try:
        got: dict[str, Any] = cluster.request("GET", f"{REPORTS}/namespaces/{namespace}/policyreports/vramgate")
    except Exception:
        return None
    return got


def audit_events(cluster: ControlPlane, namespace: str, name: str) -> list[dict[str, Any]]:
    got = cluster.request("GET", f"/api/v1/namespaces/{namespace}/events", query={
        "fieldSelector": f"involvedObject.name={name},reason=VRAMGateAuditFailed"})
    return list(got["items"])


def cli(cluster: ControlPlane, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "webhook.cli", *args, "--kubeconfig", str(cluster.kubeconfig)],
                          capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)


def test_a_deployment_fails_when_its_only_big_node_goes_and_passes_when_it_returns(
    cluster: ControlPlane, namespace: str, gpu_nodes: Callable[..., Any], controller: Callable[..., Replica],
    tmp_path: Path,
) -> None:
    gpu_nodes("e2e-aud-small", gpus=1, mem_mib=16384, product="Tesla-T4")
    gpu_nodes("e2e-aud-big", gpus=2, mem_mib=81920, product="NVIDIA-H100-80GB-HBM3")
    deployment(cluster, namespace, "llama", MODEL)
    r = controller()

    passing = cluster.wait_for("a passing report", lambda: (p := report(cluster, namespace)) and
                               p["summary"]["pass"] == 1 and p, timeout=60)
    assert passing["results"] == [] and passing["summary"]["fail"] == 0  # passes are counted, not listed
    assert passing["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "vramgate"

    cluster.delete_node("e2e-aud-big")
    failing = cluster.wait_for("the Deployment failing", lambda: (p := report(cluster, namespace)) and
                               p["summary"]["fail"] == 1 and p, timeout=60)
    [result] = failing["results"]  # the Deployment once: not its ReplicaSet, not its pod
    assert result["result"] == "fail" and result["policy"] == "vramgate" and result["rule"] == "VRAMTooSmall"
    assert result["resources"][0]["kind"] == "Deployment" and result["resources"][0]["name"] == "llama"
    assert result["message"].startswith("deployment/llama: needs ")
    assert "Tesla-T4" in result["message"] and result["properties"]["bestNode"] == "e2e-aud-small"
    [event] = cluster.wait_for("the Warning Event", lambda: audit_events(cluster, namespace, "llama"), timeout=30)
    assert event["type"] == "Warning" and event["involvedObject"]["kind"] == "Deployment"
    assert r.sample("vramgate_audit_workloads", result="fail") >= 1

    # `vramgate audit` and `vramgate explain` against the same cluster, read-only.
    out = cli(cluster, "audit", "-n", namespace)
    assert out.returncode == 1, out.stderr
    assert "deployment/llama" in out.stdout and "FAIL" in out.stdout and "VRAMTooSmall" in out.stdout
    out = cli(cluster, "explain", "deployment/llama", "-n", namespace)
    assert out.returncode == 0, out.stderr
    assert "REJECTED" in out.stdout and "VRAMTooSmall (1):" in out.stdout and "e2e-aud-small" in out.stdout
    assert "model: env MODEL_NAME → catalog llama-3-8b-instruct" in out.stdout
    assert "change that would place it:" in out.stdout
    # A workload admission would reject was never created: explain it from its manifest, against the cluster.
    manifest = tmp_path / "huge.yaml"
    manifest.write_text(json.dumps({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "huge"},
                                    "spec": {"template": {"spec": {"containers": [{
                                        "name": "vllm", "image": "vllm/vllm-openai:v0.6.3", "env": [BIG_MODEL],
                                        "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}}))
    out = cli(cluster, "explain", "deploy/huge", "-n", namespace, "-f", str(manifest))
    assert out.returncode == 0, out.stderr
    assert f"deployment/huge (namespace {namespace})" in out.stdout and "e2e-aud-small (Tesla-T4)" in out.stdout
    out = cli(cluster, "explain", "deploy/huge", "-n", namespace)
    assert out.returncode == 2 and "pass its manifest with -f" in out.stderr

    rv = failing["metadata"]["resourceVersion"]
    r_passes = r.sample("vramgate_audit_passes_total", trigger="period")
    cluster.wait_for("more periodic passes", lambda: r.sample("vramgate_audit_passes_total", trigger="period")
                     >= r_passes + 2, timeout=30)
    assert report(cluster, namespace)["metadata"]["resourceVersion"] == rv  # type: ignore[index]  # no churn

    gpu_nodes("e2e-aud-big", gpus=2, mem_mib=81920, product="NVIDIA-H100-80GB-HBM3")
    back = cluster.wait_for("passing again", lambda: (p := report(cluster, namespace)) and
                            p["summary"] == {"pass": 1, "fail": 0, "warn": 0, "error": 0, "skip": 0} and p, timeout=60)
    assert back["results"] == []
    assert len(audit_events(cluster, namespace, "llama")) == 1  # once, not on every pass
    out = cli(cluster, "audit", "-n", namespace, "-o", "json")
    assert out.returncode == 0, out.stderr


def test_the_report_stays_under_its_cap(
    cluster: ControlPlane, namespace: str, gpu_nodes: Callable[..., Any], controller: Callable[..., Replica],
) -> None:
    gpu_nodes("e2e-aud-cap", gpus=1, mem_mib=16384, product="Tesla-T4")
    for i in range(25):
        deployment(cluster, namespace, f"big-{i:02}", BIG_MODEL, replicas=0)
    controller(max_results_per_report=10, events=False)
    capped = cluster.wait_for("all 25 counted", lambda: (p := report(cluster, namespace)) and
                              p["summary"]["fail"] == 25 and p, timeout=60)
    assert len(capped["results"]) == 10
    assert capped["metadata"]["annotations"]["vramgate.io/results-truncated"] == "15"
    assert audit_events(cluster, namespace, "big-00") == []
