"""Autofit end to end (issue #28): through the real API server, the chart's autofit.vramgate.io webhook and the
real scheduler, an opted-in Deployment whose context fits no GPU is created with a shorter one, keeps the trail
and an Event, and its pod binds; the same Deployment without the opt-in is denied at apply time."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from tests.e2e.harness import GPU_RESOURCE, ControlPlane
from tests.e2e.vramgate_fixture import Vramgate

pytestmark = pytest.mark.e2e

L4 = {"gpus": 1, "mem_mib": 23034, "product": "NVIDIA-L4"}
CONTEXT = 131072


def chat(name: str, *, autofit: bool) -> dict[str, Any]:
    annotations = {"vramgate.io/autofit": "true"} if autofit else {}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}, "annotations": annotations},
                "spec": {"containers": [{
                    "name": "vllm",
                    "image": "vllm/vllm-openai:v0.10.1",
                    "args": ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", str(CONTEXT)],
                    "resources": {"requests": {"cpu": "100m", "memory": "1Gi"}, "limits": {GPU_RESOURCE: "1"}},
                }]},
            },
        },
    }


def apply(cluster: ControlPlane, tmp_path: Path, obj: dict[str, Any], namespace: str) -> Any:
    path = tmp_path / f"{obj['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(obj, sort_keys=False))
    return cluster.kubectl("apply", "-n", namespace, "-f", str(path), check=False)


def test_an_opted_in_deployment_is_created_with_a_context_that_fits_and_binds(
    cluster: ControlPlane, gate: Vramgate, gpu_nodes: Callable[..., Any], namespace: str, tmp_path: Path
) -> None:
    gpu_nodes("af-l4", **L4)
    gate.wait_inventory({"af-l4"})
    before = gate.metric("vramgate_autofit_total", result="applied")

    r = apply(cluster, tmp_path, chat("chat", autofit=True), namespace)
    assert r.returncode == 0, r.stderr
    assert "deployment.apps/chat created" in r.stdout
    assert "Warning: vramgate autofit: applied --max-model-len" in r.stderr, r.stderr

    stored = cluster.request("GET", f"/apis/apps/v1/namespaces/{namespace}/deployments/chat")
    args = stored["spec"]["template"]["spec"]["containers"][0]["args"]
    fitted = int(args[args.index("--max-model-len") + 1])
    assert 2048 <= fitted < CONTEXT
    trail = orjson.loads(stored["metadata"]["annotations"]["vramgate.io/autofit-applied"])
    assert trail["change"].startswith(f"--max-model-len {fitted}")
    assert f"{CONTEXT} tokens" in trail["reason"] and "NVIDIA-L4" in trail["reason"]
    assert gate.metric("vramgate_autofit_total", result="applied") == before + 1

    # The Event names the change, on the stored object (its UID: `kubectl describe` finds it).
    uid = stored["metadata"]["uid"]
    events = cluster.wait_for(
        "the autofit Event",
        lambda: [e for e in cluster.request("GET", f"/api/v1/namespaces/{namespace}/events")["items"]
                 if e["reason"] == "VRAMGateAutofit" and e["involvedObject"].get("uid") == uid],
        timeout=30,
    )
    assert events[0]["type"] == "Normal" and events[0]["involvedObject"]["kind"] == "Deployment"
    assert events[0]["message"].startswith(f"autofit applied --max-model-len {fitted}")
    described = cluster.kubectl("describe", "deployment", "chat", "-n", namespace)
    assert "VRAMGateAutofit" in described.stdout

    # Its pod is admitted as written (the template already fits) and scheduled onto the L4.
    pod = cluster.wait_for(
        "the chat pod bound",
        lambda: next((p for p in cluster.request("GET", f"/api/v1/namespaces/{namespace}/pods",
                                                 query={"labelSelector": "app=chat"})["items"]
                      if p["spec"].get("nodeName")), None),
        timeout=60,
    )
    assert pod["spec"]["nodeName"] == "af-l4"


def test_the_same_deployment_without_the_opt_in_is_denied(
    cluster: ControlPlane, gate: Vramgate, gpu_nodes: Callable[..., Any], namespace: str, tmp_path: Path
) -> None:
    gpu_nodes("af2-l4", **L4)
    gate.wait_inventory({"af2-l4"})
    r = apply(cluster, tmp_path, chat("chat", autofit=False), namespace)
    assert r.returncode != 0
    assert 'admission webhook "validate.vramgate.io" denied the request: deployment/chat: needs' in r.stderr
    assert "Try: --max-model-len" in r.stderr
    got = cluster.kubectl("get", "deployment", "chat", "-n", namespace, check=False)
    assert got.returncode != 0 and "NotFound" in got.stderr
