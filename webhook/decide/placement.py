"""Placement decisions: does a node fit a demand (and why not), can any node ever, and how well."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from ..cluster.accelerators import NVIDIA, resource_of, slice_resource, vendor_named
from ..cluster.dra import Device, Request, matching
from ..cluster.inventory import NodeGPUs, vram_missing
from ..config import PlacementMode
from ..engines import engine_named, max_context, suggest
from ..engines import estimate as run_estimate
from ..engines.measured import chance_to_fit
from ..models.vram import EstimateRequest, round_context
from ..units.cuda import CudaVersion, format_cuda, min_driver_major
from ..units.precision import DOWNGRADES, PRECISIONS
from ..units.quantity import format_gib
from .demand import Demand, UtilRule

MAX_SCORE = 10


class Code(StrEnum):
    """Why a node does or does not fit. The extender's per-node reasons start with these.

    VRAM_UNKNOWN never fails a node: it is the admission code of a workload admitted unchecked
    because only nodes of unknown VRAM could hold it.
    """

    FITS = "Fits"
    NO_GPUS = "NoGPUs"
    NO_DEVICE_PLUGIN = "NoDevicePlugin"
    GPU_FAULT = "GPUFault"
    VRAM_UNKNOWN = "VRAMUnknown"
    VRAM_TOO_SMALL = "VRAMTooSmall"
    TOO_FEW_GPUS = "TooFewGPUs"
    DRIVER_TOO_OLD = "DriverTooOld"
    GPUS_BUSY = "GPUsBusy"


RESOLVABLE = frozenset({Code.GPUS_BUSY})


@dataclass(frozen=True)
class Need:
    """The part of a demand placement looks at; built once per request."""

    gpus: int
    per_gpu_mib: int | None  # what must fit: the low end of the estimate's band
    utilization: float = 1.0
    cuda: CudaVersion | None = None
    expected_mib: int | None = None  # the estimate's middle, for scores and warnings
    claims: tuple[Request, ...] = ()  # DRA device requests: judged on each node's devices, not nvidia.com/gpu
    # The engine's usable share by the GPU's memory, where the engine sets it so (SGLang's mem_fraction_static);
    # ``utilization`` is then the figure for a GPU not yet known.
    util_rule: UtilRule | None = None
    # MIG slices asked under the mixed strategy, (profile, slices): judged on each node's slices of the profile.
    mig: tuple[tuple[str, int], ...] = ()
    vendor: str = NVIDIA  # whose GPUs: a node of another vendor offers none
    unit: str = ""  # the vendor's core resource the pod asks (aws.amazon.com/neuroncore), "" for devices
    # A plain extended resource a DeviceClass serves (Demand.extended): where no device plugin offers it, the
    # scheduler allocates that class's devices, so those nodes are judged on them (for_extended).
    extended: tuple[Request, ...] = ()

    @classmethod
    def of(cls, demand: Demand) -> Need:
        return cls(demand.gpus, demand.min_per_gpu_mib, demand.utilization, demand.cuda, demand.per_gpu_mib,
                   demand.claims, demand.util_rule, demand.mig, demand.vendor, demand.unit, demand.extended)

    def util_on(self, vram_mib: float) -> float:
        """The share of a GPU of ``vram_mib`` MiB the engine uses."""
        rule = self.util_rule
        return self.utilization if rule is None or vram_mib <= 0 else rule(vram_mib)

    def usable_on(self, vram_mib: float) -> float:
        return vram_mib * self.util_on(vram_mib)

    @property
    def expected(self) -> int | None:
        return self.expected_mib if self.expected_mib is not None else self.per_gpu_mib

    @property
    def min_driver(self) -> int | None:
        return min_driver_major(self.cuda) if self.cuda else None


@dataclass(frozen=True)
class NodeFit:
    """A node's verdict for one pod."""

    node: str
    code: Code
    reason: str

    @property
    def fits(self) -> bool:
        return self.code is Code.FITS

    @property
    def resolvable(self) -> bool:
        """Whether preemption or waiting could make it fit (only busy GPUs can be freed)."""
        return self.code in RESOLVABLE


def for_claims(need: Need, node: NodeGPUs) -> NodeGPUs:
    """The node as a pod with DRA claims sees it: only the devices its requests could get count.

    Capacity is the number of matching devices; VRAM is the smallest of those that hold the per-GPU
    need when enough do, else the memory of the best device the pod would have to take (so the VRAM
    check fails with that device named). Devices with a NoSchedule/NoExecute taint are not allocatable.
    Requests of one pod are judged on the union of the devices they could match.
    """
    if not need.claims:
        return node
    devices = _matched(need.claims, node)
    if not devices:
        # A node's MIG slices under the mixed strategy are device-plugin resources: no claim gets them either.
        return replace(node, capacity=0, allocatable=0, labelled=False, plugin_missing=False, labelled_count=0,
                       vram_mib=0, dra=(), unhealthy_gpus=0, mig_profiles=())
    return replace(node, **_as_devices(need, node, devices))


def _matched(requests: Iterable[Request], node: NodeGPUs) -> list[Device]:
    """The node's devices any choice of ``requests`` could get, largest first."""
    seen: dict[tuple[str, str, str], Device] = {}
    for req in requests:
        for choice in req.choices():
            for d in matching(choice, node.dra).devices:
                seen.setdefault((d.driver, d.pool, d.name), d)
    return sorted(seen.values(), key=lambda d: -d.memory_mib)


def _as_devices(need: Need, node: NodeGPUs, devices: list[Device]) -> dict[str, Any]:
    """The NodeGPUs fields that make ``node`` the matching ``devices`` (largest first, at least one) as
    :func:`for_claims` says."""
    per = need.per_gpu_mib
    big = [d for d in devices if per is None or d.memory_mib <= 0 or need.usable_on(d.memory_mib) >= per]
    if len(big) >= need.gpus:
        chosen = big
        known = [d.memory_mib for d in big if d.memory_mib > 0]
        vram = min(known) if known else 0
        top = next((d for d in big if d.memory_mib == vram), big[0])
    else:
        chosen = devices
        top = devices[min(need.gpus, len(devices)) - 1]
        vram = top.memory_mib
    healthy = [d for d in chosen if d.taint is None]
    health, reason = node.health, node.health_reason
    if not healthy and node.fault is None:
        health, reason = "unhealthy", f"every matching device is tainted ({chosen[0].taint})"
    return {"capacity": len(chosen), "allocatable": len(healthy), "labelled": False, "plugin_missing": False,
            "labelled_count": 0, "vram_mib": vram, "product": top.label, "dra": tuple(chosen), "health": health,
            "health_reason": reason, "unhealthy_gpus": len(chosen) - len(healthy)}


# vram_source of a node as for_extended shows it (so showing it again changes nothing).
EXTENDED_SOURCE = "dra DeviceClass"


def dra_served(need: Need, node: NodeGPUs) -> bool:
    """Whether the scheduler serves the pod's extended resource on ``node`` from DRA devices: the node has none of it
    in status.allocatable (no device plugin for it) and devices the serving DeviceClass matches
    (noderesources/fit.go ``shouldDelegateResourceToDRA``, dynamicresources ``filterExtendedResources``, v1.37.2)."""
    return _may_serve(need, node) and any(matching(r, node.dra).devices for r in need.extended)


def _may_serve(need: Need, node: NodeGPUs) -> bool:
    if not need.extended or not node.dra or node.vram_source.startswith(EXTENDED_SOURCE):
        return False
    return not (node.allocatable > 0 and node.vendor == need.vendor)  # else the device plugin serves it there


def for_extended(need: Need, node: NodeGPUs) -> NodeGPUs:
    """The node as a pod asking a DRA-backed extended resource sees it: where :func:`dra_served`, only the devices
    of the serving class count, as for a claim (:func:`for_claims`); elsewhere the node as it is.

    The scheduler's claim has the class's selectors and nothing else: no memory floor, so on a node whose matching
    devices differ in size it may get the smaller one (docs/dra.md).
    """
    if not _may_serve(need, node):
        return node
    devices = _matched(need.extended, node)
    if not devices:
        return node
    changes = _as_devices(need, node, devices)
    classes = ", ".join(sorted({r.class_name for r in need.extended}))
    changes.update(vendor=need.vendor, vram_source=f"{EXTENDED_SOURCE} {classes}",
                   product=f"{changes['product'] or 'device'} via DRA DeviceClass {classes}")
    return replace(node, **changes)


def for_vendor(need: Need, node: NodeGPUs) -> NodeGPUs:
    """The node as a pod of ``need.vendor`` sees it: another vendor's GPUs are none of the pod's (an amd.com/gpu
    pod never lands on an NVIDIA node, nor an nvidia.com/gpu pod on an AMD one)."""
    if node.vendor == need.vendor or not node.is_gpu_node or need.claims:
        return node
    return replace(node, capacity=0, allocatable=0, labelled_count=0, mig_profiles=(), unhealthy_gpus=0,
                   plugin_missing=False, product=f"{node.product or 'GPU'} ({node.vendor}, not {need.vendor})")


def for_unit(need: Need, node: NodeGPUs) -> NodeGPUs:
    """The node as a pod asking the vendor's cores (``aws.amazon.com/neuroncore``) sees it: its cores, each with its
    share of a device's memory (a device's memory over the node's cores per device). Idempotent."""
    if not need.unit or node.vendor != need.vendor:
        return node
    c = node.cores
    if c is None or c.resource != need.unit:
        return replace(node, capacity=0, allocatable=0, labelled_count=0, unhealthy_gpus=0,
                       product=f"{node.product or 'device'} (no {need.unit})")
    return replace(node, capacity=c.capacity, allocatable=c.allocatable, labelled_count=c.labelled_count,
                   unhealthy_gpus=max(0, c.capacity - c.allocatable), vram_mib=c.vram_mib,
                   product=f"{node.product or 'device'} core",
                   vram_source=f"{node.vram_source}, a core's share" if c.vram_mib else "unknown")


def own_vendor(need: Need, nodes: Sequence[NodeGPUs]) -> Sequence[NodeGPUs]:
    """Every node as a pod of ``need.vendor`` sees it (:func:`for_vendor`); ``nodes`` itself when one vendor."""
    if any(n.vendor != need.vendor for n in nodes):
        return [for_vendor(need, n) for n in nodes]
    return nodes


def for_mig(need: Need, node: NodeGPUs) -> NodeGPUs:
    """The node as a pod asking MIG slices sees it: only the slices of the profiles it asks count.

    Capacity (allocatable, the GFD count) counts the asked slices the node has, up to what the pod asks per
    profile, so a node short of one profile has fewer than ``need.gpus``; VRAM is the smallest asked profile's
    memory, the product names the slice (``NVIDIA-A100-80GB-PCIe-MIG-1g.10gb``). A node without the profile
    offers none of it: too few GPUs, however large its whole GPUs are.
    """
    if not need.mig:
        return node
    capacity = allocatable = labelled = 0
    memories: list[tuple[int, str]] = []
    for name, asked in need.mig:
        p = node.mig_profile(name)
        if p is None:
            continue
        capacity += min(p.capacity, asked)
        allocatable += min(p.allocatable, asked)
        labelled += min(p.labelled_count, asked)
        memories.append((p.memory_mib, p.product or f"{node.product or 'GPU'} MIG {p.name}"))
    vram, product = min(memories) if memories else (0, f"no MIG {', '.join(n for n, _ in need.mig)}")
    plugin_missing = bool(memories) and capacity == 0 and labelled > 0
    health, reason = node.health, node.health_reason
    if node.fault is None and memories and not plugin_missing and allocatable == 0 and capacity > 0:
        health, reason = "unhealthy", f"0 of {capacity} {_mig_names(need)} slices allocatable"
    elif node.fault is None and health == "unhealthy" and allocatable > 0:
        health = "healthy"
    return replace(node, capacity=capacity, allocatable=allocatable, labelled_count=labelled, vram_mib=vram,
                   product=product, plugin_missing=plugin_missing, unhealthy_gpus=capacity - allocatable,
                   labelled=node.labelled or bool(node.mig_profiles), health=health, health_reason=reason,
                   vram_source=("gfd" if need.vendor != "amd" else "amd product") if vram else "unknown")


def _mig_names(need: Need) -> str:
    return ", ".join(slice_resource(need.vendor, name) for name, _ in need.mig)


def _slice_words(need: Need) -> tuple[str, str]:
    """(what one slice is called, the whole device's resource): MIG's, or AMD's partitions under mixed naming."""
    return ("MIG", "nvidia.com/gpu") if need.vendor != "amd" else ("AMD partition", "amd.com/gpu")


def usable_mib(node: NodeGPUs, need: Need) -> float:
    return need.usable_on(node.vram_mib)


def fit(need: Need, node: NodeGPUs, free: int | None = None, *, ever: bool = False) -> NodeFit:
    """Whether ``node`` can hold the pod now (``free`` GPUs) or, with ``ever``, on an idle healthy day."""
    if need.claims:
        # The DRA plugin in the scheduler tracks allocated devices; vramgate judges capability and health.
        node, free = for_claims(need, node), None
    if need.extended and (seen := for_extended(need, node)) is not node:
        node, free = seen, None  # likewise for the claim it makes for the extended resource
    if need.mig:
        # kube-scheduler counts each profile's free slices (an extended resource); vramgate judges capability.
        node, free = for_mig(need, node), None
    if need.unit:
        # Cores, not devices: kube-scheduler counts the free cores; vramgate judges capability.
        node, free = for_unit(need, node), None
    name = node.name
    if node.vendor != need.vendor and node.is_gpu_node and not need.claims:
        return NodeFit(name, Code.NO_GPUS, f"{node.vendor} GPUs; the pod asks {need.vendor} GPUs")
    if not node.is_gpu_node:
        return NodeFit(name, Code.NO_GPUS, "no GPUs")
    if not ever:
        if node.plugin_missing:
            return NodeFit(name, Code.NO_DEVICE_PLUGIN, f"GPU labels but no {_resource(node.vendor)}: device plugin "
                           "not running")
        if node.health == "unhealthy":
            return NodeFit(name, Code.GPU_FAULT, node.health_reason)
    count = node.capacity if ever else node.allocatable
    if ever and node.plugin_missing:
        count = node.labelled_count
    if count < need.gpus:
        what = "GPUs" if ever else "healthy GPUs"
        if need.mig:
            what = f"{_mig_names(need)} slices" + ("" if ever else " healthy")
        return NodeFit(name, Code.TOO_FEW_GPUS, f"{count} {what}, pod needs {need.gpus}")
    # Unknown VRAM never fails a node: the pod may land there, unchecked (and scored low).
    if need.per_gpu_mib is not None and node.vram_mib > 0 and need.per_gpu_mib > usable_mib(node, need):
        return NodeFit(
            name, Code.VRAM_TOO_SMALL,
            f"needs {_gib(need.per_gpu_mib)} GiB per GPU, {node.product or 'GPU'} has {_gib(node.vram_mib)} GiB"
            + (f" ({util:g} usable)" if (util := need.util_on(node.vram_mib)) < 1 else ""),
        )
    min_driver = need.min_driver
    if min_driver is not None and node.driver_major is not None and node.driver_major < min_driver:
        return NodeFit(
            name, Code.DRIVER_TOO_OLD,
            f"driver {node.driver_major} < {min_driver} needed by CUDA {format_cuda(need.cuda)}"  # type: ignore[arg-type]
        )
    if not ever and free is not None and free < need.gpus:
        return NodeFit(name, Code.GPUS_BUSY, f"{free} of {node.allocatable} GPUs free, pod needs {need.gpus}")
    if need.per_gpu_mib is not None and node.vram_mib <= 0:
        return NodeFit(name, Code.FITS, "fits; VRAM unknown, not checked")
    return NodeFit(name, Code.FITS, "fits")


def _resource(vendor: str) -> str:
    """The resource a node of ``vendor`` advertises, for reasons (NVIDIA's: the default config's)."""
    return resource_of(vendor, "nvidia.com/gpu")


def fits_ever(need: Need, node: NodeGPUs) -> bool:
    """``fit(need, node, ever=True).fits`` without building reasons: the admission hot path."""
    node = for_mig(need, for_claims(need, node))
    if need.unit:
        node = for_unit(need, node)
    if need.extended:
        node = for_extended(need, node)
    if not node.is_gpu_node or (node.vendor != need.vendor and not need.claims):
        return False  # another vendor's GPUs are none of the pod's, as fit() says
    count = node.labelled_count if node.plugin_missing else node.capacity
    if count < need.gpus:
        return False
    per_gpu = need.per_gpu_mib
    if per_gpu is not None and node.vram_mib > 0 and per_gpu > need.usable_on(node.vram_mib):
        return False
    min_driver = need.min_driver
    return not (min_driver is not None and node.driver_major is not None and node.driver_major < min_driver)


def _gib(mib: float) -> str:
    return format_gib(mib)


def score(need: Need, node: NodeGPUs, free: int, mode: PlacementMode = "binpack") -> int:
    """0–10: binpack prefers the tightest VRAM and the fewest GPUs left free; spread the opposite.

    A node whose VRAM is unknown scores 0 for a pod that needs VRAM: any node known to hold it comes first.
    """
    if need.claims or need.mig or need.unit:
        node = for_unit(need, for_mig(need, for_claims(need, node)))
        free = node.allocatable
    if need.extended and (seen := for_extended(need, node)) is not node:
        node, free = seen, seen.allocatable
    if need.per_gpu_mib is not None and node.vram_mib <= 0:
        return 0
    if need.per_gpu_mib is not None:
        leftover = max(0.0, node.vram_mib - need.per_gpu_mib) / node.vram_mib
    else:
        leftover = 0.5
    gpus_left = max(0, free - need.gpus) / max(node.allocatable, 1)
    tight = 0.7 * (1 - leftover) + 0.3 * (1 - gpus_left)
    value = tight if mode == "binpack" else 1 - tight
    return max(0, min(MAX_SCORE, round(MAX_SCORE * value)))


@dataclass(frozen=True)
class Fitting:
    """The nodes that can ever hold ``need``, in the order given (largest VRAM first), found as they are read.

    Admission usually needs only the first one that a pod's own selector admits, so nothing is
    listed up front: iterating scans ``nodes`` afresh.
    """

    need: Need
    nodes: Sequence[NodeGPUs]

    def __iter__(self) -> Iterator[NodeGPUs]:
        need = self.need
        return (n for n in self.nodes if fits_ever(need, n))


@dataclass(frozen=True)
class ClusterVerdict:
    """Admission's answer: can any node ever hold the workload; if not, why, and what would.

    An admitting verdict carries the nodes that can ever hold it (``fitting``) for the rules that follow.
    """

    admit: bool
    code: Code
    message: str
    best_node: str | None = None
    suggestions: tuple[str, ...] = ()
    fitting: Fitting | None = None


def cluster_verdict(demand: Demand, nodes: Iterable[NodeGPUs]) -> ClusterVerdict:
    """Judge a demand against every GPU node's capability, ignoring current use and health.

    Unknown VRAM never rejects: when only nodes of unknown VRAM could hold the workload, it is
    admitted with a message naming what each lacks. It is rejected for VRAM only when every node
    with enough GPUs declares its VRAM and it is too small.
    """
    need = Need.of(demand)
    given: Sequence[NodeGPUs] = nodes if isinstance(nodes, list | tuple) else list(nodes)
    verdict = _cluster_verdict(demand, need, given)
    return replace(verdict, fitting=Fitting(need, given)) if verdict.admit else verdict


def _cluster_verdict(demand: Demand, need: Need, nodes: Sequence[NodeGPUs]) -> ClusterVerdict:
    if need.claims:
        nodes = list(nodes)
        with_devices = [n for n in nodes if n.dra]
        nodes = [for_claims(need, n) for n in nodes]
        if with_devices and not any(n.is_gpu_node for n in nodes):
            asked = ", ".join(sorted({f"{r.claim}/{r.name} ({r.class_name or 'unknown class'})"
                                      for r in need.claims}))
            kinds = sorted({d.label for n in with_devices for d in n.dra})
            return ClusterVerdict(False, Code.TOO_FEW_GPUS, (
                f"{demand.view.ref}: no device in the cluster matches its claims {asked}; the ResourceSlices "
                f"offer {', '.join(kinds[:5])}{', …' if len(kinds) > 5 else ''}. "
                "Try: a DeviceClass or selector these devices satisfy"))
    if need.extended:
        # Nodes without a device plugin for the resource, as the scheduler serves it there: the class's devices.
        # Lazily first, as below: admitting stops at the first node that holds it.
        views: list[NodeGPUs] = []
        for n in nodes:
            seen = for_extended(need, n)
            if seen.is_gpu_node and fits_ever(need, seen) and (seen.vram_mib > 0 or need.per_gpu_mib is None):
                return _maybe_tight(demand, need, nodes, seen)
            views.append(seen)
        nodes = views
    whole = nodes
    if need.mig:
        # Each node as the pod sees it: the asked profile's slices at the profile's memory.
        nodes = [for_mig(need, n) for n in nodes]
    if need.unit:
        # Each node in the cores the pod asks, at a core's share of the device's memory.
        nodes = [for_unit(need, n) for n in nodes]
    # The admit path is lazy: with nodes largest first (Snapshot.by_vram) it stops after a node or
    # two, so admitting a pod costs the same at 10 or 10,000 nodes (fits_ever refuses another vendor's node
    # itself). Lists are built only to reject, and only then is every node seen as this pod's vendor sees it.
    seq = nodes
    unknown: list[NodeGPUs] = []
    for n in seq:
        if n.is_gpu_node and fits_ever(need, n):
            if n.vram_mib > 0 or need.per_gpu_mib is None:
                return _maybe_tight(demand, need, seq, n)
            unknown.append(n)
    whole, seq = own_vendor(need, whole), own_vendor(need, seq)
    gpu_nodes = [n for n in seq if n.is_gpu_node]
    if not gpu_nodes:
        if need.claims:
            return ClusterVerdict(True, Code.FITS, "no DRA devices in the inventory (no ResourceSlices in view); "
                                  "the pod's claims are not checked")
        return ClusterVerdict(True, Code.FITS, "no GPU nodes in the inventory; not checked")
    who = demand.view.ref
    if unknown and need.per_gpu_mib is not None:
        shown = "; ".join(vram_missing(n) for n in unknown[:3]) + ("; …" if len(unknown) > 3 else "")
        msg = (f"{who}: needs {_gib(need.per_gpu_mib)} GiB VRAM per GPU, not checked: "
               f"{'no node of known VRAM can hold it and ' if any(n.vram_mib > 0 for n in gpu_nodes) else ''}"
               f"{len(unknown)} node(s) with enough GPUs have unknown VRAM ({shown}). "
               + _vram_fix(need.vendor))
        return ClusterVerdict(True, Code.VRAM_UNKNOWN, msg, best_node=unknown[0].name)
    fits = [fit(need, n, ever=True) for n in gpu_nodes]
    if all(f.code is Code.NO_GPUS for f in fits):
        # Every accelerator node is another vendor's: an amd.com/gpu pod on NVIDIA nodes, a habana.ai/gaudi pod on TPUs.
        asked = need.unit or resource_of(need.vendor, "nvidia.com/gpu")
        others = [n for n in nodes if n.is_gpu_node]  # as they are, not as this pod's vendor sees them
        first = others[0] if others else gpu_nodes[0]
        msg = (f"{who}: asks {asked} ({need.vendor}), and no node in the cluster offers it: its accelerator nodes "
               f"are {', '.join(sorted({n.vendor for n in gpu_nodes}))}'s ({first.name}, "
               f"{first.product or 'unknown product'}{', …' if len(gpu_nodes) > 1 else ''}). "
               f"Try: nodes with {asked}, or the resource these nodes offer")
        return ClusterVerdict(False, Code.NO_GPUS, msg)
    if any(f.code is Code.NO_GPUS for f in fits):
        # Judged on its own vendor's nodes only: another vendor's are no reason (nor its largest GPU a measure).
        kept = [(n, f) for n, f in zip(gpu_nodes, fits, strict=True) if f.code is not Code.NO_GPUS]
        gpu_nodes, fits = [n for n, _ in kept], [f for _, f in kept]
    if need.mig and not any(f.code is Code.DRIVER_TOO_OLD for f in fits):
        return _mig_verdict(demand, need, [n for n in whole if n.is_gpu_node], gpu_nodes)
    largest = max(gpu_nodes, key=lambda n: (n.vram_mib, n.capacity))
    too_small = all(f.code in (Code.VRAM_TOO_SMALL, Code.TOO_FEW_GPUS) for f in fits)
    if need.per_gpu_mib is not None and largest.vram_mib > 0 and too_small and not _vram_ok_anywhere(need, gpu_nodes):
        tips = suggestions(demand, gpu_nodes)
        usable = ""
        if (largest_util := need.util_on(largest.vram_mib)) < 1:
            usable = f", {_gib(largest.vram_mib * largest_util)} GiB usable at gpu-memory-utilization " \
                     f"{largest_util:g}"
        msg = (f"{who}: needs {_gib(need.expected or need.per_gpu_mib)} GiB VRAM per GPU ({_breakdown(demand)}"
               f"{_at_least(need)}); the largest GPU in the cluster has {_gib(largest.vram_mib)} GiB "
               f"({largest.name}, {largest.product or 'unknown product'}{usable}). "
               f"Try: {'; '.join(tips) if tips else 'a node with larger GPUs'}")
        if need.claims:
            msg = _claim_words(msg)
        if need.extended:
            msg += _extended_words(need, gpu_nodes)
        return ClusterVerdict(False, Code.VRAM_TOO_SMALL, msg, suggestions=tuple(tips))
    if any(f.code is Code.TOO_FEW_GPUS for f in fits) and not any(f.code is Code.DRIVER_TOO_OLD for f in fits):
        most = max(gpu_nodes, key=lambda n: (n.capacity, n.vram_mib))
        msg = (f"{who}: needs {need.gpus} GPUs on one node"
               + (f" with {_gib(need.per_gpu_mib)} GiB VRAM each" if need.per_gpu_mib is not None else "")
               + f"; no node has that (most: {most.capacity} on {most.name}, {most.product or 'unknown product'}, "
               f"{_gib(most.vram_mib) + ' GiB' if most.vram_mib > 0 else 'VRAM unknown'} each). "
               "Try: fewer GPUs per pod with a smaller precision or context, "
               "or nodes with more GPUs")
        return ClusterVerdict(False, Code.TOO_FEW_GPUS, msg)
    old = [n for n, f in zip(gpu_nodes, fits, strict=True) if f.code is Code.DRIVER_TOO_OLD]
    newest = max((n.driver_major or 0 for n in old), default=0)
    msg = (f"{who}: needs CUDA {format_cuda(need.cuda) if need.cuda else '?'} (NVIDIA driver ≥ {need.min_driver}); "
           f"the nodes whose GPUs can hold it run driver {newest} at most. "
           f"Try: an image built for an older CUDA, or nodes with driver ≥ {need.min_driver}")
    return ClusterVerdict(False, Code.DRIVER_TOO_OLD, msg)


def _vram_fix(vendor: str) -> str:
    """How to make a vendor's nodes say their GPU memory."""
    other = vendor_named(vendor) if vendor != NVIDIA else None
    if other is not None and other.memory_labels:
        return (f"Fix: deploy {vendor}'s node labeller ({other.memory_labels[0]}, GiB such as 192G), or name the "
                f"product in {other.product_labels[0] if other.product_labels else 'its product label'}")
    return ("Fix: deploy GPU Feature Discovery, label the nodes nvidia.com/gpu.memory (MiB), "
            "or map your own label in the config (labels.memory_labels, labels.product_memory)")


def _mig_verdict(demand: Demand, need: Need, whole: list[NodeGPUs], seen: list[NodeGPUs]) -> ClusterVerdict:
    """The rejection of a pod asking MIG slices that no node can hold: the profile, its memory, and the
    smallest larger profile (or whole GPU) in the cluster that holds it."""
    who, asked = demand.view.ref, _mig_names(need)
    offered = [n for n in seen if n.capacity > 0 or n.labelled_count > 0]
    tips = _larger_slices(need, whole)
    if offered and need.per_gpu_mib is not None:
        # Changes to the workload that fit the asked slice (more slices do not help: a CUDA process sees one).
        tips += [t.text for t in structured_suggestions(demand, offered)
                 if not any(c.what == "gpus" for c in t.changes)]
    try_ = f" Try: {'; '.join(tips)}" if tips else ""
    biggest = max(offered, key=lambda n: (n.vram_mib, n.capacity), default=None)
    kind, device = _slice_words(need)
    if biggest is None:
        profiles = sorted({p.name for n in whole for p in n.mig_profiles})
        none = ("no node has MIG slices (mig.strategy=mixed)" if need.vendor != "amd"
                else "no node advertises AMD partitions by mode (the device plugin's mixed naming)")
        has = (f"the cluster's {kind} profiles: {', '.join(slice_resource(need.vendor, p) for p in profiles)}"
               if profiles else none)
        return ClusterVerdict(False, Code.TOO_FEW_GPUS, f"{who}: asks {asked}; no node offers that {kind} profile "
                              f"({has}).{try_ or f' Try: a profile the cluster has, or {device}'}",
                              suggestions=tuple(tips))
    if need.per_gpu_mib is not None and biggest.vram_mib > 0 and need.per_gpu_mib > usable_mib(biggest, need):
        usable = ""
        if (util := need.util_on(biggest.vram_mib)) < 1:
            usable = f", {_gib(biggest.vram_mib * util)} GiB usable at gpu-memory-utilization {util:g}"
        msg = (f"{who}: needs {_gib(need.expected or need.per_gpu_mib)} GiB VRAM per GPU ({_breakdown(demand)}"
               f"{_at_least(need)}); {asked} is a {_gib(biggest.vram_mib)} GiB {kind} slice ({biggest.name}, "
               f"{biggest.product}{usable}).{try_ or f' Try: a larger {kind} profile or a whole GPU'}")
        return ClusterVerdict(False, Code.VRAM_TOO_SMALL, msg, suggestions=tuple(tips))
    most = max(offered, key=lambda n: max(n.capacity, n.labelled_count))
    msg = (f"{who}: needs {need.gpus} {asked} slices on one node; no node has that (most: "
           f"{max(most.capacity, most.labelled_count)} on {most.name}).{try_ or ' Try: fewer slices per pod'}")
    return ClusterVerdict(False, Code.TOO_FEW_GPUS, msg, suggestions=tuple(tips))


def _larger_slices(need: Need, whole: list[NodeGPUs]) -> list[str]:
    """The smallest other MIG profile that holds the per-GPU need, and the smallest whole GPU, with a node each."""
    per = need.per_gpu_mib
    asked = {name for name, _ in need.mig}
    slices: list[tuple[int, str, str]] = []
    gpus: list[tuple[int, str, str]] = []
    for n in whole:
        for p in n.mig_profiles:
            room = max(p.capacity, p.labelled_count)
            if (p.name not in asked and p.memory_mib > 0 and room >= need.gpus
                    and (per is None or per <= need.usable_on(p.memory_mib))):
                slices.append((p.memory_mib, p.name, n.name))
        count = n.labelled_count if n.plugin_missing else n.capacity
        if n.vram_mib > 0 and count >= need.gpus and (per is None or per <= need.usable_on(n.vram_mib)):
            gpus.append((n.vram_mib, n.product or "GPU", n.name))
    tips = []
    if slices:
        mib, name, node = min(slices)
        tips.append(f"{slice_resource(need.vendor, name)} ({_gib(mib)} GiB) on node {node}")
    if gpus:
        mib, product, node = min(gpus)
        tips.append(f"{_slice_words(need)[1]}: {need.gpus} ({product}, {_gib(mib)} GiB) on node {node}")
    return tips


def _extended_words(need: Need, nodes: Sequence[NodeGPUs]) -> str:
    """What DRA serves the pod's extended resource with, for a rejection: the class and its devices' memory."""
    served = [n for n in nodes if n.vram_source.startswith(EXTENDED_SOURCE)]
    if not served:
        return ""
    sizes: dict[str, int] = {}
    for n in served:
        for d in n.dra:
            key = f"{_gib(d.memory_mib)} GiB" if d.memory_mib > 0 else "memory unknown"
            sizes[key] = sizes.get(key, 0) + 1
    asked = "; ".join(f"{r.name} is DeviceClass {r.class_name}'s (extendedResourceName)" for r in need.extended)
    shown = ", ".join(f"{k} ×{v}" for k, v in sorted(sizes.items(), key=lambda kv: -kv[1]))
    return (f" [{asked}: on {len(served)} node(s) without a device plugin for it the scheduler allocates that "
            f"class's DRA devices: {shown}]")


def _claim_words(msg: str) -> str:
    """Say it the DRA way for a pod whose GPUs come from ResourceClaims."""
    msg = msg.replace("the largest GPU in the cluster has", "the largest device its claims can match has")
    return re.sub(r"nvidia\.com/gpu: (\d+)", r"count: \1 in the claim's request", msg)


def _at_least(need: Need) -> str:
    if need.expected is not None and need.per_gpu_mib is not None and need.per_gpu_mib < need.expected:
        return f"; at least {_gib(need.per_gpu_mib)} GiB even at the estimate's low end"
    return ""


def on_gpu(req: EstimateRequest, node: NodeGPUs) -> EstimateRequest:
    """``req`` priced on ``node``'s GPU: engine defaults depend on it (vLLM V1's batch sizes and sampler rows,
    vllm/engine/arg_utils.py ``_set_default_args``: 1024 sequences on ≥ 70 GiB GPUs, 256 below)."""
    if node.vram_mib <= 0:
        return req
    return req.but(gpu_mib=float(node.vram_mib), gpu_product=node.product or None)


# Below this a context refuses everyday prompts (and the length every engine defaulted to for years).
SHORT_CONTEXT = 4096


def picked_context(demand: Demand, fitting: Fitting) -> tuple[Demand, list[str]]:
    """Where the engine picks its own context (``--max-model-len auto``): the context it will pick on the smallest
    GPU that can hold the pod (its floor: larger GPUs give more), the demand carrying it, and what to warn about.

    vLLM binary-searches the longest length whose KV cache fits the memory left after weights and activations
    (vllm/v1/core/kv_cache_utils.py ``_auto_fit_max_model_len``), capped at the model's own: the same question
    :func:`max_context` asks of the estimate, at its expected figure, on that GPU.
    """
    est = demand.estimate
    nodes = [n for n in fitting if n.vram_mib > 0]
    if est is None or not nodes:
        return demand, []
    smallest = min(nodes, key=lambda n: n.vram_mib)
    req = on_gpu(est.request, smallest)
    model_ctx = demand.spec.context if demand.spec else req.context
    tokens = max_context(req.but(context=model_ctx), fitting.need.usable_on(smallest.vram_mib)) or req.context
    where = smallest.product or smallest.name
    said = (f"{demand.view.ref}: {demand.engine} picks its context (--max-model-len auto): about {tokens} tokens "
            f"on {where}")
    warnings = []
    if tokens < model_ctx:
        warnings.append(f"{said}, below the {model_ctx} the model supports; larger GPUs or more of them give more")
    if tokens < SHORT_CONTEXT:
        warnings.append(f"{said}: under {SHORT_CONTEXT} tokens, longer prompts are refused")
    return replace(demand, picked_context=(tokens, where)), warnings


def _maybe_tight(demand: Demand, need: Need, nodes: Sequence[NodeGPUs], first: NodeGPUs) -> ClusterVerdict:
    """Admit; when only the low end of the estimate fits anywhere, say so (the band straddles the GPU)."""
    expected = need.expected
    if expected is None or need.per_gpu_mib is None or expected <= need.per_gpu_mib:
        return ClusterVerdict(True, Code.FITS, "fits", best_node=first.name)
    # One Need for the whole scan, and stop at the first roomy node: this runs for every admitted pod
    # whose estimate is a band (most vLLM pods), so it must not cost a dataclass per node.
    at_expected = replace(need, per_gpu_mib=expected)
    roomy = next((n for n in nodes if n.is_gpu_node and n.vram_mib > 0 and fits_ever(at_expected, n)), None)
    if roomy is not None:
        return ClusterVerdict(True, Code.FITS, "fits", best_node=roomy.name)
    nodes = own_vendor(need, nodes)
    best = max((n for n in nodes if n.is_gpu_node and n.vram_mib > 0), key=lambda n: n.vram_mib, default=first)
    est = demand.estimate
    if est is not None and best.vram_mib > 0 and est.request.engine is not None:
        on_best = run_estimate(on_gpu(est.request, best))
        if on_best.per_gpu_mib <= need.usable_on(best.vram_mib):
            return ClusterVerdict(True, Code.FITS, "fits", best_node=best.name)
        expected = on_best.per_gpu_mib
    engine = f" ({est.engine})" if est is not None else ""
    msg = (f"{demand.view.ref}: may not fit: expected {_gib(expected)} GiB per GPU{engine}, "
           f"{best.product or best.name} offers {_gib(need.usable_on(best.vram_mib))} GiB usable; "
           f"admitted because the low end of the estimate ({_gib(need.per_gpu_mib)} GiB) fits")
    if est is not None:
        kv = est.kv_cache_mib / max(est.request.gpus, 1)
        measured = chance_to_fit(est.request.engine, expected, kv, need.usable_on(best.vram_mib))
        if measured is not None:
            chance, logs = measured
            msg += (f"; measured chance it starts: {chance:.0%} (vramgate's error on {logs} published "
                    f"{est.request.engine} start-up logs, docs/accuracy.md)")
    if est is not None and (spills := engine_named(est.request.engine)) is not None and spills.spills_to_host:
        share = max(0.0, 1 - need.usable_on(best.vram_mib) / expected)
        msg = (f"{demand.view.ref}: Ollama will run about {share:.0%} of the model on the CPU (slower, not a failure): "
               f"it needs {_gib(expected)} GiB, {best.product or best.name} offers {_gib(best.vram_mib)} GiB")
    return ClusterVerdict(True, Code.FITS, msg, best_node=first.name)


def _vram_ok_anywhere(need: Need, nodes: list[NodeGPUs]) -> bool:
    return need.per_gpu_mib is not None and any(
        n.vram_mib > 0 and need.per_gpu_mib <= usable_mib(n, need) for n in nodes
    )


def _declared_in(demand: Demand) -> str:
    """The field a declared need was read from: vramgate.io/vram, or a GPU-sharing system's share."""
    return demand.share.source.split(" ", 1)[1] if demand.share is not None else "vramgate.io/vram"


def _breakdown(demand: Demand) -> str:
    est = demand.estimate
    if est is None:
        return f"declared {demand.total_mib and _gib(demand.total_mib)} GiB in {_declared_in(demand)}"
    return est.summary().split(": ", 1)[1]


def _host_for(req: EstimateRequest, nodes: Sequence[NodeGPUs], util: float) -> tuple[int, NodeGPUs] | None:
    """The first node with ``req.gpus`` GPUs that holds ``req`` priced on its own GPU: (MiB per GPU, node).

    Each kind of GPU (VRAM, product) is priced once, however many nodes have it."""
    priced: dict[tuple[int, str], int] = {}
    for n in nodes:
        if n.capacity < req.gpus or n.vram_mib <= 0:
            continue
        kind = (n.vram_mib, n.product)
        mib = priced.get(kind)
        if mib is None:
            mib = priced[kind] = run_estimate(on_gpu(req, n)).per_gpu_mib
        if mib <= n.vram_mib * util:
            return mib, n
    return None


def _fewest_gpus(req: EstimateRequest, nodes: list[NodeGPUs], util: float) -> tuple[int, int, str] | None:
    """The fewest GPUs above ``req.gpus`` on which some node holds ``req``: (GPUs, MiB per GPU, product)."""
    for g in range(req.gpus + 1, max(n.capacity for n in nodes) + 1):
        # Tensor parallelism splits attention heads evenly (vLLM: heads % tp == 0); unknown models: powers of 2.
        if (req.spec.heads % g if req.spec else g & (g - 1)) != 0:
            continue
        found = _host_for(req.but(gpus=g), nodes, util)
        if found is not None:
            return g, found[0], found[1].product or found[1].name
    return None


def _spanning(req: EstimateRequest, nodes: list[NodeGPUs], util: float) -> Suggestion | None:
    """When no node holds the model: the fewest nodes of the largest GPU kind one instance would span."""
    found = engine_named(req.engine)
    known = [n for n in nodes if n.is_gpu_node and n.vram_mib > 0 and n.capacity > 0]
    if found is None or found.spanning is None or not known or req.workload != "inference":
        return None
    vram = max(n.vram_mib for n in known)
    kind = [n for n in known if n.vram_mib == vram]
    per_node = max(n.capacity for n in kind)
    kind = [n for n in kind if n.capacity == per_node]
    spec = req.spec
    for pods in range(2, len(kind) + 1):
        for layout, fields, flags in found.spanning(bool(spec and spec.is_moe), spec.heads if spec else None,
                                                    per_node, pods):
            alt = run_estimate(req.but(**fields))
            if alt.per_gpu_mib <= vram * util:
                product = kind[0].product or kind[0].name
                return Suggestion(f"span {pods} nodes of {per_node} × {product} ({layout}: a LeaderWorkerSet of size "
                                  f"{pods}, {flags}) → {_gib(alt.per_gpu_mib)} GiB per GPU")
    return None


@dataclass(frozen=True)
class Change:
    """One semantic change a suggestion makes: ``what`` is one of CHANGE_KINDS, ``value`` its new value.

    ``gpus`` means GPUs per pod together with the engine's tensor-parallel size.
    """

    what: str
    value: str | int


CHANGE_KINDS = ("precision", "gpus", "kv_dtype", "context", "batch", "max_seqs", "gradient_checkpointing",
                "finetune", "parallelism", "utilization")


@dataclass(frozen=True)
class Suggestion:
    """A "Try:" text and the changes that make it (empty when no single edit of the manifest does)."""

    text: str
    changes: tuple[Change, ...] = ()


def suggestions(demand: Demand, nodes: list[NodeGPUs]) -> list[str]:
    """Concrete changes, each re-estimated by the engine model, that would let some node hold the workload.

    Each names the engine's own flag where it has one (``--max-model-len 24576``,
    ``--tensor-parallel-size 2`` with ``nvidia.com/gpu: 2``, or the pod's vendor's resource), and the annotation
    that says the same.
    """
    return [s.text for s in structured_suggestions(demand, nodes)]


def _util_on_largest(demand: Demand, nodes: Sequence[NodeGPUs]) -> float:
    """The demand's usable share on the cluster's largest GPU (one figure for the fixes' arithmetic)."""
    largest = max((n.vram_mib for n in nodes), default=0)
    return demand.utilization if demand.util_rule is None or largest <= 0 else demand.util_rule(largest)


def _largest_batch(req: EstimateRequest, room: float) -> int | None:
    """The largest batch below ``req.batch`` whose estimate fits ``room``, else None.

    Bisected (memory grows with the batch): a declared batch of a billion costs ~30 estimates, not a billion (a
    generated pod froze a review in the linear scan this replaces).
    """
    if run_estimate(req.but(batch=1)).per_gpu_mib > room:
        return None
    lo, hi = 1, req.batch - 1  # lo fits; find the largest that does
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if run_estimate(req.but(batch=mid)).per_gpu_mib <= room:
            lo = mid
        else:
            hi = mid - 1
    return lo


def structured_suggestions(demand: Demand, nodes: list[NodeGPUs]) -> list[Suggestion]:
    """:func:`suggestions` with the semantic changes behind each text (for `vramgate check` fixes)."""
    est = demand.estimate
    if est is None:
        if demand.share is not None:  # a share is per GPU: more GPUs do not split it
            return [Suggestion(f"{_declared_in(demand)}: {max(n.vram_mib for n in nodes)} at most (the largest GPU)")]
        most = max(n.capacity for n in nodes)
        return [Suggestion(f"lower vramgate.io/vram, or request up to {most} GPUs to split it")]
    largest = max(nodes, key=lambda n: n.vram_mib)
    util = _util_on_largest(demand, nodes)
    # Every change is priced on the GPU it targets, so a fix for a 24 GiB GPU uses that GPU's engine defaults.
    req = on_gpu(est.request, largest)
    engine = req.engine
    room = largest.vram_mib * util
    tips: list[Suggestion] = []
    current_bits = PRECISIONS[req.precision].bits
    for p in DOWNGRADES:
        if PRECISIONS[p].bits >= current_bits:
            continue
        alt = run_estimate(req.but(precision=p))
        if alt.per_gpu_mib <= room:
            how = suggest(engine, "fp8") if p == "fp8" else None
            how = how or f"an {p.upper()} checkpoint of the model"
            tips.append(Suggestion(f"{how} (vramgate.io/precision: {p}) → {_gib(alt.per_gpu_mib)} GiB per GPU",
                                   (Change("precision", p),)))
            break
    more = _fewest_gpus(req, nodes, util)
    if more is not None:
        g, alt_mib, host = more
        tp = suggest(engine, "tp", g)
        tips.append(Suggestion(f"{g} GPUs per pod ({demand.gpu_resource}: {g}"
                               + (f" with {tp}" if tp else ", tensor parallel")
                               + f") → {_gib(alt_mib)} GiB per GPU on {host}", (Change("gpus", g),)))
    elif (spanning := _spanning(req, nodes, util)) is not None:
        tips.append(spanning)
    if req.workload == "inference" and est.kv_cache_mib > 0:
        if req.kv_cache_dtype is None and suggest(engine, "kv_fp8") and PRECISIONS[req.precision].bits >= 8:
            alt = run_estimate(req.but(kv_cache_dtype="fp8"))
            if alt.per_gpu_mib <= room:
                tips.append(Suggestion(f"{suggest(engine, 'kv_fp8')} (vramgate.io/kv-cache-dtype: fp8) → "
                                       f"{_gib(alt.per_gpu_mib)} GiB per GPU", (Change("kv_dtype", "fp8"),)))
        ctx = max_context(req, room)
        if ctx is not None and ctx < req.context and ctx >= 256:
            n = round_context(ctx)
            flag = suggest(engine, "context", n) or f"--max-model-len {n}"
            tips.append(Suggestion(f"{flag} (vramgate.io/context-length: {n}; was {req.context})",
                                   (Change("context", n),)))
        if req.batch > 1 and (b := _largest_batch(req, room)) is not None:
            tips.append(Suggestion(f"batch {b} (vramgate.io/batch-size)", (Change("batch", b),)))
        if est.activations_mib / max(req.gpus, 1) > 2048 and suggest(engine, "max_seqs"):
            for seqs in (64, 32, 16, 8, 4, 1):
                alt = run_estimate(req.but(max_num_seqs=seqs))
                if alt.per_gpu_mib <= room:
                    tips.append(Suggestion(f"{suggest(engine, 'max_seqs', seqs)} (a smaller start-up profile) → "
                                           f"{_gib(alt.per_gpu_mib)} GiB per GPU", (Change("max_seqs", seqs),)))
                    break
    if req.workload == "training":
        tips.extend(_training_tips(req, room))
    if not tips:
        # No single change is enough: the smallest GPU count that fits at each lower precision.
        for p in DOWNGRADES:
            if PRECISIONS[p].bits >= current_bits:
                continue
            combo = _fewest_gpus(req.but(precision=p), nodes, util)
            if combo is not None:
                g, per_gpu, host = combo
                tp = suggest(engine, "tp", g)
                tips.append(Suggestion(f"{p} weights on {g} GPUs (vramgate.io/precision: {p}, "
                                       f"{demand.gpu_resource}: {g}"
                                       + (f", {tp}" if tp else "") + f") → {_gib(per_gpu)} GiB per GPU on {host}",
                                       (Change("precision", p), Change("gpus", g))))
                break
    if not tips:
        most = max(n.capacity for n in nodes)
        floor = run_estimate(req.but(precision="int4", gpus=max(most, req.gpus), context=min(req.context, 2048),
                                     batch=1))
        tips.append(Suggestion(f"a smaller model, or nodes with larger GPUs (even int4 on {floor.request.gpus} GPU(s) "
                               f"with 2048 tokens needs {_gib(floor.per_gpu_mib)} GiB per GPU)"))
    return tips


def fewer_gpus_suggestions(demand: Demand, nodes: list[NodeGPUs]) -> list[Suggestion]:
    """For a pod that asks for more GPUs than any node has: the most GPUs some node has on which the model
    fits, at its precision or, failing that, the first lower one that fits (re-estimated by the engine model)."""
    est = demand.estimate
    if est is None or not nodes or demand.group_size > 1:
        return []
    req = est.request
    util = _util_on_largest(demand, nodes)
    most = max(n.capacity for n in nodes)
    if most >= demand.gpus:
        return []
    bits = PRECISIONS[req.precision].bits
    for p in (req.precision, *(q for q in DOWNGRADES if PRECISIONS[q].bits < bits)):
        for g in range(most, 0, -1):
            if g > 1 and (req.spec.heads % g if req.spec else g & (g - 1)) != 0:
                continue
            found = _host_for(req.but(gpus=g, precision=p), nodes, util)
            if found is None:
                continue
            alt_mib, host = found
            tp = suggest(req.engine, "tp", g)
            changes: tuple[Change, ...] = (Change("gpus", g),)
            text = f"{g} GPUs per pod ({demand.gpu_resource}: {g}" + (f" with {tp}" if tp else "")
            if p != req.precision:
                changes = (Change("precision", p), *changes)
                text += f", vramgate.io/precision: {p}"
            return [Suggestion(f"{text}) → {_gib(alt_mib)} GiB per GPU on {host.product or host.name}", changes)]
    return []


def _training_tips(req: EstimateRequest, room: float) -> list[Suggestion]:
    """Training changes that fit: gradient checkpointing, QLoRA, sharding the states."""
    tips: list[Suggestion] = []
    options: list[tuple[str, EstimateRequest, Change]] = []
    if not req.gradient_checkpointing:
        options.append(("--gradient_checkpointing True (vramgate.io/gradient-checkpointing: true)",
                        req.but(gradient_checkpointing=True), Change("gradient_checkpointing", "true")))
    if req.finetune in (None, "full", "lora"):
        options.append(("QLoRA: --use_peft --load_in_4bit (vramgate.io/finetune: qlora)",
                        req.but(finetune="qlora", precision="nf4"), Change("finetune", "qlora")))
    if req.gpus > 1 and req.parallelism in ("ddp", "zero1", "zero2"):
        options.append(("FSDP across the GPUs: --fsdp \"full_shard auto_wrap\" (vramgate.io/parallelism: fsdp)",
                        req.but(parallelism="fsdp"), Change("parallelism", "fsdp")))
    for text, alt_req, change in options:
        alt = run_estimate(alt_req)
        if alt.per_gpu_mib <= room:
            tips.append(Suggestion(f"{text} → {_gib(alt.per_gpu_mib)} GiB per GPU", (change,)))
    return tips
