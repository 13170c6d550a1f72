"""Smoke tests for the e2e harness itself: the control plane is the pinned release, GPU
nodes can be faked through the API, and the real kube-scheduler binds pods to them."""

from __future__ import annotations

import http.server
import json
import threading
from typing import Any, ClassVar

import pytest

from tests.e2e.harness import ETCD_VERSION, GPU_RESOURCE, KUBE_VERSION, ControlPlane

pytestmark = pytest.mark.e2e


def test_server_version_is_pinned(cluster: ControlPlane) -> None:
    v = cluster.request("GET", "/version")
    assert v["gitVersion"] == KUBE_VERSION
    out = json.loads(cluster.kubectl("version", "-o", "json").stdout)
    assert out["serverVersion"]["gitVersion"] == KUBE_VERSION
    assert out["clientVersion"]["gitVersion"] == KUBE_VERSION
    etcd = cluster.kubectl("get", "--raw", "/readyz/etcd").stdout
    assert etcd.strip() == "ok"
    assert ETCD_VERSION.startswith("v3.")


def test_gpu_node_shows_capacity(cluster: ControlPlane, gpu_nodes) -> None:
    gpu_nodes(
        "e2e-h100-a",
        gpus=8,
        mem_mib=81920,
        product="NVIDIA-H100-80GB-HBM3",
        driver_major=550,
        allocatable_gpus=7,
        labels={"pool": "h100"},
    )
    node = cluster.get_node("e2e-h100-a")
    labels = node["metadata"]["labels"]
    assert labels["nvidia.com/gpu.memory"] == "81920"
    assert labels["nvidia.com/gpu.count"] == "8"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert labels["nvidia.com/cuda.driver-version.major"] == "550"
    assert labels["pool"] == "h100"
    assert node["status"]["capacity"][GPU_RESOURCE] == "8"
    assert node["status"]["allocatable"][GPU_RESOURCE] == "7"
    assert not node["spec"].get("taints")
    ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}
    assert ready["Ready"] == "True"

    # kubectl sees the same thing.
    cap = cluster.kubectl("get", "node", "e2e-h100-a", "-o", "jsonpath={.status.capacity.nvidia\\.com/gpu}").stdout
    assert cap == "8"

    # A device going bad: allocatable drops, a fault condition appears.
    cluster.set_node_gpu_status(
        "e2e-h100-a",
        gpus=8,
        allocatable_gpus=6,
        conditions=[{"type": "GpuXidWatch", "status": "True", "reason": "XID79"}],
    )
    node = cluster.get_node("e2e-h100-a")
    assert node["status"]["allocatable"][GPU_RESOURCE] == "6"
    conds = {c["type"]: c["status"] for c in node["status"]["conditions"]}
    assert conds["GpuXidWatch"] == "True"
    assert conds["Ready"] == "True"


def test_plain_pod_is_bound_by_scheduler(cluster: ControlPlane, gpu_nodes, namespace: str) -> None:
    gpu_nodes("e2e-cpu-a", gpus=0)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "plain"},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                }
            ]
        },
    }
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(pod))
    node = cluster.wait_pod_bound("plain", namespace, timeout=30)
    assert node == "e2e-cpu-a"


def test_gpu_pod_lands_on_node_with_free_gpus(cluster: ControlPlane, gpu_nodes, namespace: str) -> None:
    # Only one node has allocatable GPUs: the default scheduler must pick it.
    gpu_nodes("e2e-l4-full", gpus=4, mem_mib=23034, product="NVIDIA-L4", allocatable_gpus=0)
    gpu_nodes("e2e-l4-ok", gpus=4, mem_mib=23034, product="NVIDIA-L4")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "gpu"},
        "spec": {
            "containers": [
                {"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": {"limits": {GPU_RESOURCE: "2"}}}
            ]
        },
    }
    cluster.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod)
    assert cluster.wait_pod_bound("gpu", namespace, timeout=30) == "e2e-l4-ok"


class _Extender(http.server.BaseHTTPRequestHandler):
    """A scheduler extender that keeps only nodes named in ``allowed``; records calls."""

    allowed: ClassVar[set[str]] = set()
    calls: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        args = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).calls.append({"path": self.path, "args": args})
        names = args.get("NodeNames") or []
        result = {
            "NodeNames": [n for n in names if n in self.allowed],
            "FailedNodes": {n: "not allowed by test extender" for n in names if n not in self.allowed},
            "Error": "",
        }
        body = json.dumps(result).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_scheduler_calls_extender(cluster: ControlPlane, gpu_nodes, namespace: str) -> None:
    gpu_nodes("e2e-ext-a", gpus=0)
    gpu_nodes("e2e-ext-b", gpus=0)
    _Extender.allowed, _Extender.calls = {"e2e-ext-b"}, []
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Extender)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    extender = {
        "urlPrefix": f"http://127.0.0.1:{srv.server_address[1]}/scheduler",
        "filterVerb": "filter",
        "nodeCacheCapable": True,
        "weight": 1,
    }
    try:
        with cluster.scheduler_with_extenders([extender]):
            assert cluster.scheduler_extenders == [extender]
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "ext"},
                "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
            }
            cluster.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod)
            assert cluster.wait_pod_bound("ext", namespace) == "e2e-ext-b"
    finally:
        srv.shutdown()
    assert cluster.scheduler_extenders is None
    assert _Extender.calls and _Extender.calls[0]["path"] == "/scheduler/filter"
    assert set(_Extender.calls[0]["args"]["NodeNames"]) >= {"e2e-ext-a", "e2e-ext-b"}
