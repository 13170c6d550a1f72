"""Node → GPU capability and health."""

from webhook.cluster.inventory import classify, node_gpus
from webhook.config import Config

from .helpers import cpu_node, gpu_node

CFG = Config()


def test_gfd_labels() -> None:
    n = node_gpus(gpu_node("a", gpus=8, mem=81920, driver=550), CFG)
    assert (n.capacity, n.allocatable, n.vram_mib, n.driver_major, n.health) == (8, 8, 81920, 550, "healthy")
    assert n.is_gpu_node and not n.plugin_missing


def test_human_memory_label_and_deprecated_driver_label() -> None:
    node = gpu_node("a", mem="80GB", driver=None, labels={"nvidia.com/cuda.driver.major": "470"})
    n = node_gpus(node, CFG)
    assert n.vram_mib == 81920 and n.driver_major == 470


def test_normalized_label_is_fallback() -> None:
    node = gpu_node("a")
    del node["metadata"]["labels"]["nvidia.com/gpu.memory"]
    node["metadata"]["labels"]["vramgate.io/gpu-memory-mib"] = "40960"
    assert node_gpus(node, CFG).vram_mib == 40960


def test_time_slicing_divides_vram() -> None:
    node = gpu_node("a", gpus=4, mem=24576, labels={"nvidia.com/gpu.replicas": "4"})
    assert node_gpus(node, CFG).vram_mib == 6144


def test_mig_single_uses_slice_memory() -> None:
    node = gpu_node("a", mem=40960, product="NVIDIA-A100-SXM4-40GB-MIG-1g.5gb",
                    labels={"nvidia.com/mig.strategy": "single"})
    assert node_gpus(node, CFG).vram_mib == 5120


def test_capacity_gap_degraded_then_unhealthy() -> None:
    assert node_gpus(gpu_node("a", allocatable=7), CFG).health == "degraded"
    assert node_gpus(gpu_node("a", allocatable=3), CFG).health == "unhealthy"
    assert node_gpus(gpu_node("a", allocatable=0), CFG).health == "unhealthy"
    strict = Config(health={"unhealthy_count": 1})
    assert node_gpus(gpu_node("a", allocatable=7), strict).health == "unhealthy"


def test_device_plugin_absent() -> None:
    n = node_gpus(gpu_node("a", capacity=False), CFG)
    assert n.plugin_missing and n.health == "unhealthy" and "device plugin" in n.health_reason


def test_fault_condition_and_taint() -> None:
    cond = [{"type": "GpuMemWatch", "status": "True", "message": "DBE"}]
    n = node_gpus(gpu_node("a", conditions=cond), CFG)
    assert n.health == "unhealthy" and "GpuMemWatch" in n.health_reason
    ok = [{"type": "GpuMemWatch", "status": "False"}]
    assert node_gpus(gpu_node("a", conditions=ok), CFG).health == "healthy"
    taint = [{"key": "nvidia.com/gpu-xid-error", "value": "true", "effect": "NoSchedule"}]
    assert node_gpus(gpu_node("a", taints=taint), CFG).health == "unhealthy"


def test_cpu_node_and_garbage_never_raise() -> None:
    n = node_gpus(cpu_node("c"), CFG)
    assert not n.is_gpu_node and n.health == "healthy"
    for junk in ({}, {"metadata": None}, {"metadata": {"labels": "x"}, "status": "y"},
                 {"metadata": {"name": "z", "labels": {"nvidia.com/gpu.memory": "lots"}},
                  "status": {"capacity": {"nvidia.com/gpu": "two"}}}):
        node_gpus(junk, CFG)


def test_classify_pure() -> None:
    assert classify(8, 8, True, None, CFG) == ("healthy", "8 of 8 GPUs allocatable")
    assert classify(0, 0, True, None, CFG)[0] == "unhealthy"
    assert classify(4, 2, True, None, CFG)[0] == "degraded"
