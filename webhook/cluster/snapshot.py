"""An immutable view of the cluster's GPU nodes, swapped whole when the inventory changes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Protocol

from ..config import Config
from .dra import DraView, devices_by_node, dra_view
from .inventory import NodeGPUs, node_gpus, with_devices
from .provisioners import PoolOffer, Provisioners, read_provisioners


@dataclass(frozen=True)
class Snapshot:
    """Nodes by name, free GPUs per node, and whether the source has synced at least once."""

    nodes: Mapping[str, NodeGPUs] = field(default_factory=dict)
    free: Mapping[str, int] = field(default_factory=dict)
    synced: bool = False
    revision: int = 0
    # namespace → its ``vramgate.io/enforcement`` label, for namespaces that carry one (cluster mode).
    enforcement: Mapping[str, str] = field(default_factory=dict)
    # node → placement class (see ClassTable): nodes of one class have the same capability and the
    # same free GPUs, so any pod gets the same verdict and score on them. Ids mean something only
    # within one snapshot; a node missing here is judged the slow way.
    classes: Mapping[str, int] = field(default_factory=dict)
    # class id → (the class's capability, without a name; its free GPUs). Append-only, shared with
    # later snapshots: every id in ``classes`` indexes it.
    class_info: Sequence[tuple[NodeGPUs, int]] = ()
    # node → metadata.resourceVersion the snapshot's NodeGPUs was computed from (cluster mode).
    versions: Mapping[str, str] = field(default_factory=dict)
    # DeviceClasses, and the ResourceClaims/Templates in view, for pods that ask for GPUs with claims.
    dra: DraView = field(default_factory=DraView)
    # Grows when a node's NodeGPUs (capability, labels, taints) changes, not when only free GPUs do (live
    # inventory): equal values mean the same node objects, so what is derived from the nodes alone still
    # holds. 0: unknown (a fixed inventory, a test), derive it again.
    nodes_revision: int = 0
    # PriorityClass name → (value, preemptionPolicy) as the Priority admission plugin resolves them (live inventory;
    # empty when not watched: the mutation then leaves them to the plugin).
    priority_classes: Mapping[str, tuple[int, str]] = field(default_factory=dict)
    # Karpenter NodePools: the nodes the cluster can add. Read only when no current node can hold a workload.
    provisioners: Provisioners = field(default_factory=Provisioners)

    def free_gpus(self, name: str) -> int:
        node = self.nodes.get(name)
        if node is None:
            return 0
        return self.free.get(name, node.allocatable)

    def gpu_nodes(self) -> list[NodeGPUs]:
        return list(self.by_vram)

    # Built once per snapshot (snapshots are immutable) so admission never rebuilds them per request.
    @cached_property
    def by_vram(self) -> tuple[NodeGPUs, ...]:
        """GPU nodes, largest GPUs (then most GPUs) first: admission's "can any node hold it" stops early."""
        gpu = [n for n in self.nodes.values() if n.is_gpu_node]
        gpu.sort(key=lambda n: (-n.vram_mib, -n.capacity, n.name))
        return tuple(gpu)

    @cached_property
    def class_members(self) -> tuple[dict[int, tuple[int, ...]], tuple[int, ...]]:
        """Each placement class some GPU node has → its nodes' positions in ``by_vram`` (ascending), and the
        positions of GPU nodes without a class (``class_info`` also holds retired classes; they are not here)."""
        groups: dict[int, list[int]] = {}
        unclassed: list[int] = []
        classes = self.classes
        for i, n in enumerate(self.by_vram):
            cls = classes.get(n.name)
            if cls is None:
                unclassed.append(i)
            else:
                groups.setdefault(cls, []).append(i)
        return {c: tuple(ix) for c, ix in groups.items()}, tuple(unclassed)

    @cached_property
    def scale_up(self) -> tuple[PoolOffer, ...]:
        """What each NodePool can add now (its limits less its nodes' GPUs): worked out on the rejection path only."""
        return self.provisioners.offers(self.nodes.values())

    @cached_property
    def sliced(self) -> tuple[NodeGPUs, ...]:
        """GPU nodes that offer MIG slices or AMD partitions by profile (the mixed strategies); mostly none."""
        return tuple(n for n in self.by_vram if n.mig_profiles)

    @cached_property
    def cpu_nodes(self) -> tuple[NodeGPUs, ...]:
        """Nodes without GPUs."""
        return tuple(n for n in self.nodes.values() if not n.is_gpu_node)


NODE_VIEWS = ("by_vram", "sliced", "cpu_nodes")


def carry_node_views(previous: Snapshot, new: Snapshot) -> None:
    """Give ``new`` the node lists ``previous`` has built, for a snapshot whose nodes did not change.

    Only the cached views that depend on ``nodes`` alone; free GPUs are read from the new snapshot.
    """
    for name in NODE_VIEWS:
        if name in previous.__dict__:
            new.__dict__[name] = previous.__dict__[name]


def capability(node: NodeGPUs) -> NodeGPUs:
    """The node without its name: equal (and equally hashed) for nodes that any pod judges alike.

    DRA devices lose their node and pool too (a node's pool is named after it), so a fleet of
    identical DRA nodes still makes one class.
    """
    if node.dra:
        return replace(node, name="", labels={}, dra=tuple(replace(d, node="", pool="") for d in node.dra))
    return replace(node, name="", labels={})


class ClassTable:
    """Interns capabilities, then (capability, free GPUs) pairs, to small ints.

    Two nodes with the same class get the same filter verdict and the same score for any pod, so
    the extender judges each class once per request and keys everything on an int.
    """

    def __init__(self) -> None:
        self._caps: dict[NodeGPUs, int] = {}
        self._cap_list: list[NodeGPUs] = []
        self._classes: dict[tuple[int, int], int] = {}
        self.info: list[tuple[NodeGPUs, int]] = []  # class id → (capability, free GPUs); append-only

    def __len__(self) -> int:
        return len(self._classes)

    def cap_of(self, node: NodeGPUs) -> int:
        key = capability(node)
        found = self._caps.get(key)
        if found is None:
            found = self._caps[key] = len(self._cap_list)
            self._cap_list.append(key)
        return found

    def class_of_cap(self, cap: int, free: int) -> int:
        key = (cap, free)
        found = self._classes.get(key)
        if found is None:
            found = self._classes[key] = len(self.info)
            self.info.append((self._cap_list[cap], free))
        return found

    def class_of(self, node: NodeGPUs, free: int) -> int:
        return self.class_of_cap(self.cap_of(node), free)


def snapshot_from_nodes(
    nodes: Iterable[dict[str, Any]], config: Config, used: Mapping[str, int] | None = None, revision: int = 0,
    dra: Iterable[dict[str, Any]] = (),
) -> Snapshot:
    """Build a snapshot from Node objects and GPUs in use per node (absent: all allocatable free).

    ``dra`` holds ResourceSlices, DeviceClasses, ResourceClaims and ResourceClaimTemplates (any order), and
    Karpenter NodePools.
    """
    objects = list(dra)
    drivers = config.labels.dra_drivers
    devices = devices_by_node((o for o in objects if o.get("kind") == "ResourceSlice"), drivers)
    table = {}
    versions = {}
    for obj in nodes:
        info = node_gpus(obj, config)
        if info.name in devices:
            info = with_devices(info, devices[info.name])
        if info.name:
            table[info.name] = info
            meta = obj.get("metadata")
            rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
            if isinstance(rv, str) and rv:
                versions[info.name] = rv
    used = used or {}
    free = {name: max(0, n.allocatable - used.get(name, 0)) for name, n in table.items()}
    interner = ClassTable()
    classes = {name: interner.class_of(n, free[name]) for name, n in table.items()}
    return Snapshot(nodes=table, free=free, synced=True, revision=revision, classes=classes,
                    class_info=interner.info, versions=versions, dra=dra_view(objects, drivers),
                    provisioners=read_provisioners(objects, config))


class InventorySource(Protocol):
    """Where the service's snapshot comes from: a fixed file or a live list+watch."""

    def snapshot(self) -> Snapshot: ...

    def staleness(self) -> float | None:
        """Seconds since the API server last said anything; None for a fixed inventory (never stale)."""
        ...

    def unanswered(self) -> float | None:
        """Seconds the API server has not answered the inventory's probes, once seen frozen; None otherwise."""
        ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class FixedInventory:
    """An inventory that serves one snapshot for its whole life."""

    def __init__(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot

    def snapshot(self) -> Snapshot:
        return self._snapshot

    def staleness(self) -> float | None:
        return None

    def unanswered(self) -> float | None:
        return None

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None


class StaticInventory(FixedInventory):
    """A fixed inventory read once from a file of Node objects (``--nodes``)."""

    def __init__(self, nodes: Iterable[dict[str, Any]], config: Config, dra: Iterable[dict[str, Any]] = ()) -> None:
        super().__init__(snapshot_from_nodes(nodes, config, revision=1, dra=dra))
