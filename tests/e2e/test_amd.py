"""AMD Instinct nodes end to end (issue 38): Node objects labelled as the AMD GPU Operator's node labeller writes them
and advertising ``amd.com/gpu`` as its device plugin does, on the real control plane, with ``vramgate serve --role
all`` registered from the chart and the real kube-scheduler calling its extender.

- admission: ``kubectl apply`` of a Deployment too big for any AMD GPU is denied naming the MI300X and its memory,
  and the fix it offers asks ``amd.com/gpu``;
- mutation: an admitted AMD pod tolerates ``amd.com/gpu`` (not ``nvidia.com/gpu``), gets no CUDA env, and a VRAM
  affinity an AMD node can satisfy;
- binding: kube-scheduler binds it to the MI300X node that holds it, never to the MI210 node that does not, and
  vramgate counts its GPUs as busy on that node.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.harness import ControlPlane
from tests.e2e.vramgate_fixture import Vramgate

pytestmark = pytest.mark.e2e

AMD = "amd.com/gpu"
IMAGE = "rocm/vllm:rocm6.3.1_vllm_0.8.5_20250521"
MI300X = {"amd.com/gpu.product-name": "AMD_Instinct_MI300X", "amd.com/gpu.vram": "192G",
          "amd.com/gpu.family": "AI", "amd.com/gpu.device-id": "74a1",
          "amd.com/gpu.compute-memory-partition": "spx_nps1"}
MI210 = {"amd.com/gpu.product-name": "AMD_Instinct_MI210", "amd.com/gpu.vram": "64G", "amd.com/gpu.family": "AI",
         "amd.com/gpu.device-id": "740f"}
DENIED = 'admission webhook "validate.vramgate.io" denied the request: '


@pytest.fixture
def amd_nodes(cluster: ControlPlane, gpu_nodes: Callable[..., dict[str, Any]]) -> Iterator[Callable[..., None]]:
    """``make(name, labels, gpus)``: a Ready node with the labeller's labels and ``amd.com/gpu`` capacity (no
    nvidia.com/gpu), made as a CPU node by the harness and then given the AMD device plugin's resource."""

    def make(name: str, labels: dict[str, str], gpus: int = 8) -> None:
        gpu_nodes(name, gpus=0, labels=labels)
        count = str(gpus)
        cluster.request("PATCH", f"/api/v1/nodes/{name}/status",
                        {"status": {"capacity": {AMD: count, "nvidia.com/gpu": None},
                                    "allocatable": {AMD: count, "nvidia.com/gpu": None}}},
                        content_type="application/strategic-merge-patch+json")

    yield make


def _container(model: str, gpus: int = 1, env: list[dict[str, str]] | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "vllm", "image": IMAGE,
                         "args": ["--model", model, "--max-model-len", "8192"],
                         "resources": {"requests": {"cpu": "100m", "memory": "1Gi"}, "limits": {AMD: str(gpus)}}}
    if env is not None:
        c["env"] = env
    return c


def _apply(cluster: ControlPlane, tmp_path: Path, obj: dict[str, Any], ns: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / f"{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(obj, sort_keys=False))
    return cluster.kubectl("apply", "-n", ns, "-f", str(path), check=False)


@pytest.fixture
def amd_cluster(gate: Vramgate, amd_nodes: Callable[..., None]) -> Vramgate:
    amd_nodes("e2e-mi300x-0", MI300X)
    amd_nodes("e2e-mi210-0", MI210)
    inv = gate.wait_inventory({"e2e-mi300x-0", "e2e-mi210-0"})
    assert inv["e2e-mi300x-0"]["free"] == 8, inv
    return gate


def test_too_big_for_any_amd_gpu_is_denied_naming_the_mi300x(
        cluster: ControlPlane, amd_cluster: Vramgate, namespace: str, tmp_path: Path) -> None:
    # Llama 3.1 405B in bf16 on one GPU: ~787 GiB; the largest AMD GPU here has 192 GB.
    deploy = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "llama-405b-one-gpu"},
              "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "l405"}},
                       "template": {"metadata": {"labels": {"app": "l405"}},
                                    "spec": {"containers": [_container("meta-llama/Llama-3.1-405B-Instruct")]}}}}
    got = _apply(cluster, tmp_path, deploy, namespace)
    assert got.returncode != 0, got.stdout
    err = got.stderr
    assert DENIED in err, err
    assert "the largest GPU in the cluster has 192 GiB (e2e-mi300x-0, AMD_Instinct_MI300X" in err, err
    # The fix asks the AMD resource, with the engine's own flag.
    assert "amd.com/gpu: 8 with --tensor-parallel-size 8" in err and "nvidia.com/gpu" not in err, err


def test_admitted_amd_pod_is_mutated_for_amd_and_binds_to_the_mi300x(
        cluster: ControlPlane, amd_cluster: Vramgate, namespace: str) -> None:
    # Llama 3.1 70B in bf16 on one GPU: ~141 GiB, which a 192 GB MI300X holds and a 64 GB MI210 does not.
    hip = [{"name": "HIP_VISIBLE_DEVICES", "value": "0"}]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "llama-70b"},
           "spec": {"containers": [_container("meta-llama/Llama-3.1-70B-Instruct", env=hip)]}}
    created = cluster.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod)
    spec = created["spec"]
    tolerations = {t.get("key"): t for t in spec.get("tolerations", [])}
    assert tolerations[AMD] == {"key": AMD, "operator": "Exists", "effect": "NoSchedule"}, spec["tolerations"]
    assert "nvidia.com/gpu" not in tolerations
    # No CUDA env: vLLM on ROCm raises when CUDA_VISIBLE_DEVICES and HIP_VISIBLE_DEVICES differ.
    assert spec["containers"][0]["env"] == hip
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    keys = {e["key"] for t in terms for e in t["matchExpressions"]}
    assert {"vramgate.io/gpu-memory-mib", "amd.com/gpu.vram"} <= keys and "nvidia.com/gpu.memory" not in keys, terms
    assert "vllm 0.8.5" in created["metadata"]["annotations"]["vramgate.io/estimate"]
    # Binding: kube-scheduler (with vramgate's extender) picks the node that holds it.
    assert cluster.wait_pod_bound("llama-70b", namespace, timeout=60) == "e2e-mi300x-0"
    # Its GPU is busy now, in vramgate's own count of the AMD node.
    amd_cluster.wait_free("e2e-mi300x-0", 7)


def test_a_partition_only_pod_reaches_the_webhook_and_a_70b_on_cpx_is_denied(
        cluster: ControlPlane, gate: Vramgate, amd_nodes: Callable[..., None], namespace: str) -> None:
    # Under the device plugin's mixed naming a pod asks only amd.com/cpx_nps4: the chart's gpu-workloads-only
    # matchCondition sends it by prefix (no fixed resource list holds every mode), and the webhook judges it
    # against a partition's share: 192 GB / 8 = 24 GiB, which a 70B in bf16 (~141 GiB) does not fit.
    amd_nodes("e2e-mi300x-cpx", {**MI300X, "amd.com/gpu.compute-memory-partition": "cpx_nps4"}, gpus=0)
    cluster.request("PATCH", "/api/v1/nodes/e2e-mi300x-cpx/status",
                    {"status": {"capacity": {"amd.com/cpx_nps4": "64"}, "allocatable": {"amd.com/cpx_nps4": "64"}}},
                    content_type="application/strategic-merge-patch+json")
    gate.wait_inventory({"e2e-mi300x-cpx"})
    c = _container("meta-llama/Llama-3.1-70B-Instruct")
    c["resources"]["limits"] = {"amd.com/cpx_nps4": "1"}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "llama-70b-cpx"}, "spec": {"containers": [c]}}
    with pytest.raises(Exception) as err:
        cluster.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod)
    msg = str(err.value)
    assert "validate.vramgate.io" in msg and "amd.com/cpx_nps4 is a 24 GiB AMD partition slice" in msg, msg
    # An 8B fits a partition: admitted and mutated for AMD (so the webhook saw it, not just the rejection path).
    c8 = _container("meta-llama/Llama-3.1-8B-Instruct")
    c8["resources"]["limits"] = {"amd.com/cpx_nps4": "1"}
    created = cluster.request("POST", f"/api/v1/namespaces/{namespace}/pods",
                              {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "llama-8b-cpx"},
                               "spec": {"containers": [c8]}})
    assert "vramgate.io/estimate" in created["metadata"]["annotations"], created["metadata"]
    assert "amd.com/gpu" in {t.get("key") for t in created["spec"].get("tolerations", [])}
