"""An immutable view of the cluster's GPU nodes, swapped whole when the inventory changes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
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

    def free_gpus(self, name: str) -> int:
        node = self.nodes.get(name)
        if node is None:
            return 0
        return self.free.get(name, node.allocatable)

    def gpu_nodes(self) -> list[NodeGPUs]:
        return [n for n in self.nodes.values() if n.is_gpu_node]


def snapshot_from_nodes(
    nodes: Iterable[dict[str, Any]], config: Config, used: Mapping[str, int] | None = None, revision: int = 0
) -> Snapshot:
    """Build a snapshot from Node objects and GPUs in use per node (absent: all allocatable free)."""
    table = {}
    for obj in nodes:
        info = node_gpus(obj, config)
        if info.name:
            table[info.name] = info
    used = used or {}
    free = {name: max(0, n.allocatable - used.get(name, 0)) for name, n in table.items()}
    return Snapshot(nodes=table, free=free, synced=True, revision=revision)


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
