"""DRA-backed extended resources end to end (issue #38): a DeviceClass with ``extendedResourceName: nvidia.com/gpu``
makes the real 1.37 scheduler serve a pod's plain ``nvidia.com/gpu: 1`` from ResourceSlice devices on nodes that
have no ``nvidia.com/gpu`` capacity and no GPU labels.

DRAExtendedResource is GA and locked on in 1.37 (kubernetes v1.37.2 pkg/features/kube_features.go), so the harness
needs no feature gate. There is no DRA driver and no kubelet: the scheduler's dynamicresources plugin allocates from
the ResourceSlices the test publishes, creates its special claim (``<pod>-extended-resources-…``) in PreBind, records
it in ``pod.status.extendedResourceClaimStatus`` and binds.

| node | devices (driver gpu.nvidia.com, type gpu) |
|---|---|
| ext-h100 | 1 × NVIDIA H100 80GB HBM3 (80Gi) |
| ext-l4 | 1 × NVIDIA L4 (24Gi) |

The DeviceClass (own name, so test_dra.py's classes are not touched) is deleted afterwards: while it exists, every
``nvidia.com/gpu`` pod on a node with none allocatable is the DRA plugin's.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.harness import ControlPlane
from tests.e2e.vramgate_fixture import Vramgate

pytestmark = pytest.mark.e2e

RES = "/apis/resource.k8s.io/v1"
CLASS = "vramgate-e2e-gpu"
NODES = ("ext-h100", "ext-l4")
# Qwen2.5 14B, 8192 tokens, vLLM 0.8.5: about 35 GiB per GPU (at least 30): an 80 GiB device holds it, 24 GiB not.
MODEL = {"vramgate.io/model": "qwen2.5-14b-instruct", "vramgate.io/context-length": "8192"}


def _class() -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": CLASS},
            "spec": {"extendedResourceName": "nvidia.com/gpu", "selectors": [{"cel": {"expression": (
                "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'")}}]}}


def _slice(node: str, memory: str, product: str) -> dict[str, Any]:
    device = {"name": "gpu-0", "attributes": {"type": {"string": "gpu"}, "productName": {"string": product},
                                              "driverVersion": {"version": "560.35.3"}},
              "capacity": {"memory": {"value": memory}}}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node}-gpu"},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}, "devices": [device]}}


SLICES = {"ext-h100": _slice("ext-h100", "80Gi", "NVIDIA H100 80GB HBM3"),
          "ext-l4": _slice("ext-l4", "24Gi", "NVIDIA L4")}


def _pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": dict(MODEL)},
            "spec": {"containers": [{"name": "server", "image": "vllm/vllm-openai:v0.8.5", "resources": {
                "requests": {"cpu": "100m", "memory": "1Gi"}, "limits": {"nvidia.com/gpu": "1"}}}]}}


@pytest.fixture
def ext_nodes(cluster: ControlPlane) -> Iterator[None]:
    cluster.request("POST", f"{RES}/deviceclasses", _class())
    for name in NODES:
        cluster.create_gpu_node(name, gpus=0)
    for s in SLICES.values():
        cluster.request("POST", f"{RES}/resourceslices", s)
    try:
        yield
    finally:
        for s in SLICES.values():
            cluster.request("DELETE", f"{RES}/resourceslices/{s['metadata']['name']}", ok=(200, 202, 404))
        for name in NODES:
            cluster.delete_node(name)
        cluster.request("DELETE", f"{RES}/deviceclasses/{CLASS}", ok=(200, 202, 404))


def _apply(cluster: ControlPlane, namespace: str, pod: dict[str, Any], tmp_path: Path) -> Any:
    path = tmp_path / f"{pod['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(pod, sort_keys=False))
    return cluster.kubectl("apply", "-n", namespace, "-f", str(path), check=False)


def test_plain_gpu_request_served_by_dra_devices(
    cluster: ControlPlane, gate: Vramgate, ext_nodes: None, namespace: str, tmp_path: Path
) -> None:
    inv = gate.wait_inventory(set(NODES))
    # The inventory says what each node serves nvidia.com/gpu with: no capacity, no labels, the class's devices.
    assert {n: inv[n]["gpus"] for n in NODES} == {"ext-h100": 0, "ext-l4": 0}
    cluster.wait_for("the DeviceClass in vramgate's view", lambda: all(
        "extended_resources" in gate.inventory_nodes()[n] for n in NODES), timeout=15)
    inv = gate.inventory_nodes()
    assert inv["ext-h100"]["extended_resources"] == {
        "nvidia.com/gpu": {"device_class": CLASS, "devices": 1, "memory_mib": [81920]}}
    assert inv["ext-l4"]["extended_resources"]["nvidia.com/gpu"]["memory_mib"] == [24576]

    # 1. Admitted (on main it was denied: "needs 1 GPUs on one node; no node has that"), and the warning says the
    #    24 GiB node stays open to it natively.
    ok = _apply(cluster, namespace, _pod("qwen-14b"), tmp_path)
    assert ok.returncode == 0, ok.stderr
    # vramgate sends a long warning in pieces of 120 characters, split at a space (as test_scenarios.py joins them)
    said = " ".join(w.removeprefix("Warning: ").removeprefix("…").removesuffix("…")
                    for w in ok.stderr.splitlines() if w.startswith("Warning: "))
    assert f"nvidia.com/gpu (DeviceClass {CLASS}) is served from DRA devices; those on ext-l4 cannot hold it" in (
        said), ok.stderr
    pod = cluster.get_pod("qwen-14b", namespace)
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    # The VRAM affinity leaves unlabelled nodes (the DRA ones) open: otherwise the pod could never bind.
    assert [{"key": "vramgate.io/gpu-memory-mib", "operator": "DoesNotExist"},
            {"key": "nvidia.com/gpu.memory", "operator": "DoesNotExist"}] in [t["matchExpressions"] for t in terms]

    # 2. The real scheduler, with vramgate's extender, binds it to the 80 GiB node and allocates its device.
    node = cluster.wait_pod_bound("qwen-14b", namespace, timeout=60)
    assert node == "ext-h100"
    status = cluster.get_pod("qwen-14b", namespace)["status"]
    claim_status = status.get("extendedResourceClaimStatus")
    # request "container-<i>-request-<j>": j indexes the container's sorted resource names (cpu, memory, nvidia.com/gpu)
    assert claim_status and claim_status["requestMappings"] == [
        {"containerName": "server", "resourceName": "nvidia.com/gpu", "requestName": "container-0-request-2"}], status
    claim = cluster.request("GET", f"{RES}/namespaces/{namespace}/resourceclaims/{claim_status['resourceClaimName']}")
    assert claim["metadata"]["annotations"]["resource.kubernetes.io/extended-resource-claim"] == "true"
    (request,) = claim["spec"]["devices"]["requests"]
    assert request["name"] == "container-0-request-2" and request["exactly"]["deviceClassName"] == CLASS
    assert request["exactly"]["count"] == 1 and not request["exactly"].get("selectors")  # the class's, nothing more
    results = claim["status"]["allocation"]["devices"]["results"]
    assert [(r["pool"], r["device"]) for r in results] == [("ext-h100", "gpu-0")]
    cluster.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/qwen-14b", {"gracePeriodSeconds": 0},
                    ok=(200, 202, 404))

    # 3. Where every device is 24 GiB, the same pod is denied at kubectl apply, naming the class and the memory.
    cluster.request("DELETE", f"{RES}/resourceslices/ext-h100-gpu", ok=(200, 202, 404))
    cluster.delete_node("ext-h100")
    deadline = time.monotonic() + 15
    while "ext-h100" in gate.inventory_nodes() and time.monotonic() < deadline:
        time.sleep(0.2)
    bad = _apply(cluster, namespace, _pod("qwen-14b-again"), tmp_path)
    assert bad.returncode != 0, bad.stdout
    assert re.search(r'admission webhook "validate\.vramgate\.io" denied the request: pod/qwen-14b-again: '
                     r"needs [\d.]+ GiB VRAM per GPU \(.+\); the largest GPU in the cluster has 24 GiB "
                     rf"\(ext-l4, NVIDIA L4 via DRA DeviceClass {CLASS}", bad.stderr), bad.stderr
    assert f"nvidia.com/gpu is DeviceClass {CLASS}'s (extendedResourceName)" in bad.stderr
    assert "DRA devices: 24 GiB ×1" in bad.stderr


def test_native_affinity_steers_off_dra_nodes_too_small(
    cluster: ControlPlane, gate: Vramgate, namespace: str, tmp_path: Path
) -> None:
    """No extender: a labelled 80 GiB device-plugin node holds the pod, the only DRA node (24 GiB) cannot. The VRAM
    affinity then stays the label one, which rightly shuts out the unlabelled DRA node: kube-scheduler alone binds
    the pod to the device-plugin node (without the affinity, the DRA plugin could give it the L4)."""
    cluster.request("POST", f"{RES}/deviceclasses", _class())
    cluster.create_gpu_node("dp-h100", gpus=1, mem_mib=81920)
    cluster.create_gpu_node("ext-l4", gpus=0)
    cluster.request("POST", f"{RES}/resourceslices", SLICES["ext-l4"])
    cluster.start_scheduler(None)
    try:
        gate.wait_inventory({"dp-h100", "ext-l4"})
        cluster.wait_for("the DeviceClass in vramgate's view",
                         lambda: "extended_resources" in gate.inventory_nodes()["ext-l4"], timeout=15)
        ok = _apply(cluster, namespace, _pod("qwen-14b-native"), tmp_path)
        assert ok.returncode == 0, ok.stderr
        assert "served from DRA devices" not in ok.stderr, ok.stderr
        pod = cluster.get_pod("qwen-14b-native", namespace)
        terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"]
        # no bare "neither label" term (provisioner terms, which name a cloud's GPU, may be there)
        assert [{"key": "vramgate.io/gpu-memory-mib", "operator": "DoesNotExist"},
                {"key": "nvidia.com/gpu.memory", "operator": "DoesNotExist"}] not in [
                    t["matchExpressions"] for t in terms], terms
        assert cluster.wait_pod_bound("qwen-14b-native", namespace, timeout=60) == "dp-h100"
        assert not cluster.get_pod("qwen-14b-native", namespace)["status"].get("extendedResourceClaimStatus")
    finally:
        cluster.start_scheduler([gate.extender()])
        cluster.request("DELETE", f"{RES}/resourceslices/ext-l4-gpu", ok=(200, 202, 404))
        for name in ("dp-h100", "ext-l4"):
            cluster.delete_node(name)
        cluster.request("DELETE", f"{RES}/deviceclasses/{CLASS}", ok=(200, 202, 404))
