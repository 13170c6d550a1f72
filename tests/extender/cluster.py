"""A small cluster with one node per verdict, pods that need GPUs, and a scripted fake API server."""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterator
from typing import Any

from webhook.cluster.snapshot import Snapshot, snapshot_from_nodes
from webhook.config import Config
from webhook.kube.nodecache import Kind

from ..unit.helpers import container, cpu_node, gpu_node, pod

CFG = Config()

FAULT = [{"type": "GpuMemWatch", "status": "True", "reason": "DBE", "message": "double-bit ECC error"}]


def nodes() -> list[dict[str, Any]]:
    """One node per reason a 2-GPU, 30 GiB-per-GPU, CUDA 12.2 pod can (not) land."""
    return [
        gpu_node("a100", gpus=8, mem=81920),  # fits, 8 free
        gpu_node("a100-half", gpus=8, mem=81920),  # fits, 2 free (6 used)
        gpu_node("l40", gpus=4, mem=46068, product="NVIDIA-L40S"),  # fits tighter, 4 free
        gpu_node("busy", gpus=8, mem=81920),  # 7 used: GPUsBusy (resolvable)
        gpu_node("t4", gpus=4, mem=15360, product="Tesla-T4"),  # VRAMTooSmall
        gpu_node("single", gpus=1, mem=81920),  # TooFewGPUs
        gpu_node("old-driver", gpus=8, mem=81920, driver=470),  # DriverTooOld
        gpu_node("no-plugin", gpus=8, mem=81920, capacity=False),  # NoDevicePlugin
        gpu_node("faulty", gpus=8, mem=81920, conditions=FAULT),  # GPUFault
        cpu_node("cpu"),  # NoGPUs
    ]


USED = {"a100-half": 6, "busy": 7}
FITS = ["a100", "a100-half", "l40"]
EXPECTED_CODES = {
    "busy": "GPUsBusy",
    "t4": "VRAMTooSmall",
    "single": "TooFewGPUs",
    "old-driver": "DriverTooOld",
    "no-plugin": "NoDevicePlugin",
    "faulty": "GPUFault",
    "cpu": "NoGPUs",
}


def names() -> list[str]:
    return [n["metadata"]["name"] for n in nodes()]


def fixed_snapshot() -> Snapshot:
    return snapshot_from_nodes(nodes(), CFG, USED, revision=1)


def gpu_pod(gpus: int = 2, vram: str | None = "60Gi", *, cuda: str | None = "12.2", name: str = "llm",
            placement: str | None = None, uid: str | None = None, **annotations: str) -> dict[str, Any]:
    """A pod as kube-scheduler sends it: no kind/apiVersion (typed informers drop TypeMeta)."""
    ann = dict(annotations)
    if vram is not None:
        ann["vramgate.io/vram"] = vram
    if cuda is not None:
        ann["vramgate.io/cuda"] = cuda
    if placement is not None:
        ann["vramgate.io/placement"] = placement
    p = pod(container(gpus=gpus), annotations=ann, name=name)
    del p["kind"], p["apiVersion"]
    if uid is not None:
        p["metadata"].update(uid=uid, resourceVersion="1")
    return p


def bound_pod(name: str, node: str, gpus: int, *, rv: int, phase: str = "Running", ns: str = "ml") -> dict[str, Any]:
    p = pod(container(gpus=gpus), name=name, namespace=ns, nodeName=node)
    p["metadata"].update(uid=f"uid-{name}", resourceVersion=str(rv))
    p["status"] = {"phase": phase}
    return p


def with_rv(obj: dict[str, Any], rv: int) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"]["resourceVersion"] = str(rv)
    return out


def namespace(name: str, enforcement: str | None = None, *, rv: int) -> dict[str, Any]:
    labels = {"vramgate.io/enforcement": enforcement} if enforcement else {}
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": labels, "resourceVersion": str(rv)}}


def event(etype: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {"type": etype, "object": obj}


def bookmark(kind: str, rv: int) -> dict[str, Any]:
    return {"type": "BOOKMARK", "object": {"kind": kind, "metadata": {"resourceVersion": str(rv)}}}


def gone() -> dict[str, Any]:
    return {"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 410,
                                       "reason": "Expired", "message": "too old resource version: 5 (40)"}}


def page(items: list[dict[str, Any]], rv: int, cont: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"resourceVersion": str(rv)}
    if cont:
        meta["continue"] = cont
    return {"kind": "List", "metadata": meta, "items": items}


# A watch script step: a batch of events, an exception to raise (a dropped connection, 410 Gone), or a
# callable returning either (it may block, to let a test act between steps).
Step = list[dict[str, Any]] | BaseException | Callable[[], "list[dict[str, Any]] | BaseException"]


class FakeApi:
    """WatchApi with scripted list pages and watch streams per kind; records every call.

    ``lists[kind]`` is a queue of pages (or exceptions) served in order, the last one repeated.
    ``watches[kind]`` is a queue of scripts, one per watch call; a script's steps are served in
    order and then the stream ends (the server's timeout). With no script left a watch idles
    until ``interrupt``.
    """

    def __init__(self) -> None:
        self.lists: dict[Kind, list[dict[str, Any] | BaseException]] = {"Node": [], "Pod": [], "Namespace": []}
        self.watches: dict[Kind, list[list[Step]]] = {"Node": [], "Pod": [], "Namespace": []}
        self.calls: list[tuple[str, str, str | None]] = []
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self.up = True  # what ready() answers

    def list_page(self, kind: Kind, *, limit: int, cont: str | None) -> dict[str, Any]:
        with self._lock:
            self.calls.append(("list", kind, cont))
            queue = self.lists[kind]
            answer = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(answer, BaseException):
            raise answer
        return copy.deepcopy(answer)

    def watch(self, kind: Kind, resource_version: str | None, timeout_s: int) -> Iterator[list[dict[str, Any]]]:
        with self._lock:
            self.calls.append(("watch", kind, resource_version))
            script = self.watches[kind].pop(0) if self.watches[kind] else None
        if script is None:
            self._stopped.wait()
            return
        for step in script:
            item = step() if callable(step) else step
            if isinstance(item, BaseException):
                raise item
            yield copy.deepcopy(item)

    def interrupt(self) -> None:
        self._stopped.set()

    def ready(self) -> bool:
        with self._lock:
            self.calls.append(("ready", "", None))
            return self.up


    def count(self, what: str, kind: str) -> int:
        with self._lock:
            return sum(1 for c in self.calls if c[0] == what and c[1] == kind)

    def watch_rvs(self, kind: str) -> list[str | None]:
        with self._lock:
            return [c[2] for c in self.calls if c[0] == "watch" and c[1] == kind]
