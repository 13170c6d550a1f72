"""The nodes kube-scheduler's filter pass visits per pod, from the fleet alone: the bound on native mode's ratio.

kube-scheduler stops filtering once it has found ``numFeasibleNodesToFind`` feasible nodes (adaptive
``percentageOfNodesToScore``: 50 % − nodes/125, at least 5 %, at least 100 nodes; ``pkg/scheduler/schedule_one.go``,
``numFeasibleNodesToFind``), starting where the last cycle stopped. With nodes in no particular order it visits
about ``to_find × nodes / feasible`` of them. A pod as written is feasible on any node with enough free GPUs; a pod
placed correctly (by native mode's affinity, a hand-written selector, anything that keeps it off GPUs too small) only
on those that hold it, so the scheduler visits more nodes for it whoever wrote the constraint. ``scan`` computes both
for the bench's pod mix, with vramgate's own fit deciding what holds a pod: what the filter pass costs with any
correct placement, against the baseline ``native/default throughput`` is measured against.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import fleet

MIN_FEASIBLE_NODES = 100  # minFeasibleNodesToFind
MIN_FEASIBLE_PERCENT = 5  # minFeasibleNodesPercentageToFind


def feasible_to_find(nodes: int) -> int:
    """kube-scheduler's numFeasibleNodesToFind with the default (adaptive) percentageOfNodesToScore."""
    if nodes < MIN_FEASIBLE_NODES:
        return nodes
    percent = max(MIN_FEASIBLE_PERCENT, 50 - nodes // 125)
    return max(MIN_FEASIBLE_NODES, nodes * percent // 100)


def visited(nodes: int, feasible: int) -> int:
    """Nodes the filter pass visits to find its quota among ``feasible`` spread over ``nodes`` (all when too few)."""
    if feasible <= 0:
        return nodes
    return min(nodes, math.ceil(feasible_to_find(nodes) * nodes / feasible))


@dataclass(frozen=True)
class Scan:
    """Nodes visited per pod, averaged over the mix: the pods as written, and placed on GPUs that hold them."""

    as_written: float
    placed: float
    by_shape: dict[str, tuple[int, int, int, int]]  # shape → (feasible as written, placed, visited, visited)

    @property
    def ratio(self) -> float:
        return self.placed / self.as_written if self.as_written else math.nan


def scan(node_objects: Sequence[dict[str, Any]], used: Mapping[str, int],
         mix: Sequence[fleet.PodShape] = fleet.POD_MIX) -> Scan:
    """``used``: GPUs already taken per node. Shapes no GPU holds count only as written (native never creates them)."""
    from webhook.cluster.snapshot import snapshot_from_nodes
    from webhook.config import Config
    from webhook.decide.demand import read_demand
    from webhook.decide.placement import Need, fit
    from webhook.kinds import pod_view
    from webhook.models.catalog import builtin_catalog

    config, catalog = Config(), builtin_catalog()
    snap = snapshot_from_nodes(node_objects, config, used=used)
    n = len(node_objects)
    names = [o["metadata"]["name"] for o in node_objects]
    free = {name: fleet.gpu_devices(o) - used.get(name, 0) for name, o in zip(names, node_objects, strict=True)}
    by_shape: dict[str, tuple[int, int, int, int]] = {}
    written = placed = placed_share = 0.0
    for shape in mix:
        pod = fleet.shape_pod(shape, "default-scheduler", "bound")
        view = pod_view(pod)
        demand = read_demand(view, config, catalog) if view is not None else None
        assert demand is not None, shape
        need = Need.of(demand)
        fits_free = [name for name in names if free[name] >= shape.gpus]
        holds = [name for name in fits_free if fit(need, snap.nodes[name], snap.free_gpus(name)).fits]
        v_written, v_placed = visited(n, len(fits_free)), visited(n, len(holds))
        by_shape[shape.name] = (len(fits_free), len(holds), v_written, v_placed)
        written += shape.share * v_written
        if holds:
            placed += shape.share * v_placed
            placed_share += shape.share
    total = sum(s.share for s in mix)
    return Scan(written / total, placed / placed_share if placed_share else math.nan, by_shape)
