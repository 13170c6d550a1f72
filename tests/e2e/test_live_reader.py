"""The CLI's live inventory against a real API server is the service's: `vramgate nodes --kubeconfig`, with
``labels.gpu_resource: nvidia.com/gpu.shared`` in its config, counts the GPUs held by a pod bound to a node
requesting nvidia.com/gpu.shared (and not one requesting nvidia.com/gpu) exactly as the service's watched
inventory (``KubeInventory``) does; and ``list_once`` over the same objects is the service's Snapshot."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.harness import REPO_ROOT, ControlPlane
from webhook.cluster.snapshot import Snapshot
from webhook.config import load_config
from webhook.kube.nodecache import KubeInventory, live_snapshot

pytestmark = pytest.mark.e2e

SHARED = "nvidia.com/gpu.shared"


def shared_node(cluster: ControlPlane, gpu_nodes: Callable[..., Any], name: str, gpus: int) -> None:
    """A GPU node whose device plugin renames its time-sliced GPUs (renameByDefault): nvidia.com/gpu.shared only."""
    gpu_nodes(name, gpus=gpus, mem_mib=24576, product="NVIDIA-L4")
    cluster.request("PATCH", f"/api/v1/nodes/{name}/status", {"status": {
        "capacity": {"nvidia.com/gpu": None, SHARED: str(gpus)},
        "allocatable": {"nvidia.com/gpu": None, SHARED: str(gpus)},
    }}, content_type="application/strategic-merge-patch+json")


def bound_pod(cluster: ControlPlane, namespace: str, name: str, node: str, resource: str, gpus: int) -> None:
    cluster.request("POST", f"/api/v1/namespaces/{namespace}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {
            "nodeName": node,  # bound directly: no kubelet will ever run it
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                            "resources": {"limits": {resource: str(gpus)}}}],
        },
    })


def service_snapshot(config_path: Path, kubeconfig: str) -> Snapshot:
    """What `vramgate serve` holds: its KubeInventory (list, then watch) once synced."""
    inv = KubeInventory(load_config(str(config_path)), kubeconfig=kubeconfig)

    async def synced() -> Snapshot:
        await inv.start()
        try:
            assert await asyncio.to_thread(inv.wait_synced, 30), "the service's inventory did not sync"
            return inv.snapshot()
        finally:
            await inv.stop()

    return asyncio.run(synced())


def nodes_table(stdout: str) -> dict[str, dict[str, str]]:
    """`vramgate nodes` rows by name, cut at the header's column starts (HEALTH and REASON may be blank)."""
    header, *rows = stdout.splitlines()
    names = header.split()
    starts = [header.index(n) for n in names]
    bounds = list(zip(starts, [*starts[1:], None], strict=True))
    out = {}
    for row in rows:
        cells = {n: row[a:b].strip() for n, (a, b) in zip(names, bounds, strict=True)}
        out[cells["NAME"]] = cells
    return out


def test_nodes_counts_the_configured_gpu_resource_as_the_service_does(
    cluster: ControlPlane, namespace: str, gpu_nodes: Callable[..., Any], tmp_path: Path,
) -> None:
    shared_node(cluster, gpu_nodes, "e2e-live-shared-a", gpus=4)
    shared_node(cluster, gpu_nodes, "e2e-live-shared-b", gpus=2)
    cluster.request("PATCH", f"/api/v1/namespaces/{namespace}",
                    {"metadata": {"labels": {"vramgate.io/enforcement": "warn"}}},
                    content_type="application/merge-patch+json")
    bound_pod(cluster, namespace, "shared-3", "e2e-live-shared-a", SHARED, 3)
    bound_pod(cluster, namespace, "plain-1", "e2e-live-shared-b", "nvidia.com/gpu", 1)  # not the configured name
    config_path = tmp_path / "config.yaml"
    config_path.write_text(yaml.safe_dump({"labels": {"gpu_resource": SHARED}}))
    kubeconfig = str(cluster.kubeconfig)

    out = subprocess.run([sys.executable, "-m", "webhook.cli", "--config", str(config_path), "nodes",
                          "--kubeconfig", kubeconfig], capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    assert out.returncode == 0, out.stderr
    table = nodes_table(out.stdout)
    service = service_snapshot(config_path, kubeconfig)
    for name, gpus, free in (("e2e-live-shared-a", 4, 1), ("e2e-live-shared-b", 2, 2)):
        assert table[name]["GPUS"] == f"{gpus}/{gpus}" and table[name]["PRODUCT"] == "NVIDIA-L4"
        assert table[name]["FREE"] == str(service.free_gpus(name)) == str(free), (name, out.stdout)

    # The CLI's one list and the service's list+watch, over the same objects: the same inventory.
    cli = live_snapshot(load_config(str(config_path)), kubeconfig)
    mine = {"e2e-live-shared-a", "e2e-live-shared-b"}
    assert {n: cli.free_gpus(n) for n in mine} == {n: service.free_gpus(n) for n in mine}
    assert {n: cli.nodes[n].allocatable for n in mine} == {n: service.nodes[n].allocatable for n in mine}
    assert cli.enforcement.get(namespace) == service.enforcement.get(namespace) == "warn"
    assert cli.priority_classes == service.priority_classes and "system-node-critical" in cli.priority_classes
