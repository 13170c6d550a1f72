"""The runtimes and configs other objects refer to (ServingRuntimes, TrainingRuntimes), looked up by name."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

# Namespaced kind → its cluster-scoped twin, searched second (as KServe's GetServingRuntime does).
CLUSTER_TWIN = {"ServingRuntime": "ClusterServingRuntime", "TrainingRuntime": "ClusterTrainingRuntime",
                "BaseModel": "ClusterBaseModel"}
# Each runtime kind's home API group: what a lookup without a group means, and where an object read from a
# file without an apiVersion is filed. KServe's runtimes: serving.kserve.io (config/crd/full/
# serving.kserve.io_servingruntimes.yaml); Kubeflow Trainer's: trainer.kubeflow.org; NIMCache:
# apps.nvidia.com (NVIDIA/k8s-nim-operator api/apps/v1alpha1); ConfigMap: core; OME's BaseModels: ome.io
# (sgl-project/ome pkg/apis/ome/v1beta1/model.go); llmaz's OpenModel and BackendRuntime (InftyAI/llmaz api/).
HOME_GROUP = {"ServingRuntime": "serving.kserve.io", "ClusterServingRuntime": "serving.kserve.io",
              "TrainingRuntime": "trainer.kubeflow.org", "ClusterTrainingRuntime": "trainer.kubeflow.org",
              "ConfigMap": "", "NIMCache": "apps.nvidia.com",
              "BaseModel": "ome.io", "ClusterBaseModel": "ome.io",
              "OpenModel": "llmaz.io", "BackendRuntime": "inference.llmaz.io"}
# Namesakes in other groups that are runtimes too (OME's ServingRuntime and ClusterServingRuntime, ome.io:
# sgl-project/ome pkg/apis/ome/v1beta1/servingruntime_types.go), filed apart from KServe's.
OTHER_GROUPS = {"ServingRuntime": ("ome.io",), "ClusterServingRuntime": ("ome.io",)}
RUNTIME_KINDS = frozenset(HOME_GROUP)
# Objects that are not runtimes but that the workloads of the same files are judged with: an AIBrix ModelClaim
# names the model its warm pool's pods serve (kinds/aibrix_claim.py).
ATTACHED_GROUP = {"ModelClaim": "model.aibrix.ai"}


@dataclass(frozen=True)
class Runtimes:
    """Runtime objects known to vramgate: from the files `vramgate check -f` reads, or none at admission."""

    _by_key: dict[tuple[str, str, str, str], dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def of(cls, objects: Iterable[Any]) -> Runtimes:
        """Index every runtime object among ``objects`` by API group, kind, namespace and name (anything else,
        and a runtime kind's namesake of a group not known, is ignored)."""
        index: dict[tuple[str, str, str, str], dict[str, Any]] = {}
        for obj in objects:
            if not isinstance(obj, dict) or (str(obj.get("kind")) not in RUNTIME_KINDS
                                             and str(obj.get("kind")) not in ATTACHED_GROUP):
                continue
            meta = obj.get("metadata")
            if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
                continue
            kind = str(obj["kind"])
            group = runtime_group(obj)
            if group is None:
                continue
            ns = "" if kind not in CLUSTER_TWIN else str(meta.get("namespace") or "")
            index.setdefault((group, kind, ns, meta["name"]), obj)
        return cls(index)

    def __bool__(self) -> bool:
        return bool(self._by_key)

    def configmap(self, name: str, key: str) -> str | None:
        """A ConfigMap value for env (``configMapKeyRef``); key ``*`` gives every pair as ``KEY=VALUE`` lines."""
        obj = self._by_key.get(("", "ConfigMap", "", name))
        data = obj.get("data") if obj else None
        if not isinstance(data, dict):
            return None
        if key == "*":
            return "\n".join(f"{k}={v}" for k, v in data.items() if isinstance(k, str))
        value = data.get(key)
        return str(value) if value is not None else None

    def get(self, kind: str, name: str, namespace: str, group: str | None = None) -> dict[str, Any] | None:
        """A runtime by kind and name, of ``group`` (default: the kind's home group, KServe's for a
        ServingRuntime). A namespaced one read from a file without a namespace matches any namespace."""
        g = HOME_GROUP.get(kind, "") if group is None else group
        if kind in CLUSTER_TWIN:
            return self._by_key.get((g, kind, namespace, name)) or (
                self._by_key.get((g, kind, "", name)) if namespace else None)
        return self._by_key.get((g, kind, "", name))

    def lookup(self, kind: str, name: str, namespace: str, group: str | None = None) -> dict[str, Any] | None:
        """The namespaced runtime ``name``, else its cluster-scoped twin of the same name (same group)."""
        found = self.get(kind, name, namespace, group)
        twin = CLUSTER_TWIN.get(kind)
        return found if found is not None or twin is None else self.get(twin, name, namespace, group)

    def all(self, kind: str, namespace: str, group: str | None = None) -> list[dict[str, Any]]:
        """Every runtime of ``kind`` (and ``group``) visible from ``namespace``: namespaced ones first, then
        cluster ones."""
        g = HOME_GROUP.get(kind, "") if group is None else group
        out = [o for (gr, k, ns, _), o in self._by_key.items() if gr == g and k == kind and ns in (namespace, "")]
        twin = CLUSTER_TWIN.get(kind)
        if twin is not None:
            out.extend(o for (gr, k, _, _), o in self._by_key.items() if gr == g and k == twin)
        return out


def runtime_group(obj: dict[str, Any]) -> str | None:
    """The API group a runtime object is filed under: its apiVersion's, the kind's home group when it has no
    apiVersion (a file written by hand), None for a namesake of a group vramgate does not read."""
    kind = str(obj.get("kind"))
    home = HOME_GROUP[kind] if kind in HOME_GROUP else ATTACHED_GROUP.get(kind)
    api = obj.get("apiVersion")
    if not isinstance(api, str) or not api:
        return home
    group = api.rpartition("/")[0]
    return group if group == home or group in OTHER_GROUPS.get(kind, ()) else None


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
