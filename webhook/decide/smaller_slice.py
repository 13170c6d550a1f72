"""A smaller MIG profile (or AMD partition) that holds what an admitted pod asks a larger one for, and what it frees.

People request ``3g.40gb`` by hand for a model ``1g.10gb`` holds (issue #41). A slice's share of its GPU is its
compute-slice count ``<g>`` over the GPU's (7 on A100/H100/H200/B200, 4 on A30, by the node's product: a node
partitioned into 1g/2g/3g slices names no 7g profile); AMD partitions split a GPU evenly, so their share is
memory over the product's memory.
Only pods that ask slices are looked at (their nodes were scanned for the verdict already), and a profile counts
only where a node offers as many slices as the pod asks.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from fractions import Fraction

from ..cluster.accelerators import slice_resource
from ..cluster.inventory import NodeGPUs
from ..cluster.mig import MigProfile
from ..units.quantity import format_gib
from .placement import Need

_COMPUTE = re.compile(r"^(?:\d+c\.)?(\d+)g\.", re.IGNORECASE)
MIG_SLICES = 7
A30_SLICES = 4


def _share(profile: MigProfile, node: NodeGPUs, vendor: str) -> Fraction | None:
    """The profile's share of one GPU: compute slices for MIG, memory for AMD partitions."""
    if vendor == "amd":
        return Fraction(profile.memory_mib, node.vram_mib) if node.vram_mib > 0 else None
    m = _COMPUTE.match(profile.name)
    if m is None:
        return None
    whole = A30_SLICES if "A30" in (node.product or "").upper() else MIG_SLICES
    return Fraction(int(m.group(1)), max(whole, int(m.group(1))))


def _smallest_holding(need: Need, nodes: Iterable[NodeGPUs], skip: set[str], wanted: int
                      ) -> tuple[Fraction, int, str, str] | None:
    """(share, MiB, profile, node) of the smallest-share profile that holds ``wanted`` MiB, or None."""
    best: tuple[Fraction, int, str, str] | None = None
    for n in nodes:
        if n.vendor != need.vendor:
            continue
        for p in n.mig_profiles:
            room = max(p.capacity, p.labelled_count)
            if p.name in skip or p.memory_mib <= 0 or room < need.gpus or wanted > need.usable_on(p.memory_mib):
                continue
            share = _share(p, n, need.vendor)
            if share is not None and (best is None or (share, p.memory_mib) < best[:2]):
                best = (share, p.memory_mib, p.name, n.name)
    return best


def whole_gpu_warnings(need: Need, sliced: Iterable[NodeGPUs]) -> list[str]:
    """For a pod asking one whole GPU where the cluster has slices by profile: the smallest slice that holds it,
    and the share of a GPU it would free; [] when none holds it, or the pod is not a one-GPU pod."""
    if need.mig or need.gpus != 1 or need.per_gpu_mib is None or need.claims or need.extended or need.unit:
        return []
    wanted = max(need.per_gpu_mib, need.expected or 0)
    best = _smallest_holding(need, sliced, set(), wanted)
    if best is None or best[0] >= 1:
        return []
    share, mib, name, node = best
    return [f"a {'partition' if need.vendor == 'amd' else 'MIG slice'} holds it: {slice_resource(need.vendor, name)} "
            f"({format_gib(mib)} GiB, {share} of a GPU) on node {node}, for the {format_gib(wanted)} GiB it needs; "
            f"asking it instead of a whole GPU would free {1 - share} of a GPU per replica "
            f"({float(1 - share):.2f} GPU-hours an hour)"]


def smaller_slice_warnings(need: Need, nodes: Iterable[NodeGPUs]) -> list[str]:
    """For a pod asking slices: the smallest profile in the cluster that holds its estimate (the band's high end),
    when it is a smaller share of a GPU than the smallest one asked; [] otherwise."""
    if not need.mig or need.per_gpu_mib is None:
        return []
    wanted = max(need.per_gpu_mib, need.expected or 0)
    asked = {name for name, _ in need.mig}
    nodes = list(nodes)
    shares = [share for n in nodes for p in n.mig_profiles if p.name in asked
              and (share := _share(p, n, need.vendor)) is not None]
    asked_share = min(shares, default=None)
    best = _smallest_holding(need, nodes, asked, wanted)
    if best is None or asked_share is None or best[0] >= asked_share:
        return []
    share, mib, name, node = best
    freed = (asked_share - share) * need.gpus
    asked_names = ", ".join(slice_resource(need.vendor, a) for a in sorted(asked))
    return [f"a smaller slice holds it: {slice_resource(need.vendor, name)} ({format_gib(mib)} GiB, {share} of a GPU) "
            f"on node {node}, for the {format_gib(wanted)} GiB it needs; {asked_names} takes {asked_share} of a GPU, "
            f"so each replica would free {freed} of a GPU ({float(freed):.2f} GPU-hours an hour)"]
