"""The runtimes and configs other objects refer to (ServingRuntimes, TrainingRuntimes), looked up by name."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

# Namespaced kind → its cluster-scoped twin, searched second (as KServe's GetServingRuntime does).
CLUSTER_TWIN = {"ServingRuntime": "ClusterServingRuntime", "TrainingRuntime": "ClusterTrainingRuntime"}
RUNTIME_KINDS = frozenset({*CLUSTER_TWIN, *CLUSTER_TWIN.values(), "ConfigMap", "NIMCache"})


@dataclass(frozen=True)
class Runtimes:
    """Runtime objects known to vramgate: from the files `vramgate check -f` reads, or none at admission."""

    _by_key: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def of(cls, objects: Iterable[Any]) -> Runtimes:
        """Index every runtime object among ``objects`` (anything else is ignored)."""
        index: dict[tuple[str, str, str], dict[str, Any]] = {}
        for obj in objects:
            if not isinstance(obj, dict) or str(obj.get("kind")) not in RUNTIME_KINDS:
                continue
            meta = obj.get("metadata")
            if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
                continue
            kind = str(obj["kind"])
            ns = "" if kind not in CLUSTER_TWIN else str(meta.get("namespace") or "")
            index.setdefault((kind, ns, meta["name"]), obj)
        return cls(index)

    def __bool__(self) -> bool:
        return bool(self._by_key)

    def configmap(self, name: str, key: str) -> str | None:
        """A ConfigMap value for env (``configMapKeyRef``); key ``*`` gives every pair as ``KEY=VALUE`` lines."""
        obj = self._by_key.get(("ConfigMap", "", name))
        data = obj.get("data") if obj else None
        if not isinstance(data, dict):
            return None
        if key == "*":
            return "\n".join(f"{k}={v}" for k, v in data.items() if isinstance(k, str))
        value = data.get(key)
        return str(value) if value is not None else None

    def get(self, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
        """A runtime by kind and name. A namespaced one read from a file without a namespace matches any."""
        if kind in CLUSTER_TWIN:
            return self._by_key.get((kind, namespace, name)) or (
                self._by_key.get((kind, "", name)) if namespace else None)
        return self._by_key.get((kind, "", name))

    def lookup(self, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
        """The namespaced runtime ``name``, else its cluster-scoped twin of the same name."""
        found = self.get(kind, name, namespace)
        twin = CLUSTER_TWIN.get(kind)
        return found if found is not None or twin is None else self.get(twin, name, namespace)

    def all(self, kind: str, namespace: str) -> list[dict[str, Any]]:
        """Every runtime of ``kind`` visible from ``namespace`` (namespaced ones first, then cluster ones)."""
        out = [o for (k, ns, _), o in self._by_key.items() if k == kind and ns in (namespace, "")]
        twin = CLUSTER_TWIN.get(kind)
        if twin is not None:
            out.extend(o for (k, _, _), o in self._by_key.items() if k == twin)
        return out


NO_RUNTIMES = Runtimes()


@dataclass(frozen=True)
class Context:
    """What a kind module may consult: the request's namespace, known runtimes, and the GPU resource name."""

    namespace: str | None = None
    runtimes: Runtimes | None = None
    gpu_resource: str = "nvidia.com/gpu"
    # Other vendors' GPU resources (amd.com/gpu, from webhook/data/accelerators.yaml): counted as GPUs too.
    other_gpu_resources: tuple[str, ...] = ()

    @property
    def gpu_resources(self) -> tuple[str, ...]:
        return (self.gpu_resource, *self.other_gpu_resources)
