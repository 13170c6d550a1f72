"""Gaudi, TPU and Neuron (issue 38): their resources count as accelerators, their nodes are read from the labels their
device plugins, GKE and EKS write (memory and its source), a NeuronCore holds its share of a device, a TPU pod whose
slice spans hosts is never rejected on one host's chips, and `vramgate nodes` says all of it in text and JSON alike."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from webhook.cli.main import main
from webhook.cluster.accelerators import is_core_resource, node_vendor_gpus, topology_chips, vendor_of
from webhook.cluster.inventory import node_gpus
from webhook.cluster.snapshot import snapshot_from_nodes
from webhook.config import Config
from webhook.decide.mutation import mutate_pod
from webhook.decide.verdict import SPANS_HOSTS, judge
from webhook.models.catalog import builtin_catalog
from webhook.serve.extender.decide import Extender

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "accelerators"
GIB = 1024


def _items(name: str) -> list[dict[str, Any]]:
    return yaml.safe_load((FIX / name).read_text())["items"]


def _node(name: str, fixture: str) -> Any:
    return node_gpus(next(n for n in _items(fixture) if n["metadata"]["name"] == name), Config())


def _workload(name: str) -> dict[str, Any]:
    return next(d for d in yaml.safe_load_all((FIX / "workloads.yaml").read_text()) if d["metadata"]["name"] == name)


def test_each_vendor_resource_is_known() -> None:
    assert vendor_of("habana.ai/gaudi") == "gaudi"
    assert vendor_of("google.com/tpu") == "tpu"
    assert {vendor_of(r) for r in ("aws.amazon.com/neuron", "aws.amazon.com/neurondevice",
                                   "aws.amazon.com/neuroncore")} == {"neuron"}
    assert is_core_resource("aws.amazon.com/neuroncore") and not is_core_resource("aws.amazon.com/neuron")
    assert vendor_of("nvidia.com/gpu") is None


def test_gaudi_nodes_memory_from_the_product_or_its_pci_id() -> None:
    g3 = _node("gaudi3-0", "nodes-gaudi.yaml")
    assert (g3.vendor, g3.capacity, g3.vram_mib, g3.vram_source) == ("gaudi", 8, 128 * GIB, "gaudi product GAUDI3")
    g2 = _node("gaudi2-0", "nodes-gaudi.yaml")  # device.type GAUDI_HL2000M names no generation; id 1020 does
    assert (g2.vram_mib, g2.product, g2.allocatable, g2.health) == (96 * GIB, "GAUDI_HL2000M (GAUDI2)", 7, "degraded")
    dl1 = _node("ip-10-0-1-7.ec2.internal", "nodes-gaudi.yaml")  # Karpenter's labels, no device plugin yet
    assert (dl1.vendor, dl1.vram_mib, dl1.labelled_count, dl1.plugin_missing) == ("gaudi", 32 * GIB, 8, True)
    assert (dl1.product, dl1.vram_source) == ("GAUDI-HL-205", "gaudi instance-type dl1.24xlarge")
    # Karpenter's name alone (no instance type in the table) tells it too, and the source names the label.
    got = node_vendor_gpus({"karpenter.k8s.aws/instance-gpu-name": "gaudi-hl-205"}, {"habana.ai/gaudi": "8"}, {})
    assert got is not None and got.vram_source == "gaudi label karpenter.k8s.aws/instance-gpu-name=gaudi-hl-205"
    assert "habana.ai/gaudi" in dl1.health_reason and "nvidia.com/gpu" not in dl1.health_reason


def test_karpenter_nvidia_names_stay_nvidia() -> None:
    # Karpenter writes instance-gpu-name for NVIDIA and Habana alike: only a Gaudi name makes a Gaudi node.
    assert node_vendor_gpus({"karpenter.k8s.aws/instance-gpu-name": "l4"}, {}, {}) is None
    n = node_gpus({"metadata": {"name": "g6", "labels": {"karpenter.k8s.aws/instance-gpu-name": "l4",
                                                         "karpenter.k8s.aws/instance-gpu-manufacturer": "nvidia",
                                                         "node.kubernetes.io/instance-type": "g6.xlarge"}},
                   "status": {"capacity": {"nvidia.com/gpu": "1"}, "allocatable": {"nvidia.com/gpu": "1"}}}, Config())
    assert n.vendor == "nvidia" and n.vram_mib == 23034


def test_tpu_nodes_per_chip_memory_and_slice() -> None:
    single = _node("gke-tpu-v6e-8-0", "nodes-tpu.yaml")
    assert (single.vendor, single.capacity, single.vram_mib, single.topology) == ("tpu", 8, 32 * GIB, "2x4")
    multi = _node("gke-tpu-v6e-16-0", "nodes-tpu.yaml")
    assert (multi.capacity, multi.topology, topology_chips(multi.topology)) == (4, "4x4", 16)
    ironwood = _node("gke-tpu7x-4-0", "nodes-tpu.yaml")
    assert (ironwood.vram_mib, ironwood.vram_source) == (192 * GIB, "tpu product tpu7x")
    assert topology_chips("2x2x1") == 4 and topology_chips("v6e-16") == 0


@pytest.mark.parametrize(("accelerator", "gib"), [("tpu-v5-lite-podslice", 16), ("tpu-v5p-slice", 95),
                                                  ("tpu-v6e-slice", 32), ("tpu7x", 192), ("tpu-v4-podslice", 32)])
def test_tpu_generations(accelerator: str, gib: int) -> None:
    got = node_vendor_gpus({"cloud.google.com/gke-tpu-accelerator": accelerator}, {"google.com/tpu": "4"}, {})
    assert got is not None and got.vram_mib == gib * GIB


def test_neuron_devices_and_cores() -> None:
    inf2 = _node("ip-10-0-2-11.ec2.internal", "nodes-neuron.yaml")
    assert (inf2.vendor, inf2.capacity, inf2.vram_mib) == ("neuron", 12, 32 * GIB)
    assert inf2.cores is not None and (inf2.cores.capacity, inf2.cores.vram_mib) == (24, 16 * GIB)
    trn2 = _node("ip-10-0-2-12.ec2.internal", "nodes-neuron.yaml")  # 64 cores over 16 devices: LNC=2
    assert trn2.vram_mib == 96 * GIB and trn2.cores is not None and trn2.cores.vram_mib == 24 * GIB
    bare = _node("ip-10-0-2-13.ec2.internal", "nodes-neuron.yaml")  # instance type only, plugin not running
    assert (bare.vram_mib, bare.labelled_count, bare.plugin_missing) == (32 * GIB, 6, True)
    assert bare.vram_source == "neuron instance-type inf2.24xlarge"
    assert bare.cores is not None and bare.cores.labelled_count == 12


def _check(capsys: pytest.CaptureFixture[str], nodes: Path, *names: str, tmp_path: Path) -> tuple[int, str]:
    docs = [_workload(n) for n in names]
    f = tmp_path / "w.yaml"
    f.write_text(yaml.safe_dump_all(docs))
    rc = main(["check", "-f", str(f), "--nodes", str(nodes)])
    return rc, capsys.readouterr().out


def test_gaudi_verdicts_say_the_generic_model(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, out = _check(capsys, FIX / "nodes-gaudi.yaml", "llama8b-gaudi", tmp_path=tmp_path)
    assert rc == 0 and "ADMIT   deployment/llama8b-gaudi" in out
    assert "vLLM on Gaudi" in out and "generic model" in out
    rc, out = _check(capsys, FIX / "nodes-gaudi.yaml", "llama70b-one-gaudi", tmp_path=tmp_path)
    assert rc == 1 and "REJECT  deployment/llama70b-one-gaudi" in out and "has 128 GiB (gaudi3-0, GAUDI3" in out


def test_neuron_cores_are_judged_at_a_cores_share(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, out = _check(capsys, FIX / "nodes-neuron.yaml", "llama8b-inf2-cores", tmp_path=tmp_path)
    assert rc == 0 and "ADMIT   deployment/llama8b-inf2-cores" in out and "vLLM on Neuron" in out
    rc, out = _check(capsys, FIX / "nodes-neuron.yaml", "llama70b-two-neuroncores", tmp_path=tmp_path)
    # A trn2 core holds 24 GiB (96 GiB over 4 logical cores), the largest core in the cluster.
    assert rc == 1 and "has 24 GiB (ip-10-0-2-12.ec2.internal, TRAINIUM2 core" in out


def _tpu_inventory(tmp_path: Path, *names: str) -> Path:
    items = [n for n in _items("nodes-tpu.yaml") if n["metadata"]["name"] in names]
    f = tmp_path / "tpu.yaml"
    f.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    return f


def _tpu_pod(topology: str | None, chips: int = 4) -> dict[str, Any]:
    sel = {"cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice"}
    if topology:
        sel["cloud.google.com/gke-tpu-topology"] = topology
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "llama70b", "namespace": "serve"},
            "spec": {"nodeSelector": sel, "containers": [{
                "name": "vllm-tpu", "image": "vllm/vllm-tpu:latest",
                "args": ["--model=meta-llama/Llama-3.1-70B-Instruct", "--max-model-len=4096",
                         f"--tensor-parallel-size={chips}"],
                "resources": {"limits": {"google.com/tpu": str(chips)}}}]}}


def _judge(pod: dict[str, Any], inventory: Path) -> Any:
    nodes = yaml.safe_load(inventory.read_text())["items"]
    return judge(pod, snapshot_from_nodes(nodes, Config()), Config(), builtin_catalog())


def test_tpu_multi_host_slice_is_admitted_with_a_warning(tmp_path: Path) -> None:
    # 70B bf16 on one host's 4 chips is ~35 GiB a chip, over a v6e chip's 32; on a 4x4 slice it spans 16 chips.
    inv = _tpu_inventory(tmp_path, "gke-tpu-v6e-16-0", "gke-tpu-v6e-16-1", "gke-tpu-v6e-8-0")
    j = _judge(_tpu_pod("4x4"), inv)
    assert j.allowed and j.code == SPANS_HOSTS
    said = " ".join(j.warnings)
    assert "not rejected" in said and "4x4 has 16 chips" in said and "4 hosts" in said
    # No VRAM affinity is written for it: one host's chips would never satisfy it.
    mutated, _ = mutate_pod(_tpu_pod("4x4"), j, Config())
    assert "affinity" not in mutated["spec"]


def test_tpu_unknown_topology_is_admitted_where_slices_span_hosts(tmp_path: Path) -> None:
    inv = _tpu_inventory(tmp_path, "gke-tpu-v6e-16-0", "gke-tpu-v6e-16-1", "gke-tpu-v6e-8-0")
    j = _judge(_tpu_pod(None), inv)
    assert j.allowed and j.code == SPANS_HOSTS and "selects no slice topology" in " ".join(j.warnings)


def test_tpu_single_host_is_judged_on_its_chips(tmp_path: Path) -> None:
    # The pod selects a one-host 2x2 slice (4 chips, all its own): 35 GiB a chip cannot fit a v6e chip.
    inv = _tpu_inventory(tmp_path, "gke-tpu-v6e-16-0", "gke-tpu-v6e-8-0")
    j = _judge(_tpu_pod("2x2"), inv)
    assert not j.allowed and j.code == "VRAMTooSmall" and "32 GiB" in j.message
    # No topology selected, but every TPU node is a one-host slice: judged on the chips as well.
    j = _judge(_tpu_pod(None), _tpu_inventory(tmp_path, "gke-tpu-v6e-8-0"))
    assert not j.allowed
    # On 8 chips of one 2x4 host it fits (the published GKE shape).
    j = _judge(_tpu_pod("2x4", chips=8), _tpu_inventory(tmp_path, "gke-tpu-v6e-8-0"))
    assert j.allowed and j.code == "fits" and any("vLLM TPU" in w for w in j.warnings)


def _table(out: str) -> list[dict[str, str]]:
    header, *rows = out.splitlines()
    names = header.split()
    starts = [header.index(n) for n in names]
    bounds = list(zip(starts, [*starts[1:], None], strict=True))
    return [{n: row[a:b].strip() for n, (a, b) in zip(names, bounds, strict=True)} for row in rows]


@pytest.mark.parametrize("fixture", ["nodes-gaudi.yaml", "nodes-tpu.yaml", "nodes-neuron.yaml"])
def test_nodes_text_and_json_agree(capsys: pytest.CaptureFixture[str], fixture: str) -> None:
    assert main(["nodes", "--nodes", str(FIX / fixture)]) == 0
    text = _table(capsys.readouterr().out)
    assert main(["nodes", "--nodes", str(FIX / fixture), "-o", "json"]) == 0
    records = json.loads(capsys.readouterr().out)["nodes"]
    assert [r["name"] for r in records] == [t["NAME"] for t in text] and len(records) == len(_items(fixture))
    for r, t in zip(records, text, strict=True):
        assert t["VENDOR"] == r["vendor"] != "nvidia"
        assert t["SOURCE"] == r["vram_source"] and t["PRODUCT"] == r["product"]
        assert t["VRAM/GPU"] == f"{r['vram_mib'] / 1024:.1f}Gi" and r["vram_mib"] > 0
        assert t["GPUS"] == f"{r['allocatable']}/{r['gpus']}" and t["HEALTH"] == r["health"]
        if r["topology"]:
            assert f"slice {r['topology']}" in t["LAYOUT"]
        if r["cores"] and r["cores"]["count"]:
            assert f"{r['cores']['count']} cores" in t["LAYOUT"]


def test_generic_vendors_are_priced_by_the_generic_model(tmp_path: Path) -> None:
    # vLLM's own plan (profile run, CUDA graphs) is not applied on a TPU; the generic arithmetic is, and only the
    # weights and KV cache are grounds to reject on.
    j = _judge(_tpu_pod("2x4", chips=8), _tpu_inventory(tmp_path, "gke-tpu-v6e-8-0"))
    d = j.demand
    assert d is not None and d.vendor == "tpu" and d.estimate is not None and d.estimate.engine == "generic"
    assert ("memory model", "generic (no vllm plan on tpu)") in d.sources
    per_gpu = (d.estimate.weights_mib + d.estimate.kv_cache_mib) / d.estimate.request.gpus
    assert d.min_per_gpu_mib is not None and d.per_gpu_mib is not None
    assert abs(d.min_per_gpu_mib - math.ceil(per_gpu)) <= 1 and d.min_per_gpu_mib < d.per_gpu_mib


def test_an_nvidia_pod_keeps_the_engine_plan() -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "d"},
           "spec": {"containers": [{"name": "c", "image": "vllm/vllm-openai:v0.8.5",
                                    "args": ["--model", "meta-llama/Llama-3.1-8B-Instruct"],
                                    "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}
    nodes = yaml.safe_load((FIX.parents[0] / "amd" / "nodes-amd.yaml").read_text())["items"]
    j = judge(pod, snapshot_from_nodes(nodes, Config()), Config(), builtin_catalog())
    assert j.demand is not None and j.demand.estimate is not None and j.demand.estimate.engine != "generic"
    assert not any("generic model" in w for w in j.warnings)


@pytest.mark.parametrize(("instance_type", "gpus", "mib"), [
    ("p6-b300.48xlarge", 8, 275040), ("p6e-gb200.36xlarge", 4, 189471), ("a4x-maxgpu-4g-metal", 4, 284672),
    ("Standard_ND128isr_GB300_v6", 4, 284672), ("Standard_ND128isr_NDR_GB200_v6", 4, 189471),
    ("Standard_ND96isr_H200_v5", 8, 143771),
])
def test_2025_nvidia_instance_types(instance_type: str, gpus: int, mib: int) -> None:
    n = node_gpus({"metadata": {"name": "n", "labels": {"node.kubernetes.io/instance-type": instance_type}},
                   "status": {"capacity": {"nvidia.com/gpu": str(gpus)},
                              "allocatable": {"nvidia.com/gpu": str(gpus)}}}, Config())
    assert (n.vendor, n.vram_mib, n.labelled_count, n.vram_source) == ("nvidia", mib, gpus,
                                                                       f"instance-type {instance_type}")


@pytest.mark.parametrize(("labels", "mib"), [
    ({"cloud.google.com/gke-accelerator": "nvidia-gb300"}, 284672),
    ({"karpenter.k8s.aws/instance-gpu-name": "b300"}, 275040),
])
def test_2025_nvidia_cloud_labels(labels: dict[str, str], mib: int) -> None:
    n = node_gpus({"metadata": {"name": "n", "labels": labels},
                   "status": {"capacity": {"nvidia.com/gpu": "4"}, "allocatable": {"nvidia.com/gpu": "4"}}}, Config())
    assert n.vram_mib == mib


def test_the_extender_keeps_a_multi_host_slices_nodes(tmp_path: Path) -> None:
    def passed(topology: str | None, names: list[str]) -> list[str]:
        nodes = [n for n in _items("nodes-tpu.yaml") if n["metadata"]["name"] in names]
        snap = snapshot_from_nodes(nodes, Config(), {}, revision=1)
        ext = Extender(Config(), builtin_catalog(), lambda: snap)
        body = _tpu_pod(topology)
        del body["apiVersion"], body["kind"]
        out = orjson.loads(ext.filter(orjson.dumps({"Pod": body, "NodeNames": names})))
        assert out["Error"] == ""
        return sorted(out["NodeNames"] or [])

    # On a 4x4 slice each host's 4 chips hold a quarter of what the model needs: its hosts are not failed for it.
    assert passed("4x4", ["gke-tpu-v6e-16-0", "gke-tpu-v6e-16-1"]) == ["gke-tpu-v6e-16-0", "gke-tpu-v6e-16-1"]
    # On one-host slices the chips are judged: 35 GiB a chip does not fit a v6e chip's 32.
    assert passed(None, ["gke-tpu-v6e-8-0"]) == []


def test_a_declared_need_carries_no_generic_model_warning(tmp_path: Path) -> None:
    pod = _tpu_pod("2x4", chips=8)
    pod["metadata"]["annotations"] = {"vramgate.io/vram": "160Gi"}
    j = _judge(pod, _tpu_inventory(tmp_path, "gke-tpu-v6e-8-0"))
    assert j.allowed and j.demand is not None and j.demand.explicit_vram_mib == 160 * 1024
    assert not any("generic model" in w for w in j.warnings)


def test_a_tpu_topology_annotation_is_read_as_the_slice(tmp_path: Path) -> None:
    # Only one-host nodes in view, but the pod asks a 4x4x4 super-slice by annotation: not judged on one host.
    pod = _tpu_pod(None)
    pod["metadata"]["annotations"] = {"cloud.google.com/gke-tpu-slice-topology": "4x4x4"}
    j = _judge(pod, _tpu_inventory(tmp_path, "gke-tpu-v6e-8-0"))
    assert j.allowed and j.code == SPANS_HOSTS and "4x4x4 has 64 chips" in " ".join(j.warnings)


def test_a_slice_over_hosts_is_priced_over_its_chips(tmp_path: Path) -> None:
    # A 2x4 slice on hosts of 4 chips: the 2 pods run one program over 8 chips (GKE's multi-host JobSets).
    inv = _tpu_inventory(tmp_path, "gke-tpu-v6e-16-0", "gke-tpu-v6e-16-1")
    pod = _tpu_pod("2x4")
    pod["spec"]["containers"][0]["args"][-1] = "--tensor-parallel-size=8"
    j = _judge(pod, inv)
    assert j.allowed and j.code == "fits" and j.demand is not None and j.demand.group_size == 2
    assert ("group", "slice topology 2x4: 8 chips over 2 pods of 4") in j.demand.sources
    # 405B over those 8 chips is ~100 GiB a chip: the whole slice is priced, so it is rejected, not waved through.
    pod["spec"]["containers"][0]["args"][0] = "--model=meta-llama/Llama-3.1-405B-Instruct"
    j = _judge(pod, inv)
    assert not j.allowed and j.code == "VRAMTooSmall"


def test_another_vendors_nodes_are_named_not_a_cuda_driver(tmp_path: Path) -> None:
    # A Gaudi pod where only TPUs are: rejected for want of its resource (it once read "needs CUDA ?").
    j = _judge(_workload("llama8b-gaudi"), FIX / "nodes-tpu.yaml")
    assert not j.allowed and j.code == "NoGPUs" and "CUDA" not in j.message
    assert "asks habana.ai/gaudi (gaudi), and no node in the cluster offers it" in j.message and "tpu's" in j.message
    # In a cluster of both, a pod is judged on its own vendor's nodes: the other's are no reason, nor a measure.
    items = [*_items("nodes-tpu.yaml"), *_items("nodes-gaudi.yaml")]
    mixed = tmp_path / "mixed.yaml"
    mixed.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    j = _judge(_workload("llama70b-one-gaudi"), mixed)
    assert not j.allowed and j.code == "VRAMTooSmall" and "has 128 GiB (gaudi3-0, GAUDI3" in j.message
