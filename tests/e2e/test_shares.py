"""GPU shares end to end (issue 41): pods that state their share to HAMi, Volcano vGPU or KAI-Scheduler reach the
webhooks through the chart's gpu-workloads-only matchCondition on the real kube-apiserver, and are judged against
the model they run.

- HAMi (``nvidia.com/gpumem``): a share below what the model needs is denied at ``kubectl apply`` with the size that
  holds it (HAMi-core caps the device at the share, so the engine cannot load the model);
- Volcano vGPU: a pod asking only ``volcano.sh/vgpu-*`` (no ``nvidia.com/gpu``) is sent by prefix and judged so;
- KAI: a pod asking only the ``gpu-fraction`` annotation (no GPU resource at all) is sent by the annotation; one
  whose model no GPU holds is denied, one that fits is admitted with the engine flag that keeps it in its share.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.harness import ControlPlane
from tests.e2e.vramgate_fixture import Vramgate

pytestmark = pytest.mark.e2e

DENIED = 'admission webhook "validate.vramgate.io" denied the request: '
IMAGE = "vllm/vllm-openai:v0.11.0"


def _pod(name: str, model: str, limits: dict[str, str] | None = None,
         annotations: dict[str, str] | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "vllm", "image": IMAGE, "args": ["--model", model, "--max-model-len", "8192"],
                         "resources": {"requests": {"cpu": "100m", "memory": "1Gi"}, "limits": dict(limits or {})}}
    meta: dict[str, Any] = {"name": name}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": [c]}}


def _apply(cluster: ControlPlane, tmp_path: Path, obj: dict[str, Any], ns: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / f"{obj['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(obj, sort_keys=False))
    return cluster.kubectl("apply", "-n", ns, "-f", str(path), check=False)


@pytest.fixture
def l4_cluster(gate: Vramgate, gpu_nodes: Callable[..., dict[str, Any]]) -> Vramgate:
    gpu_nodes("e2e-l4-share-0", gpus=4, mem_mib=23034, product="NVIDIA-L4")
    gate.wait_inventory({"e2e-l4-share-0"})
    return gate


def test_a_hami_share_too_small_for_the_model_is_denied_with_the_size_that_holds_it(
        cluster: ControlPlane, l4_cluster: Vramgate, namespace: str, tmp_path: Path) -> None:
    pod = _pod("hami-8b-8g", "meta-llama/Llama-3.1-8B-Instruct", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000"})
    got = _apply(cluster, tmp_path, pod, namespace)
    assert got.returncode != 0 and DENIED in got.stderr, got.stderr
    assert "asks HAMi for nvidia.com/gpumem 8000 MiB of each GPU" in got.stderr, got.stderr
    assert "Try: nvidia.com/gpumem: 23034" in got.stderr, got.stderr
    ok = _pod("hami-8b-20g", "meta-llama/Llama-3.1-8B-Instruct", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "20000"})
    assert _apply(cluster, tmp_path, ok, namespace).returncode == 0


def test_a_volcano_vgpu_pod_reaches_the_webhook_by_prefix(
        cluster: ControlPlane, l4_cluster: Vramgate, namespace: str, tmp_path: Path) -> None:
    pod = _pod("volcano-7b-10g", "Qwen/Qwen2.5-7B-Instruct",
               {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "10240"})
    got = _apply(cluster, tmp_path, pod, namespace)
    assert got.returncode != 0 and DENIED in got.stderr, got.stderr
    assert "Volcano vGPU caps the device at the share" in got.stderr, got.stderr


def test_a_kai_fraction_pod_reaches_the_webhook_by_its_annotation(
        cluster: ControlPlane, l4_cluster: Vramgate, namespace: str, tmp_path: Path) -> None:
    big = _pod("kai-70b", "meta-llama/Llama-3.1-70B-Instruct", annotations={"gpu-fraction": "0.5"})
    got = _apply(cluster, tmp_path, big, namespace)
    assert got.returncode != 0 and DENIED in got.stderr, got.stderr
    assert "the largest GPU in the cluster has 22.5 GiB" in got.stderr, got.stderr
    small = _pod("kai-1b", "meta-llama/Llama-3.2-1B-Instruct", annotations={"gpu-fraction": "0.5"})
    got = _apply(cluster, tmp_path, small, namespace)
    assert got.returncode == 0, got.stderr
    assert "set --gpu-memory-utilization 0.5" in got.stderr, got.stderr  # kubectl prints the warning
    created = cluster.request("GET", f"/api/v1/namespaces/{namespace}/pods/kai-1b")
    assert "vramgate.io/estimate" in created["metadata"]["annotations"], created["metadata"]
    assert "nvidia.com/gpu" not in created["spec"]["containers"][0]["resources"].get("limits", {})
