"""Admission rules beyond "does it fit": node selectors, GPU-less pods on GPU nodes, CUDA_VISIBLE_DEVICES.

Pure functions of a pod view, its demand and the inventory snapshot, called from
``verdict.judge`` so that ``vramgate check`` and ``/validate`` always agree.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..cluster.accelerators import NVIDIA, lacks_fp8
from ..cluster.inventory import NodeGPUs
from ..cluster.snapshot import Snapshot
from ..cluster.usage import container_gpus
from ..config import Config
from ..kinds import PodView, as_list
from .demand import Demand
from .placement import Fitting, fit
from .selectors import describe_constraints, has_node_constraints, selects

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
