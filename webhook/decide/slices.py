"""Accelerator slices that span hosts (GKE TPU topologies): where one host's chips are weak grounds to reject on."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..cluster.accelerators import topology_chips, vendor_named
from ..cluster.inventory import NodeGPUs
from ..kinds import PodView
from .selectors import node_selector, required_terms

if TYPE_CHECKING:  # demand reads a pod's slice from here
    from .demand import Demand


def asked_topologies(spec: dict[str, Any], annotations: dict[str, str], keys: tuple[str, ...]) -> list[str]:
    """The slice topologies a pod selects: its nodeSelector, then required affinity ``In`` values of these keys,
    then its annotations of the same family (``cloud.google.com/gke-tpu-…topology``: published JobSets ask a
    super-slice so, with only the accelerator selected)."""
    found = [v for k, v in node_selector(spec).items() if k in keys]
    for term in required_terms(spec) or []:
        for expr in (term.get("matchExpressions") or []) if isinstance(term, dict) else []:
            if isinstance(expr, dict) and expr.get("key") in keys and expr.get("operator") == "In":
                found.extend(str(v) for v in expr.get("values") or [])
    families = tuple(k.rsplit("-", 1)[0] for k in keys)
    found.extend(v for k, v in annotations.items() if k.startswith(families) and k.endswith("topology"))
    return found


def spans_hosts(demand: Demand, nodes: Iterable[NodeGPUs]) -> str | None:
    """Why ``demand``'s need per chip may be held with other hosts of its slice, or None where its slice is one host.

    A TPU pod asks the chips of its own host (``google.com/tpu: 4``), but a model served on a multi-host slice
    (``4x4``: 16 chips over 4 hosts) is sharded over all of them, so a per-chip need priced on the pod's own chips
    may be 4 times too high. The pod's slice is one host when the topology it selects has no more chips than it
    asks, or, where it selects none, when every node of its vendor is a one-host slice.
    """
    vendor = vendor_named(demand.vendor)
    if vendor is None or not vendor.topology_labels:
        return None
    asked = asked_topologies(demand.view.spec, demand.view.annotations, vendor.topology_labels)
    # The chips the estimate already spreads the model over (the pods of its group: an LWS, or the hosts of the
    # slice it selects, read in demand), unless the engine's flags priced it over fewer.
    held = demand.estimate.request.gpus if demand.estimate is not None else demand.gpus * max(demand.group_size, 1)
    if asked:
        wide = [t for t in asked if topology_chips(t) == 0 or topology_chips(t) > held]
        if not wide:
            return None
        t = wide[0]
        chips = topology_chips(t)
        if not chips:
            return f"its slice topology {t} is not one vramgate reads; the model may span other hosts' chips"
        return (f"its slice topology {t} has {chips} chips and the pod asks {demand.gpus}: the model may be "
                f"sharded over {-(-chips // max(demand.gpus, 1))} hosts, which one host's chips cannot show")
    own = [n for n in nodes if n.vendor == demand.vendor and n.is_gpu_node]
    multi = [n for n in own if not n.topology or topology_chips(n.topology) != max(n.capacity, n.labelled_count)]
    if not multi:
        return None
    n = multi[0]
    where = f"node {n.name} is in a {n.topology} slice" if n.topology else f"node {n.name} says no slice topology"
    return (f"the pod selects no slice topology ({', '.join(vendor.topology_labels)}) and {where}; the model may "
            "span other hosts' chips")


def slice_pods(view: PodView, vendor: str, chips: int) -> tuple[int, str] | None:
    """(pods, topology) where the pod selects one slice topology over several hosts of ``chips`` each (a ``2x4``
    slice of 8 chips on pods of 4: 2 pods hold it), else None. The model is one SPMD program over the slice."""
    v = vendor_named(vendor)
    if v is None or not v.topology_labels or chips < 1:
        return None
    asked = set(asked_topologies(view.spec, view.annotations, v.topology_labels))
    if len(asked) != 1:
        return None
    t = asked.pop()
    total = topology_chips(t)
    return (total // chips, t) if total > chips and total % chips == 0 else None
