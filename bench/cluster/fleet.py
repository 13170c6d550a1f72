"""The simulated fleet and workload: KWOK-managed GPU Nodes and the GPU Pods the bench schedules.

Pure functions of a seed, so the three scheduler configurations see exactly the same nodes and pods.
Nodes are created with their status (capacity/allocatable with ``nvidia.com/gpu``), GFD labels and
the ``kwok.x-k8s.io/node: fake`` annotation KWOK selects on; KWOK's ``node-initialize`` stage then
adds the conditions (Ready), addresses and nodeInfo, as a kubelet would. Unhealthy GPUs show as the
device plugin shows them: allocatable one below capacity (KWOK's stage rewrites all conditions, so
fault conditions would not survive it).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
BENCH_LABEL = "vramgate-bench/run"

# (product label, MiB per device, devices per node, share of the GPU fleet, extra labels)
# MIG (single strategy: 7 × 1g.10gb slices per A100-80GB) and time-sliced A10G (4 replicas a GPU)
# are the shapes GFD reports for them.
GPU_SHAPES: list[tuple[str, int, int, float, dict[str, str]]] = [
    ("NVIDIA-H100-80GB-HBM3", 81559, 8, 0.27, {"nvidia.com/gpu.family": "hopper"}),
    ("NVIDIA-A100-SXM4-40GB", 40960, 8, 0.18, {"nvidia.com/gpu.family": "ampere"}),
    ("NVIDIA-A10G", 23028, 4, 0.20, {"nvidia.com/gpu.family": "ampere"}),
    ("NVIDIA-L4", 23034, 1, 0.12, {"nvidia.com/gpu.family": "ada-lovelace"}),
    ("Tesla-T4", 15360, 1, 0.10, {"nvidia.com/gpu.family": "turing"}),
    ("NVIDIA-A100-SXM4-80GB-MIG-1g.10gb", 9984, 56, 0.07,
     {"nvidia.com/mig.strategy": "single", "nvidia.com/gpu.family": "ampere"}),
    ("NVIDIA-A10G-SHARED", 23028, 16, 0.06, {"nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.family": "ampere"}),
]
CPU_SHARE = 0.10  # CPU-only nodes in the fleet
UNHEALTHY_SHARE = 0.02  # GPU nodes with a device the plugin took out (allocatable < capacity)
OCCUPIED_SHARE = 0.25  # GPU nodes that already run a GPU pod before the bench starts


def node_name(i: int) -> str:
    return f"kwok-gpu-{i:05d}"


def node_object(i: int, seed: int = 1) -> dict[str, Any]:
    """Node ``i`` of the fleet (the same for every fleet size: growing 1k → 5k adds nodes)."""
    rng = random.Random(seed * 1_000_003 + i)
    name = node_name(i)
    labels = {
        "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
        "type": "kwok", "topology.kubernetes.io/zone": rng.choice(["zone-a", "zone-b", "zone-c"]),
    }
    capacity = {"cpu": "96", "memory": "1536Gi", "pods": "110", "ephemeral-storage": "2Ti"}
    allocatable = dict(capacity)
    if rng.random() >= CPU_SHARE:
        product, mib, devices, _, extra = rng.choices(GPU_SHAPES, weights=[s[3] for s in GPU_SHAPES])[0]
        replicas = int(extra.get("nvidia.com/gpu.replicas", "1"))
        labels.update({
            "nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": product,
            "nvidia.com/gpu.memory": str(mib), "nvidia.com/gpu.count": str(devices // replicas),
            "nvidia.com/cuda.driver-version.major": rng.choice(["535", "550", "550", "560"]),
            **extra,
        })
        capacity["nvidia.com/gpu"] = str(devices)
        allocatable["nvidia.com/gpu"] = str(devices - (1 if rng.random() < UNHEALTHY_SHARE else 0))
    octet = i + 1
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": {KWOK_ANNOTATION: "fake"}},
        "spec": {"podCIDR": f"100.{64 + octet // 256}.{octet % 256}.0/24"},
        "status": {"capacity": capacity, "allocatable": allocatable},
    }


def gpu_devices(node: dict[str, Any]) -> int:
    return int(node["status"]["allocatable"].get("nvidia.com/gpu", "0"))


def _container(gpus: int, name: str = "server") -> dict[str, Any]:
    res: dict[str, Any] = {"cpu": "2", "memory": "16Gi"}
    if gpus:
        res = {**res, "nvidia.com/gpu": str(gpus)}
    return {"name": name, "image": "vllm/vllm-openai:v0.6.3", "resources": {"requests": res, "limits": res}}


def existing_pod(node: dict[str, Any], i: int) -> dict[str, Any]:
    """A GPU pod already running on ``node`` (bound by nodeName, no scheduler): half its devices."""
    gpus = max(1, gpu_devices(node) // 2)
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"running-{i:05d}", "labels": {"app": "existing"},
                     "annotations": {"vramgate.io/vram": "8Gi"}},
        "spec": {"nodeName": node["metadata"]["name"], "containers": [_container(gpus)],
                 "terminationGracePeriodSeconds": 0},
    }


@dataclass(frozen=True)
class PodShape:
    """One kind of GPU pod the bench creates: GPUs and VRAM per GPU, and its share of the mix."""

    name: str
    gpus: int
    vram: str
    share: float
    note: str


# The default scheduler sees only nvidia.com/gpu; vramgate also sees the VRAM each pod needs.
# ``vramgate.io/vram`` is the pod's TOTAL, split over its GPUs: the multi-GPU shapes are light per GPU.
# This is the mix the 2026-11-30 run in docs/scaling.md measured; change it and the figures change.
POD_MIX: list[PodShape] = [
    PodShape("small", 1, "14Gi", 0.55, "a 7B model in fp16: any full GPU (T4 included), no MIG slice or time-slice"),
    PodShape("tiny", 1, "6Gi", 0.10, "a quantized 7B: MIG 1g.10gb slices too, not 5.6 GiB time-slices"),
    PodShape("large", 1, "70Gi", 0.15, "a 34B model in fp16: fits only H100-80GB"),
    PodShape("tp4", 4, "30Gi", 0.13, "4 GPUs, 7.5 GiB each: 4+ devices of >= 7.5 GiB"),
    PodShape("tp8", 8, "70Gi", 0.05, "8 GPUs, 8.75 GiB each: an 8-GPU node or 8 MIG 1g.10gb slices"),
    PodShape("nowhere-vram", 1, "200Gi", 0.01, "fits no GPU (vramgate leaves it Pending; default binds it)"),
    PodShape("sixteen", 16, "40Gi", 0.01, "16 devices of 2.5 GiB: MIG (56 slices) and time-sliced (16) nodes"),
]


def shape_pod(shape: PodShape, scheduler: str, run: str, i: int = 0) -> dict[str, Any]:
    """A GPU pod of ``shape`` as the bench creates it."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{run}-{i:05d}-{shape.name}", "labels": {BENCH_LABEL: run, "shape": shape.name},
                     "annotations": {"vramgate.io/vram": shape.vram}},
        "spec": {"schedulerName": scheduler, "containers": [_container(shape.gpus)],
                 "terminationGracePeriodSeconds": 0},
    }


def bench_pods(count: int, scheduler: str, run: str, seed: int = 7) -> list[dict[str, Any]]:
    """``count`` GPU pods drawn from :data:`POD_MIX` (same sequence for the same seed)."""
    rng = random.Random(seed)
    shapes = rng.choices(POD_MIX, weights=[s.share for s in POD_MIX], k=count)
    return [shape_pod(s, scheduler, run, i) for i, s in enumerate(shapes)]


def admission_pod(i: int, run: str) -> dict[str, Any]:
    """A GPU Pod as a developer writes it (model named in vLLM's flags), for the create-latency phase.
    ``schedulerName`` names no running scheduler, so the phase measures only the create."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{run}-{i:05d}", "labels": {BENCH_LABEL: run, "app": "llama3"}},
        "spec": {
            "schedulerName": "vramgate-bench-nobody",
            "terminationGracePeriodSeconds": 0,
            "containers": [{
                "name": "vllm", "image": "vllm/vllm-openai:v0.6.3",
                "args": ["--model", "meta-llama/Meta-Llama-3-8B-Instruct", "--max-model-len", "8192",
                         "--gpu-memory-utilization", "0.9"],
                "resources": {"limits": {"nvidia.com/gpu": "1", "memory": "32Gi", "cpu": "8"},
                              "requests": {"nvidia.com/gpu": "1", "memory": "32Gi", "cpu": "4"}},
            }, {
                "name": "metrics-proxy", "image": "ghcr.io/acme/proxy:1.4",
                "resources": {"limits": {"memory": "256Mi", "cpu": "500m"}},
            }],
        },
    }


def admission_deployment(i: int, run: str) -> dict[str, Any]:
    """A GPU Deployment (``replicas: 0``: the phase measures the create, not the ReplicaSet's pods)."""
    pod = admission_pod(i, run)
    labels = {"app": f"{run}-{i:05d}"}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": f"{run}-{i:05d}", "labels": {BENCH_LABEL: run}},
        "spec": {"replicas": 0, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels}, "spec": pod["spec"]}},
    }


def hand_placed(pod: dict[str, Any]) -> dict[str, Any]:
    """``pod`` as a careful user would pin it without vramgate: a required node affinity on the GPU products
    whose memory per device holds its ``vramgate.io/vram`` per GPU (the baseline the native mode's VRAM
    affinity is compared with: any correct placement makes kube-scheduler look past the nodes that cannot
    hold the pod)."""
    from webhook.units.quantity import parse_size_mib

    spec = pod["spec"]
    gpus = int(spec["containers"][0]["resources"]["limits"].get("nvidia.com/gpu", "1"))
    need = parse_size_mib(pod["metadata"]["annotations"]["vramgate.io/vram"]) / max(gpus, 1)
    products = sorted(p for p, mib, _, _, extra in GPU_SHAPES
                      if mib / int(extra.get("nvidia.com/gpu.replicas", "1")) >= need)
    terms = [{"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In",
                                    "values": products or ["none"]}]}]
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}
    return {**pod, "spec": {**spec, "affinity": affinity}}
