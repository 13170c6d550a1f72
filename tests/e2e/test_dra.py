"""DRA end to end (issue #14): the real API server, controller manager and scheduler allocate claims
for fake GPU nodes that have no kubelet, no device plugin and no GPU Feature Discovery labels.

The DeviceClasses are the ones NVIDIA's DRA driver chart installs; the ResourceSlices are shaped as its
kubelet plugin publishes them (``gpu-<minor>`` with ``type: gpu``, ``gpu-<minor>-mig-<profile>-<start>-<size>``
with ``type: mig`` and ``profile``; ``capacity.memory``). Three nodes:

| node | devices |
|---|---|
| dra-a100 | 2 × NVIDIA A100-SXM4-80GB (80 GiB) |
| dra-l4 | 1 × NVIDIA L4 (23034 MiB) |
| dra-mig | MIG on an A100 80GB: 2 × 1g.10gb (9728 MiB), 1 × 3g.40gb (40192 MiB) |

and a node labelled only the way GKE labels an L4 node pool (no GFD).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.harness import ControlPlane
from tests.e2e.vramgate_fixture import Vramgate

pytestmark = pytest.mark.e2e

RES = "/apis/resource.k8s.io/v1"
IMAGE = "vllm/vllm-openai:v0.6.3"
NODES = ("dra-a100", "dra-l4", "dra-mig")


def _cls(name: str, type_: str) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": (
                f"device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == '{type_}'")}}]}}


def _device(name: str, memory: str, type_: str = "gpu", profile: str | None = None,
            product: str = "NVIDIA A100-SXM4-80GB") -> dict[str, Any]:
    attrs: dict[str, Any] = {"type": {"string": type_}, "productName": {"string": product},
                             "driverVersion": {"version": "550.54.15"}, "cudaDriverVersion": {"version": "12.4.0"}}
    if profile:
        attrs["profile"] = {"string": profile}
    return {"name": name, "attributes": attrs, "capacity": {"memory": {"value": memory}}}


def _slice(node: str, devices: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node}-gpu"},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}, "devices": devices}}


SLICES = [
    _slice("dra-a100", [_device("gpu-0", "80Gi"), _device("gpu-1", "80Gi")]),
    _slice("dra-l4", [_device("gpu-0", "23034Mi", product="NVIDIA L4")]),
    _slice("dra-mig", [_device("gpu-0-mig-9-0-1", "9728Mi", "mig", "1g.10gb"),
                       _device("gpu-0-mig-9-1-1", "9728Mi", "mig", "1g.10gb"),
                       _device("gpu-0-mig-9-4-4", "40192Mi", "mig", "3g.40gb")]),
]


@pytest.fixture
def dra_nodes(cluster: ControlPlane) -> Iterator[None]:
    for dc in (_cls("gpu.nvidia.com", "gpu"), _cls("mig.nvidia.com", "mig")):
        cluster.request("POST", f"{RES}/deviceclasses", dc, ok=(201, 409))
    for name in NODES:
        cluster.create_gpu_node(name, gpus=0)
    for s in SLICES:
        cluster.request("POST", f"{RES}/resourceslices", s)
    try:
        yield
    finally:
        for s in SLICES:
            cluster.request("DELETE", f"{RES}/resourceslices/{s['metadata']['name']}", ok=(200, 202, 404))
        for name in NODES:
            cluster.delete_node(name)


def _template(name: str, device_class: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"spec": {"devices": {"requests": [
        {"name": "gpu", "exactly": {"deviceClassName": device_class}}]}}}
    if annotations:
        spec["metadata"] = {"annotations": annotations}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": name},
            "spec": spec}


def _pod_spec(template: str) -> dict[str, Any]:
    return {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
            "containers": [{"name": "server", "image": IMAGE,
                            "resources": {"requests": {"cpu": "100m", "memory": "1Gi"}, "claims": [{"name": "gpu"}]}}]}


def test_dra_inventory_admission_selector_and_allocation(
    cluster: ControlPlane, vramgate: Vramgate, dra_nodes: None, namespace: str, tmp_path: Path
) -> None:
    gate = vramgate
    gate.wait_ready()
    inv = gate.wait_inventory(set(NODES))
    assert {n: (v["vram_mib"], v["vram_source"]) for n, v in inv.items()} == {
        "dra-a100": (81920, "dra ResourceSlice"), "dra-l4": (23034, "dra ResourceSlice"),
        "dra-mig": (40192, "dra ResourceSlice")}
    assert {d["profile"] for d in inv["dra-mig"]["devices"]} == {"1g.10gb", "3g.40gb"}

    # 1. A Deployment whose claim no device can meet is denied at kubectl apply.
    deploy = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "llama-70b-dra"},
              "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "llama-70b-dra"}},
                       "template": {"metadata": {"labels": {"app": "llama-70b-dra"},
                                                 "annotations": {"vramgate.io/model": "llama-3-70b-instruct"}},
                                    "spec": _pod_spec("one-gpu")}}}
    path = tmp_path / "llama-70b-dra.yaml"
    path.write_text(yaml.safe_dump_all([_template("one-gpu", "gpu.nvidia.com"), deploy], sort_keys=False))
    r = cluster.kubectl("apply", "-n", namespace, "-f", str(path), check=False)
    assert r.returncode != 0, r.stdout
    assert re.search(r'admission webhook "validate\.vramgate\.io" denied the request: deployment/llama-70b-dra: '
                     r"needs [\d.]+ GiB VRAM per GPU \(.+\); the largest device its claims can match has 80 GiB "
                     r"\(dra-a100, NVIDIA A100-SXM4-80GB", r.stderr), r.stderr
    assert "resourceclaimtemplate.resource.k8s.io/one-gpu created" in r.stdout

    # 2. A fitting workload's template gets the memory selector on CREATE ...
    ann = {"vramgate.io/model": "llama-3-8b-instruct", "vramgate.io/context-length": "8192"}
    created = cluster.request("POST", f"{RES}/namespaces/{namespace}/resourceclaimtemplates",
                              _template("llama-8b-slice", "mig.nvidia.com", ann))
    selectors = created["spec"]["spec"]["devices"]["requests"][0]["exactly"].get("selectors") or []
    exprs = [s["cel"]["expression"] for s in selectors]
    assert len(exprs) == 1 and re.fullmatch(
        r'device\.capacity\["gpu\.nvidia\.com"\]\.memory\.compareTo\(quantity\("\d+(Mi|Gi)"\)\) >= 0', exprs[0]), exprs

    # ... and the real scheduler allocates a device that holds it: the 3g.40gb slice, not a 1g.10gb one.
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "llama-8b-mig", "annotations": ann}, "spec": _pod_spec("llama-8b-slice")}
    cluster.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod)
    node = cluster.wait_pod_bound("llama-8b-mig", namespace, timeout=60)
    assert node == "dra-mig"
    claims = cluster.request("GET", f"{RES}/namespaces/{namespace}/resourceclaims")["items"]
    mine = [c for c in claims if c["metadata"].get("annotations", {}).get("resource.kubernetes.io/pod-claim-name")
            == "gpu" or c["metadata"]["name"].startswith("llama-8b-mig-gpu")]
    assert len(mine) == 1, claims
    results = mine[0]["status"]["allocation"]["devices"]["results"]
    assert [(x["pool"], x["device"]) for x in results] == [("dra-mig", "gpu-0-mig-9-4-4")]
    # the claim stamped from the template carries the selector (and its creation was judged too)
    assert exprs[0] in [s["cel"]["expression"] for s in mine[0]["spec"]["devices"]["requests"][0]["exactly"]
                        ["selectors"]]


def test_gke_labelled_node_judged_with_its_vram(
    cluster: ControlPlane, vramgate: Vramgate, namespace: str, tmp_path: Path
) -> None:
    gate = vramgate
    gate.wait_ready()
    cluster.create_gpu_node("gke-l4", gpus=0, labels={"cloud.google.com/gke-accelerator": "nvidia-l4",
                                                       "cloud.google.com/gke-accelerator-count": "1"})
    try:
        cluster.set_node_gpu_status("gke-l4", gpus=1)
        inv = gate.wait_inventory({"gke-l4"})
        assert inv["gke-l4"]["vram_mib"] == 23034 and inv["gke-l4"]["vram_source"].startswith("gke-accelerator")

        def pod(name: str, model: str) -> dict[str, Any]:
            return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name,
                                                                    "annotations": {"vramgate.io/model": model}},
                    "spec": {"containers": [{"name": "server", "image": IMAGE, "resources": {
                        "requests": {"cpu": "100m", "memory": "1Gi"}, "limits": {"nvidia.com/gpu": "1"}}}]}}

        path = tmp_path / "pods.yaml"
        path.write_text(yaml.safe_dump(pod("fits", "llama-3-8b-instruct")))
        ok = cluster.kubectl("apply", "-n", namespace, "-f", str(path), check=False)
        assert ok.returncode == 0, ok.stderr
        path.write_text(yaml.safe_dump(pod("too-big", "qwen2.5-14b-instruct")))
        bad = cluster.kubectl("apply", "-n", namespace, "-f", str(path), check=False)
        assert bad.returncode != 0 and "the largest GPU in the cluster has 22.5 GiB (gke-l4" in bad.stderr, bad.stderr
    finally:
        cluster.delete_node("gke-l4")
