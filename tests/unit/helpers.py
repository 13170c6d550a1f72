"""Builders for workload and Node objects used across unit tests."""

from typing import Any


def container(name: str = "main", gpus: int | None = 1, *, image: str = "vllm/vllm-openai:v0.6.3",
              env: dict[str, str] | None = None, args: list[str] | None = None, command: list[str] | None = None,
              memory: str | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": image}
    limits: dict[str, Any] = {}
    if gpus is not None:
        limits["nvidia.com/gpu"] = gpus
    if memory:
        limits["memory"] = memory
    if limits:
        c["resources"] = {"limits": limits}
    if env:
        c["env"] = [{"name": k, "value": v} for k, v in env.items()]
    if args:
        c["args"] = args
    if command:
        c["command"] = command
    return c


def pod(*containers: dict[str, Any], annotations: dict[str, str] | None = None, name: str = "p",
        namespace: str = "ml", init: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if annotations:
        meta["annotations"] = annotations
    body: dict[str, Any] = {"containers": list(containers), **spec}
    if init:
        body["initContainers"] = init
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": body}


def deployment(*containers: dict[str, Any], annotations: dict[str, str] | None = None,
               name: str = "d", kind: str = "Deployment") -> dict[str, Any]:
    template = {"metadata": {"labels": {"app": name}, "annotations": annotations or {}},
                "spec": {"containers": list(containers)}}
    api = {"Job": "batch/v1", "CronJob": "batch/v1"}.get(kind, "apps/v1")
    if kind == "CronJob":
        spec: dict[str, Any] = {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": template}}}
    else:
        spec = {"selector": {"matchLabels": {"app": name}}, "template": template}
    return {"apiVersion": api, "kind": kind, "metadata": {"name": name, "namespace": "ml"}, "spec": spec}


def gpu_node(name: str, *, gpus: int = 8, mem: int | str = 81920, product: str = "NVIDIA-A100-SXM4-80GB",
             driver: int | None = 550, allocatable: int | None = None, conditions: list[dict[str, Any]] | None = None,
             taints: list[dict[str, Any]] | None = None, labels: dict[str, str] | None = None,
             capacity: bool = True) -> dict[str, Any]:
    lab = {"nvidia.com/gpu.product": product, "nvidia.com/gpu.count": str(gpus), "nvidia.com/gpu.memory": str(mem)}
    if driver is not None:
        lab["nvidia.com/cuda.driver-version.major"] = str(driver)
    lab.update(labels or {})
    cap: dict[str, str] = {"cpu": "64", "memory": "512Gi"}
    alloc: dict[str, str] = dict(cap)
    if capacity:
        cap["nvidia.com/gpu"] = str(gpus)
        alloc["nvidia.com/gpu"] = str(gpus if allocatable is None else allocatable)
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": lab},
            "spec": {"taints": taints or []},
            "status": {"capacity": cap, "allocatable": alloc, "conditions": conditions or []}}


def cpu_node(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {}},
            "status": {"capacity": {"cpu": "8"}, "allocatable": {"cpu": "8"}}}
