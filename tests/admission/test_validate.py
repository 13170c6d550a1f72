"""Validation rules over the wire: every workload kind, malformed declarations, warnings, selectors, GPU-less pods."""

from __future__ import annotations

import pytest

from webhook.config import Admission, Config

from .conftest import use
from .helpers import Service, gpu_container, workload

KINDS = ["Pod", "Deployment", "StatefulSet", "ReplicaSet", "DaemonSet", "Job", "CronJob"]
BIG = {"vramgate.io/model-params": "180B", "vramgate.io/precision": "bf16", "vramgate.io/context-length": "4096"}
SMALL = {"vramgate.io/model-params": "7B", "vramgate.io/precision": "bf16", "vramgate.io/context-length": "4096"}
MID = {"vramgate.io/model-params": "13B", "vramgate.io/precision": "bf16", "vramgate.io/context-length": "4096"}


def cfg(**admission: object) -> Config:
    return Config(admission=Admission(**admission))  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_is_judged(svc: Service, kind: str) -> None:
    fits = svc.validate(workload(kind, gpu_container(memory="64Gi"), annotations=SMALL))
    assert fits["allowed"] is True, fits
    big = svc.validate(workload(kind, gpu_container(memory="512Gi"), annotations=BIG, name="big"))
    assert big["allowed"] is False
    assert big["status"]["message"].startswith(f"{kind.lower()}/big: needs ")
    assert "the largest GPU in the cluster has 80 GiB (gpu-a100-80-0, NVIDIA-A100-SXM4-80GB" in big["status"]["message"]


@pytest.mark.parametrize(("annotation", "value", "accepted"), [
    ("vramgate.io/model-params", "lots", "15B"),
    ("vramgate.io/precision", "fp7", "fp16"),
    ("vramgate.io/context-length", "-5", "8192"),
    ("vramgate.io/vram", "forty", "40Gi"),
    ("vramgate.io/gpu-memory-utilization", "1.5", "0.9"),
    ("vramgate.io/tier", "gold", "production"),
])
def test_malformed_declaration_is_rejected_naming_it(svc: Service, annotation: str, value: str, accepted: str) -> None:
    ann = {**SMALL, annotation: value}
    resp = svc.validate(workload("Deployment", gpu_container(memory="64Gi"), annotations=ann, name="bad"))
    assert resp["allowed"] is False
    msg = resp["status"]["message"]
    assert msg.startswith("deployment/bad: ") and annotation in msg and repr(value) in msg and accepted in msg


def test_malformed_gpu_count_is_rejected(svc: Service) -> None:
    c = gpu_container()
    c["resources"]["limits"]["nvidia.com/gpu"] = "two"
    resp = svc.validate(workload("Pod", c, name="p"))
    assert resp["allowed"] is False and "'two'" in resp["status"]["message"]


def test_malformed_pod_spec_is_rejected(svc: Service) -> None:
    obj = workload("Deployment", gpu_container())
    obj["spec"]["template"]["spec"]["containers"] = "oops"
    resp = svc.validate(obj)
    assert resp["allowed"] is False and "must be a list" in resp["status"]["message"]


def test_host_memory_limit_below_weights_warns(svc: Service) -> None:
    resp = svc.validate(workload("Deployment", gpu_container(memory="8Gi"), annotations=SMALL))
    assert resp["allowed"] is True
    assert any(w.startswith("container main: memory limit 8Gi < ") for w in resp["warnings"])


def test_cuda_visible_devices_listing_more_devices_warns(svc: Service) -> None:
    c = gpu_container(memory="64Gi", env={"CUDA_VISIBLE_DEVICES": "0,1,2,3"})
    resp = svc.validate(workload("Deployment", c, annotations=SMALL))
    assert resp["allowed"] is True
    assert "container main: CUDA_VISIBLE_DEVICES lists 4 devices but the container requests 1 nvidia.com/gpu" in \
        resp["warnings"]
    ok = gpu_container(memory="64Gi", env={"CUDA_VISIBLE_DEVICES": "0"})
    assert "warnings" not in svc.validate(workload("Deployment", ok, annotations=SMALL))


GPU_TOLERATION = {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}
GPU_SELECTOR = {"nodeSelector": {"nvidia.com/gpu.present": "true"}}


@pytest.mark.parametrize("pod_spec", [GPU_TOLERATION, GPU_SELECTOR], ids=["toleration", "selector"])
def test_gpuless_pod_aimed_at_gpu_nodes(svc: Service, pod_spec: dict[str, object]) -> None:
    obj = workload("Deployment", {"name": "web", "image": "nginx"}, pod_spec=pod_spec, name="web")
    resp = svc.validate(obj)  # default: warn
    assert resp["allowed"] is True
    text = " ".join(resp["warnings"])
    assert "deployment/web: requests no nvidia.com/gpu but" in text
    use(svc, config=cfg(non_gpu_pods_on_gpu_nodes="reject"))
    resp = svc.validate(obj)
    assert resp["allowed"] is False and "requests no nvidia.com/gpu" in resp["status"]["message"]
    use(svc, config=cfg(non_gpu_pods_on_gpu_nodes="ignore"))
    assert svc.validate(obj) == {"uid": svc.seen[-1]["uid"], "allowed": True}


def test_gpuless_node_agents_and_ordinary_pods_pass(svc: Service) -> None:
    use(svc, config=cfg(non_gpu_pods_on_gpu_nodes="reject"))
    agent = workload("DaemonSet", {"name": "dcgm-exporter", "image": "nvcr.io/nvidia/k8s/dcgm-exporter"},
                     pod_spec=GPU_TOLERATION)
    assert svc.validate(agent)["allowed"] is True
    web = workload("Deployment", {"name": "web", "image": "nginx"},
                   pod_spec={"nodeSelector": {"kubernetes.io/os": "linux"}})
    assert svc.validate(web) == {"uid": svc.seen[-1]["uid"], "allowed": True}


T4_SELECTOR = {"nodeSelector": {"nvidia.com/gpu.product": "Tesla-T4"}}
L4_AFFINITY = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
    "nodeSelectorTerms": [{"matchExpressions": [
        {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-L4", "NVIDIA-A10G"]},
        {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]}]}}}}


@pytest.mark.parametrize(("pod_spec", "named"), [
    (T4_SELECTOR, "nodeSelector nvidia.com/gpu.product=Tesla-T4"),
    (L4_AFFINITY, "required nodeAffinity nvidia.com/gpu.product In [NVIDIA-L4,NVIDIA-A10G] and kubernetes.io/os In"),
], ids=["nodeSelector", "affinity"])
def test_selector_matching_only_small_gpus_is_rejected_naming_it(svc: Service, pod_spec: dict[str, object],
                                                                  named: str) -> None:
    obj = workload("Deployment", gpu_container(memory="64Gi"), annotations=MID, pod_spec=pod_spec, name="pinned")
    resp = svc.validate(obj)
    assert resp["allowed"] is False
    msg = resp["status"]["message"]
    assert msg.startswith(f"deployment/pinned: its {named}")
    assert "matches only nodes whose GPUs cannot hold it" in msg and "Try: " in msg


def test_selector_matching_a_fitting_node_is_fine(svc: Service) -> None:
    spec = {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L40S"}}
    obj = workload("Deployment", gpu_container(memory="64Gi"), annotations=SMALL, pod_spec=spec)
    assert svc.validate(obj)["allowed"] is True


def test_narrow_selector_with_reroute_is_admitted_with_a_warning(svc: Service) -> None:
    use(svc, config=cfg(reroute_narrow_selectors=True))
    obj = workload("Deployment", gpu_container(memory="64Gi"), annotations=SMALL, pod_spec=T4_SELECTOR)
    resp = svc.validate(obj)
    assert resp["allowed"] is True
    assert any("nodeSelector nvidia.com/gpu.product=Tesla-T4 matches only GPUs too small" in w
               for w in resp["warnings"])


def test_long_warnings_are_split_not_lost(svc: Service) -> None:
    # warn mode turns the (long) §6 rejection into warnings of at most 120 characters each.
    use(svc, config=cfg(default_enforcement="warn"))
    resp = svc.validate(workload("Deployment", gpu_container(memory="512Gi"), annotations=BIG, name="big"))
    assert resp["allowed"] is True
    joined = " ".join(w.strip("…") for w in resp["warnings"])
    assert "deployment/big: needs" in joined and "Try:" in joined
    assert all(len(w) <= 120 for w in resp["warnings"]) and len(resp["warnings"]) > 2
