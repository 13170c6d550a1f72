"""Admission rules beyond "does it fit": node selectors, GPU-less pods on GPU nodes, CUDA_VISIBLE_DEVICES, slices
that span hosts.

Pure functions of a pod view, its demand and the inventory snapshot, called from
``verdict.judge`` so that ``vramgate check`` and ``/validate`` always agree.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..cluster.accelerators import NVIDIA, lacks_fp8, topology_chips, vendor_named
from ..cluster.inventory import NodeGPUs
from ..cluster.snapshot import Snapshot
from ..cluster.usage import container_gpus
from ..config import Config
from ..kinds import PodView, as_list
from .demand import Demand
from .placement import Fitting, fit
from .selectors import describe_constraints, has_node_constraints, selects
from .slices import asked_topologies

# Kinds whose pods are node agents (device plugin, DCGM exporter): they belong on GPU nodes without a GPU.
NODE_AGENT_KINDS = frozenset({"DaemonSet"})


# ---------------------------------------------------------------------------------------------------------------
# Selectors that can only land the pod on nodes too small for it.


@dataclass(frozen=True)
class Narrow:
    """A nodeSelector/required affinity that matches only nodes that can never hold the pod."""

    selector: str  # human rendering of the pod's constraints
    matched: tuple[str, ...]  # names of the (too small) nodes it matches
    why: str  # the first matched node's reason
    fitting: tuple[NodeGPUs, ...]  # nodes that could hold the pod

    def message(self, ref: str) -> str:
        ok = self.fitting[0]
        return (f"{ref}: its {self.selector} matches only nodes whose GPUs cannot hold it "
                f"({', '.join(self.matched[:3])}{', …' if len(self.matched) > 3 else ''}: {self.why}); "
                f"{len(self.fitting)} node(s) could, e.g. {ok.name} ({ok.product or 'GPU'}). "
                "Try: remove or widen the selector, or let vramgate reroute it (admission.reroute_narrow_selectors)")

    def warning(self) -> str:
        return (f"{self.selector} matches only GPUs too small for this pod; "
                "vramgate replaces it with a VRAM node affinity at pod creation")


def narrow_selector(demand: Demand, fitting: Fitting, nodes: Iterable[NodeGPUs]) -> Narrow | None:
    """The pod's selector when it matches some nodes, none of which can ever hold the pod, while others can.

    ``fitting`` is the cluster verdict's nodes that can ever hold the pod; ``nodes`` every node (CPU
    ones too), scanned only when the selector is narrow. DaemonSets are exempt: their pods are pinned to
    one node each by design.
    """
    spec = demand.view.spec
    if not has_node_constraints(spec) or _is_node_agent(demand.view):
        return None
    # Usually the selector admits a node that can hold the pod: stop at the first one.
    if any(selects(spec, n) for n in fitting):
        return None
    need = fitting.need
    # Only nodes known to hold it can make a selector "narrow" (unknown VRAM never rejects, nor reroutes there).
    known = [n for n in fitting if n.vram_mib > 0 or need.per_gpu_mib is None]
    if not known:
        return None
    matched = [n for n in nodes if selects(spec, n)]
    if not matched:
        return None
    matched.sort(key=lambda n: n.name)
    known.sort(key=lambda n: (-n.vram_mib, n.name))
    first = matched[0]
    why = fit(need, first, ever=True).reason if first.is_gpu_node else "no GPUs"
    return Narrow(describe_constraints(spec), tuple(n.name for n in matched), why, tuple(known))


# ---------------------------------------------------------------------------------------------------------------
# Pods that ask for no GPU but aim at GPU nodes.


def _tolerates_gpu_taint(spec: Mapping[str, Any], resource: str) -> bool:
    for t in as_list(spec.get("tolerations")):
        if isinstance(t, dict) and t.get("key") == resource and t.get("effect") in (None, "", "NoSchedule"):
            return True
    return False


def _is_node_agent(view: PodView) -> bool:
    return view.kind in NODE_AGENT_KINDS or bool(view.owner_kinds & NODE_AGENT_KINDS)


def _selects_only_gpu_nodes(spec: Mapping[str, Any], snapshot: Snapshot) -> bool:
    # CPU nodes first: in most clusters the first one already matches, and the answer is no.
    if any(selects(spec, node) for node in snapshot.cpu_nodes):
        return False
    return any(selects(spec, node) for node in snapshot.by_vram)


def non_gpu_on_gpu_nodes(view: PodView, snapshot: Snapshot, config: Config) -> str | None:
    """Why a pod that requests no GPU targets GPU nodes (their GPU taint or a selector only they match), or None.

    DaemonSets and their pods are exempt: node agents (device plugin, exporters) belong there.
    """
    if config.admission.non_gpu_pods_on_gpu_nodes == "ignore" or _is_node_agent(view):
        return None
    resource = config.labels.gpu_resource
    spec = view.spec
    reasons: list[str] = []
    if _tolerates_gpu_taint(spec, resource):
        reasons.append(f"tolerates the {resource} taint")
    if has_node_constraints(spec) and _selects_only_gpu_nodes(spec, snapshot):
        reasons.append(f"its {describe_constraints(spec)} selects only GPU nodes")
    if not reasons:
        return None
    return (f"{view.ref}: requests no {resource} but {' and '.join(reasons)}; it would take a GPU node's "
            f"CPU and memory without using a GPU. Try: request {resource}, or drop the toleration/selector")


# ---------------------------------------------------------------------------------------------------------------
# CUDA_VISIBLE_DEVICES that names more devices than the container gets.


def cuda_visible_devices_warnings(demand: Demand, config: Config) -> list[str]:
    """Warn where a GPU container's literal CUDA_VISIBLE_DEVICES (or, in an AMD pod, HIP_VISIBLE_DEVICES, which
    vLLM on ROCm keeps equal to it: vllm/platforms/rocm.py _sync_hip_cuda_env_vars) lists more devices than it
    requests."""
    resource = demand.gpu_resource  # the config's for NVIDIA pods, amd.com/gpu for AMD ones
    names = ("CUDA_VISIBLE_DEVICES",) if demand.vendor == NVIDIA else ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")
    out: list[str] = []
    for c in demand.view.containers():
        gpus = container_gpus(c, resource)
        if not gpus:
            continue
        for e in as_list(c.get("env")):
            if not isinstance(e, dict) or e.get("name") not in names:
                continue
            value = e.get("value")
            if not isinstance(value, str):
                continue
            devices = [d for d in value.split(",") if d.strip()]
            if len(devices) > gpus:
                out.append(f"container {c.get('name')}: {e['name']} lists {len(devices)} devices but "
                           f"the container requests {gpus} {resource}")
    return out


# ---------------------------------------------------------------------------------------------------------------
# FP8 weights on GPUs without FP8 compute.


def fp8_compute_warnings(demand: Demand, fitting: Iterable[NodeGPUs]) -> list[str]:
    """Warn where an FP8 checkpoint may land on a vendor's GPUs that have no FP8 compute (AMD MI210/MI250:
    webhook/data/accelerators.yaml no_fp8_compute): vLLM has no weight-only fallback for FP8 on ROCm, so it may not
    load there. A warning, never a rejection (the memory is the same; only the kernels are missing)."""
    est = demand.estimate
    if demand.vendor == NVIDIA or est is None or est.request.precision != "fp8":
        return []
    lacking = sorted({n.product for n in fitting if n.vendor == demand.vendor and lacks_fp8(n.vendor, n.product)})
    if not lacking:
        return []
    which = "which have" if len(lacking) > 1 else "which has"
    return [f"{demand.view.ref}: FP8 weights, and it may land on {', '.join(lacking[:3])}, {which} no FP8 compute "
            "(vLLM on ROCm supports FP8 on MI300-class and newer only, with no weight-only fallback): it may not "
            "load there. Pin it to MI300-class nodes, or use a bf16 or int4 checkpoint"]


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
