"""The VRAM node affinity for Gaudi, TPU, Neuron and AMD pods (issue 38): nodes the controller has not labelled stay
open unless their machine type is too small, a provisioner can make a node of a machine type that holds the pod, and
re-applying the mutation changes nothing."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from webhook.cluster.accelerators import instance_types_by_fit, node_vendor_gpus, vendor_named
from webhook.cluster.inventory import node_gpus
from webhook.cluster.snapshot import snapshot_from_nodes
from webhook.config import Config
from webhook.decide.mutation import mutate_pod
from webhook.decide.selectors import selects
from webhook.decide.verdict import judge
from webhook.models.catalog import builtin_catalog

FIX = Path(__file__).resolve().parents[1] / "fixtures"
CFG = Config()
ND_MI300X = "Standard_ND96isr_MI300X_v5"


def _items(path: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = yaml.safe_load((FIX / path).read_text())["items"]
    return items


def _pod(resource: str, args: list[str], gpus: int = 1, image: str = "vllm/vllm-openai:v0.10.1") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "s", "uid": "u"},
            "spec": {"containers": [{"name": "engine", "image": image, "command": ["vllm", "serve", *args],
                                     "resources": {"limits": {resource: gpus}}}]}}


def _mutated(pod: dict[str, Any], nodes: list[dict[str, Any]], config: Config = CFG) -> dict[str, Any]:
    j = judge(pod, snapshot_from_nodes(nodes, config), config, builtin_catalog())
    assert j.allowed, j.message
    out, _ = mutate_pod(pod, j, config)
    again, _ = mutate_pod(copy.deepcopy(out), judge(out, snapshot_from_nodes(nodes, config), config,
                                                    builtin_catalog()), config)
    assert again == out  # reinvocation stacks nothing
    return out


def _terms(pod: dict[str, Any]) -> list[dict[str, Any]]:
    terms: list[dict[str, Any]] = (pod["spec"]["affinity"]["nodeAffinity"]
                                   ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"])
    return terms


QWEN_32B = ["Qwen/Qwen2.5-32B-Instruct", "--max-model-len", "4096"]  # ~61 GiB of bf16 weights on one device


def test_gaudi_nodes_without_the_controllers_label_stay_open_unless_their_machine_type_is_too_small() -> None:
    nodes = _items("accelerators/nodes-gaudi.yaml")
    out = _mutated(_pod("habana.ai/gaudi", QWEN_32B), nodes)
    assert {"key": "node.kubernetes.io/instance-type", "operator": "NotIn", "values": ["dl1.24xlarge"]} in [
        e for t in _terms(out) for e in t["matchExpressions"]]

    def placed(node: dict[str, Any]) -> bool:
        return selects(out["spec"], node_gpus(node, CFG))

    # Gaudi 3 (128 GB) and Gaudi 2 (96 GB) hold ~61 GiB; the dl1 (32 GB HL-205) does not. No Gaudi label gives
    # memory, so before the controller runs only the machine type can tell: the on-premises nodes stay open.
    got = {n["metadata"]["name"]: placed(n) for n in nodes}
    assert got == {"gaudi3-0": True, "gaudi2-0": True, "ip-10-0-1-7.ec2.internal": False}
    # Once the controller has labelled each node with its memory, that label decides, the same way.
    for n in nodes:
        view = node_gpus(n, CFG)
        n["metadata"]["labels"]["vramgate.io/gpu-memory-mib"] = str(view.vram_mib)
    assert {n["metadata"]["name"]: placed(n) for n in nodes} == got


def test_a_small_model_on_gaudi_keeps_every_gaudi_node_open() -> None:
    nodes = _items("accelerators/nodes-gaudi.yaml")
    out = _mutated(_pod("habana.ai/gaudi", ["meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "8192"]), nodes)
    assert all(selects(out["spec"], node_gpus(n, CFG)) for n in nodes)
    assert not any(e["key"] == "node.kubernetes.io/instance-type" for t in _terms(out) for e in t["matchExpressions"])


def test_neuron_machine_types_too_small_are_shut_out_and_larger_ones_stay_open() -> None:
    nodes = _items("accelerators/nodes-neuron.yaml")
    # Qwen2.5-32B over one device: Trainium2 (96 GiB) holds it; Inferentia2 and Trainium (32 GB) do not.
    holding, small = instance_types_by_fit(vendor_named("neuron"), 62 * 1024)  # type: ignore[arg-type]
    assert "trn2.48xlarge" in holding and "inf2.48xlarge" in small and "trn1.32xlarge" in small
    out = _mutated(_pod("aws.amazon.com/neuron", QWEN_32B), nodes)
    placed = {n["metadata"]["name"]: selects(out["spec"], node_gpus(n, CFG)) for n in nodes}
    views = {n["metadata"]["name"]: node_gpus(n, CFG) for n in nodes}
    for name, ok in placed.items():
        assert ok == (views[name].vram_mib >= 62 * 1024), (name, views[name].vram_mib)


def test_amd_pods_may_scale_up_a_machine_type_whose_gpus_hold_them() -> None:
    nodes = _items("amd/nodes-amd.yaml")
    llama_70b = ["meta-llama/Llama-3.1-70B-Instruct", "--max-model-len", "8192"]
    out = _mutated(_pod("amd.com/gpu", llama_70b, image="rocm/vllm:rocm6.3.1_vllm_0.8.5_20250521"), nodes)
    term = {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [ND_MI300X]}
    assert any(term in t["matchExpressions"] for t in _terms(out))
    # A node AKS's node auto-provisioning would make: the size label, no labeller labels yet.
    new = {"apiVersion": "v1", "kind": "Node",
           "metadata": {"name": "aks-mi300x-0", "labels": {"node.kubernetes.io/instance-type": ND_MI300X}},
           "status": {"capacity": {}, "allocatable": {}}}
    assert selects(out["spec"], node_gpus(new, CFG))
    # Without provisioner terms, only labelled nodes qualify.
    quiet = Config.model_validate({"admission": {"provisioner_affinity": False}})
    out = _mutated(_pod("amd.com/gpu", llama_70b, image="rocm/vllm:rocm6.3.1_vllm_0.8.5_20250521"), nodes, quiet)
    assert not any(e["key"] == "node.kubernetes.io/instance-type" for t in _terms(out) for e in t["matchExpressions"])
    assert not selects(out["spec"], node_gpus(new, CFG))


def test_an_aks_mi300x_node_is_read_from_its_size_before_the_labeller_runs() -> None:
    gpus = node_vendor_gpus({"node.kubernetes.io/instance-type": ND_MI300X}, {}, {})
    assert gpus is not None
    assert (gpus.vendor, gpus.product, gpus.vram_mib, gpus.count) == ("amd", "MI300X", 192 * 1024, 8)
    assert gpus.vram_source == f"amd instance-type {ND_MI300X.lower()}"


def test_a_users_own_machine_type_requirement_is_kept() -> None:
    nodes = _items("accelerators/nodes-gaudi.yaml")
    pod = _pod("habana.ai/gaudi", QWEN_32B)
    mine = {"key": "node.kubernetes.io/instance-type", "operator": "NotIn", "values": ["gaudi-lab-box"]}
    pod["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [mine]}]}}}
    out = _mutated(pod, nodes)
    assert all(mine in t["matchExpressions"] for t in _terms(out))


def test_the_eks_agents_accelerated_hardware_condition_false_is_a_fault_on_neuron_and_nvidia() -> None:
    neuron = _items("accelerators/nodes-neuron.yaml")[0]
    h100 = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "h100-0", "labels": {"nvidia.com/gpu.memory": "81559"}},
            "status": {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "8"}}}
    for node in (neuron, h100):
        assert node_gpus(node, CFG).health == "healthy"
        for state, healthy in (("True", True), ("Unknown", True), ("False", False)):
            node["status"]["conditions"] = [{"type": "Ready", "status": "True"},
                                            {"type": "AcceleratedHardwareReady", "status": state,
                                             "reason": "NeuronHardwareError" if state == "False" else "Ready"}]
            view = node_gpus(node, CFG)
            assert (view.health == "healthy") is healthy, (node["metadata"]["name"], state, view.health_reason)
        assert "AcceleratedHardwareReady=False (NeuronHardwareError)" in view.health_reason
