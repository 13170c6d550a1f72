"""Nodes labelled only by a managed cloud, over the wire: /inventory names the source, unknown VRAM admits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from webhook.cluster.snapshot import snapshot_from_nodes
from webhook.config import Config

from .conftest import use
from .helpers import Service, gpu_container, workload

CANON = Path("/work/shared/canon")
BIG = {"vramgate.io/model-params": "70B", "vramgate.io/precision": "bf16", "vramgate.io/context-length": "4096"}


def gke_l4() -> list[dict[str, Any]]:
    return list(yaml.safe_load((CANON / "nodes-gke-l4.yaml").read_text())["items"])


def aks_unknown(name: str = "aks-0") -> dict[str, Any]:
    cap = {"cpu": "96", "nvidia.com/gpu": "8"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.azure.com/accelerator": "nvidia",
                                                  "node.kubernetes.io/instance-type": "Standard_NX9_v9"}},
            "status": {"capacity": cap, "allocatable": dict(cap)}}


def test_inventory_json_names_each_nodes_vram_source(svc: Service) -> None:
    use(svc, snapshot=snapshot_from_nodes([*gke_l4(), aks_unknown()], Config()))
    r = svc.client.get("/inventory")
    assert r.status_code == 200
    nodes = {n["name"]: n for n in r.json()["nodes"]}
    assert nodes["gke-l4-pool-0"]["vram_source"] == "gke-accelerator nvidia-l4"
    assert nodes["gke-l4-pool-0"]["vram_mib"] == 23034 and nodes["gke-l4-pool-0"]["product"] == "NVIDIA-L4"
    assert nodes["aks-0"]["vram_source"] == "unknown" and nodes["aks-0"]["vram_mib"] == 0


def test_cloud_labelled_l4_is_judged_with_its_vram(svc: Service) -> None:
    use(svc, snapshot=snapshot_from_nodes(gke_l4(), Config()))
    big = svc.validate(workload("Deployment", gpu_container(memory="512Gi"), annotations=BIG, name="big"))
    assert big["allowed"] is False
    assert "the largest GPU in the cluster has 22.5 GiB (gke-l4-pool-0, NVIDIA-L4" in big["status"]["message"]


def test_unknown_vram_admits_with_a_warning(svc: Service) -> None:
    use(svc, snapshot=snapshot_from_nodes([aks_unknown()], Config()))
    resp = svc.validate(workload("Deployment", gpu_container(memory="512Gi"), annotations=BIG, name="big"))
    assert resp["allowed"] is True
    text = " ".join(resp.get("warnings", []))
    assert "not checked" in text and "aks-0" in text and "Standard_NX9_v9 not in vramgate's GPU table" in text


def test_inventory_json_names_other_vendors_nodes(svc: Service) -> None:
    fix = Path(__file__).resolve().parents[1] / "fixtures" / "accelerators"
    items = [n for f in ("nodes-tpu.yaml", "nodes-neuron.yaml", "nodes-gaudi.yaml")
             for n in yaml.safe_load((fix / f).read_text())["items"]]
    use(svc, snapshot=snapshot_from_nodes(items, Config()))
    nodes = {n["name"]: n for n in svc.client.get("/inventory").json()["nodes"]}
    assert len(nodes) == len(items)
    tpu = nodes["gke-tpu-v6e-16-0"]
    assert (tpu["vendor"], tpu["vram_mib"], tpu["topology"], tpu["vram_source"]) == (
        "tpu", 32768, "4x4", "tpu product tpu-v6e-slice")
    inf2 = nodes["ip-10-0-2-11.ec2.internal"]
    assert inf2["vendor"] == "neuron" and inf2["cores"] == {
        "resource": "aws.amazon.com/neuroncore", "count": 24, "allocatable": 24, "vram_mib": 16384}
    assert nodes["gaudi3-0"]["vendor"] == "gaudi" and nodes["gaudi3-0"]["vram_mib"] == 131072
