"""An immutable view of the cluster's GPU nodes, swapped whole when the inventory changes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from .config import Config
from .inventory import NodeGPUs, node_gpus


@dataclass(frozen=True)
class Snapshot:
    """Nodes by name, free GPUs per node, and whether the source has synced at least once."""

    nodes: Mapping[str, NodeGPUs] = field(default_factory=dict)
    free: Mapping[str, int] = field(default_factory=dict)
    synced: bool = False
    revision: int = 0
    # namespace → its ``vramgate.io/enforcement`` label, for namespaces that carry one (cluster mode).
    enforcement: Mapping[str, str] = field(default_factory=dict)
    # node → capability class: nodes with the same class get the same verdict for any pod, so the
    # extender judges each class once per request. Ids are only meaningful within one snapshot.
    classes: Mapping[str, int] = field(default_factory=dict)
    # node → metadata.resourceVersion the snapshot's NodeGPUs was computed from (cluster mode).
    versions: Mapping[str, str] = field(default_factory=dict)

    def free_gpus(self, name: str) -> int:
        node = self.nodes.get(name)
        if node is None:
            return 0
        return self.free.get(name, node.allocatable)

    def gpu_nodes(self) -> list[NodeGPUs]:
        return [n for n in self.nodes.values() if n.is_gpu_node]


def capability(node: NodeGPUs) -> NodeGPUs:
    """The node without its name: equal (and equally hashed) for nodes that any pod judges alike."""
    return replace(node, name="", labels={})


class ClassTable:
    """Interns capabilities to small ints, so hot paths key memos on an int instead of a 14-field hash."""

    def __init__(self) -> None:
        self._ids: dict[NodeGPUs, int] = {}

    def __len__(self) -> int:
        return len(self._ids)

    def class_of(self, node: NodeGPUs) -> int:
        key = capability(node)
        found = self._ids.get(key)
        if found is None:
            found = self._ids[key] = len(self._ids)
        return found


def snapshot_from_nodes(
    nodes: Iterable[dict[str, Any]], config: Config, used: Mapping[str, int] | None = None, revision: int = 0
) -> Snapshot:
    """Build a snapshot from Node objects and GPUs in use per node (absent: all allocatable free)."""
    table = {}
    versions = {}
    for obj in nodes:
        info = node_gpus(obj, config)
        if info.name:
            table[info.name] = info
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            if isinstance(rv, str) and rv:
                versions[info.name] = rv
    used = used or {}
    free = {name: max(0, n.allocatable - used.get(name, 0)) for name, n in table.items()}
    interner = ClassTable()
    classes = {name: interner.class_of(n) for name, n in table.items()}
    return Snapshot(nodes=table, free=free, synced=True, revision=revision, classes=classes, versions=versions)


class InventorySource(Protocol):
    """Where the service's snapshot comes from: a fixed file or a live list+watch."""

    def snapshot(self) -> Snapshot: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class StaticInventory:
    """A fixed inventory read once from a file of Node objects (``--nodes``)."""

    def __init__(self, nodes: Iterable[dict[str, Any]], config: Config) -> None:
        self._snapshot = snapshot_from_nodes(nodes, config, revision=1)

    def snapshot(self) -> Snapshot:
        return self._snapshot

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None
