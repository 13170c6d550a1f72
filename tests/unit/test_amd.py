"""AMD Instinct GPUs (issue 38): amd.com/gpu counts as GPUs, AMD nodes are GPU nodes with the labeller's VRAM or
the product table's, a partition mode splits a GPU, and a pod lands only on its vendor's nodes."""

from __future__ import annotations

from pathlib import Path

import yaml

from webhook.cli.main import main
from webhook.cluster.accelerators import node_vendor_gpus, vendor_of
from webhook.cluster.inventory import node_gpus
from webhook.config import Config

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "amd"


def _nodes(name: str) -> list[dict]:
    return yaml.safe_load((FIX / name).read_text())["items"]


def _node(labels: dict[str, str], gpus: int, name: str = "n") -> dict:
    return {"metadata": {"name": name, "labels": labels},
            "status": {"capacity": {"amd.com/gpu": str(gpus)}, "allocatable": {"amd.com/gpu": str(gpus)}}}


def test_amd_resource_is_a_vendor() -> None:
    assert vendor_of("amd.com/gpu") == "amd"
    assert vendor_of("nvidia.com/gpu") is None


def test_labeller_vram_reads_as_gib() -> None:
    n = node_gpus(_nodes("nodes-amd.yaml")[0], Config())
    assert (n.vendor, n.capacity, n.allocatable, n.vram_mib) == ("amd", 8, 8, 192 * 1024)
    assert n.is_gpu_node and n.product == "AMD_Instinct_MI300X" and n.health == "healthy"
    assert n.partition == "spx_nps1"


def test_beta_counter_form_reads() -> None:
    n = node_gpus(_nodes("nodes-amd.yaml")[1], Config())
    assert (n.vendor, n.vram_mib, n.product) == ("amd", 256 * 1024, "AMD_Instinct_MI325X")


def test_product_table_when_no_vram_label() -> None:
    for product, gib in (("AMD_Instinct_MI300X", 192), ("AMD_Instinct_MI325X", 256), ("AMD_Instinct_MI355X", 288),
                         ("AMD_Instinct_MI250X", 64), ("AMD_Instinct_MI210", 64)):
        n = node_gpus(_node({"amd.com/gpu.product-name": product}, 8), Config())
        assert n.vram_mib == gib * 1024, product
        assert n.vram_source.startswith("amd product")


def test_cpx_splits_a_gpu_eight_ways() -> None:
    n = node_gpus(_nodes("nodes-cpx.yaml")[0], Config())
    assert (n.capacity, n.vram_mib, n.partition) == (64, 24 * 1024, "cpx_nps4")
    # A labeller vram already per partition stays.
    got = node_vendor_gpus({"amd.com/gpu.product-name": "AMD_Instinct_MI300X", "amd.com/gpu.vram": "24G",
                            "amd.com/gpu.compute-memory-partition": "cpx_nps1"}, {"amd.com/gpu": "64"}, {})
    assert got is not None and got.vram_mib == 24 * 1024


def test_nvidia_node_is_still_nvidia() -> None:
    node = {"metadata": {"name": "h", "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                                                 "nvidia.com/gpu.memory": "81559"}},
            "status": {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "8"}}}
    n = node_gpus(node, Config())
    assert (n.vendor, n.capacity, n.vram_mib) == ("nvidia", 8, 81559)


def _check(capsys, workloads: Path, nodes: Path) -> tuple[int, str]:
    rc = main(["check", "-f", str(workloads), "--nodes", str(nodes)])
    return rc, capsys.readouterr().out


def test_deepseek_v3_on_8_mi300x_admitted(capsys) -> None:
    rc, out = _check(capsys, FIX / "workloads.yaml", FIX / "nodes-amd.yaml")
    assert rc == 0, out
    assert "ADMIT   deployment/deepseek-v3-mi300x" in out


def test_70b_on_a_cpx_partition_rejected(capsys) -> None:
    rc, out = _check(capsys, FIX / "workloads.yaml", FIX / "nodes-cpx.yaml")
    assert rc == 1
    line = next(x for x in out.splitlines() if "llama-70b-one-mi300x" in x)
    assert line.startswith("REJECT") and "mi300x-cpx-0" in line and "MI300X" in line and "24 GiB" in line


def test_vendors_do_not_mix(tmp_path: Path, capsys) -> None:
    nvidia = {"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Node",
         "metadata": {"name": "h100-0", "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                                                   "nvidia.com/gpu.memory": "81559"}},
         "status": {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "8"}}}]}
    inv = tmp_path / "nodes.yaml"
    inv.write_text(yaml.safe_dump(nvidia))
    # An amd.com/gpu pod on an NVIDIA-only cluster: no node offers its GPUs.
    rc, out = _check(capsys, FIX / "workloads.yaml", inv)
    assert rc == 1 and "no GPU requested" not in out
    # An nvidia.com/gpu pod on an AMD-only cluster: the same.
    pod = tmp_path / "pod.yaml"
    pod.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "d"},
                                   "spec": {"containers": [{"name": "c", "image": "vllm/vllm-openai:v0.8.5",
                                                            "args": ["--model", "meta-llama/Llama-3.1-8B-Instruct"],
                                                            "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}))
    rc, out = _check(capsys, pod, FIX / "nodes-amd.yaml")
    assert rc == 1, out
