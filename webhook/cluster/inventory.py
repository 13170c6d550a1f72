"""What each node offers: GPUs, VRAM per GPU, driver, and GPU health, from its labels and status."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from ..config import Config, Labels
from ..units.quantity import QuantityError, parse_gpu_memory_label
from .accelerators import NVIDIA, CoreView, fault_taints_of_vendors, node_vendor_gpus, resource_of
from .cloud import cloud_gpu, why_unknown
from .dra import SOURCE as DRA_SOURCE
from .dra import Device, summarize
from .mig import MigProfile, node_profiles

HealthState = Literal["healthy", "degraded", "unhealthy"]
_MIG_PRODUCT_RE = re.compile(r"-MIG-(\d+)g\.(\d+)gb$", re.IGNORECASE)


@dataclass(frozen=True)
class NodeGPUs:
    """One node's GPU capability, computed once per node event (the hot paths only read it)."""

    name: str
    product: str
    capacity: int  # nvidia.com/gpu in status.capacity (devices, or replicas when time-sliced)
    allocatable: int  # healthy devices the device plugin advertises
    vram_mib: int  # per schedulable device: a GPU, a time-slice replica or a MIG slice; 0 = unknown
    driver_major: int | None
    replicas: int
    mig: str | None
    health: HealthState
    health_reason: str
    labelled: bool  # the node carries GPU labels (GFD, vramgate's, a managed cloud's, or the config's)
    unhealthy_gpus: int
    fault: str | None  # the fault condition or taint that makes it unhealthy
    plugin_missing: bool  # GPU labels but no nvidia.com/gpu capacity: the device plugin is not running
    # GPUs the GPU-count label (GFD, else the cloud's labels or instance type) declares: what the node has
    # once its plugin runs.
    labelled_count: int = 0
    # Where vram_mib came from: "gfd", "karpenter", "gke-accelerator nvidia-l4", "instance-type g2-standard-8",
    # "config <label>", or "unknown".
    vram_source: str = "unknown"
    # The node's GPU devices as DRA ResourceSlices publish them (claims are judged on these).
    dra: tuple[Device, ...] = ()
    labels: dict[str, str] = field(default_factory=dict, compare=False, repr=False)
    # spec.taints as the API returns them (the health controller merges its own taint into these).
    taints: tuple[dict[str, str], ...] = field(default=(), compare=False, repr=False)
    # MIG profiles under the mixed strategy (nvidia.com/mig-<profile> in capacity, GFD's per-profile labels), smallest
    # first. ``capacity``/``vram_mib`` above stay the whole GPUs' (nvidia.com/gpu); a pod asking a profile is judged
    # on that profile alone (placement.for_mig).
    mig_profiles: tuple[MigProfile, ...] = ()
    # Whose GPUs these are: "nvidia" (config.labels.gpu_resource), else a vendor of webhook/data/accelerators.yaml
    # ("amd": amd.com/gpu), whose resource ``capacity``/``allocatable`` then count.
    vendor: str = NVIDIA
    partition: str = ""  # the vendor's partition mode ("cpx_nps4"), "" when none is said
    # The slice this node's chips belong to (GKE's gke-tpu-topology, "4x4"): its chips may span other hosts.
    topology: str = ""
    # The node in the vendor's finer resource (Neuron's aws.amazon.com/neuroncore), where it has one.
    cores: CoreView | None = None

    @property
    def is_gpu_node(self) -> bool:
        return self.labelled or self.capacity > 0 or bool(self.dra) or bool(self.mig_profiles)

    def mig_profile(self, name: str) -> MigProfile | None:
        return next((p for p in self.mig_profiles if p.name == name), None)


def _int(value: Any) -> int | None:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


def _gpu_quantity(section: Any, resource: str) -> int:
    if not isinstance(section, dict):
        return 0
    return max(0, _int(section.get(resource)) or 0)


def _memory(value: Any) -> int:
    """A GPU-memory label value in MiB, 0 when absent or malformed."""
    if not isinstance(value, str):
        return 0
    try:
        return parse_gpu_memory_label(value)
    except QuantityError:
        return 0


def _gfd_vram(labels: dict[str, Any], keys: Labels) -> int:
    vram = _memory(labels.get(keys.gpu_memory))
    normalized = _int(labels.get(keys.normalized_memory))
    if not vram and normalized and normalized > 0:
        vram = normalized
    return vram


def _config_vram(labels: dict[str, Any], keys: Labels) -> tuple[int, str, str]:
    """(MiB, source, product) from the config's memory_labels, then product_labels × product_memory."""
    for key in keys.memory_labels:
        mib = _memory(labels.get(key))
        if mib:
            return mib, f"config {key}", ""
    if keys.product_memory:
        sizes = {k.lower(): v for k, v in keys.product_memory.items()}
        for key in (*keys.product_labels, keys.gpu_product):
            value = str(labels.get(key) or "")
            if value and value.lower() in sizes:
                return _memory(sizes[value.lower()]), f"config {key}={value}", value
    return 0, "", ""


def _per_device(vram: int, replicas: int, mig: str | None, product: str) -> int:
    """Memory per schedulable device: a MIG slice (single strategy) or a time-slice replica of a GPU."""
    if mig == "single":
        match = _MIG_PRODUCT_RE.search(product)
        if match:
            slice_mib = int(match.group(2)) * 1024
            vram = min(vram, slice_mib) if vram else slice_mib
    if replicas > 1 and vram:
        vram //= replicas
    return vram


def _taints(node: dict[str, Any]) -> tuple[dict[str, str], ...]:
    spec = node.get("spec")
    taints = spec.get("taints") if isinstance(spec, dict) else None
    if not isinstance(taints, list):
        return ()
    return tuple({str(k): str(v) for k, v in t.items() if v is not None} for t in taints if isinstance(t, dict))


def fault_of(node: dict[str, Any], config: Config) -> str | None:
    """The first GPU fault a node reports: a fault condition that is True, a readiness one that is False, or a fault
    taint."""
    status = node.get("status") or {}
    conditions = status.get("conditions") if isinstance(status, dict) else None
    wanted = set(config.health.fault_conditions)
    ready = set(config.health.fault_when_false)
    for cond in conditions or []:
        if not isinstance(cond, dict):
            continue
        kind, state = cond.get("type"), cond.get("status")
        if (kind in wanted and state == "True") or (kind in ready and state == "False"):
            message = str(cond.get("message") or cond.get("reason") or "").strip()
            return f"condition {kind}={state}" + (f" ({message[:80]})" if message else "")
    spec = node.get("spec") or {}
    taints = spec.get("taints") if isinstance(spec, dict) else None
    fault_taints = {*config.health.fault_taints, *fault_taints_of_vendors()}
    for taint in taints or []:
        if isinstance(taint, dict) and taint.get("key") in fault_taints and taint.get("effect") in (
            "NoSchedule", "NoExecute",
        ):
            return f"taint {taint['key']}:{taint['effect']}"
    return None


def classify(
    capacity: int, allocatable: int, labelled: bool, fault: str | None, config: Config, vendor: str = NVIDIA,
) -> tuple[HealthState, str]:
    """Health state and reason from the capacity gap, the device plugin and fault signals."""
    if fault:
        return "unhealthy", f"GPU fault: {fault}"
    if labelled and capacity == 0:
        resource = resource_of(vendor, config.labels.gpu_resource)
        return "unhealthy", f"GPU labels but no {resource} capacity: device plugin not running"
    if capacity > 0 and allocatable == 0:
        return "unhealthy", f"0 of {capacity} GPUs allocatable"
    bad = max(0, capacity - allocatable)
    if bad == 0:
        return "healthy", f"{allocatable} of {capacity} GPUs allocatable" if capacity else "no GPUs"
    rule = config.health
    if bad / capacity > rule.unhealthy_fraction or (rule.unhealthy_count and bad >= rule.unhealthy_count):
        return "unhealthy", f"{bad} of {capacity} GPUs unhealthy"
    return "degraded", f"{bad} of {capacity} GPUs unhealthy"


def node_gpus(node: dict[str, Any], config: Config) -> NodeGPUs:
    """Read a Node object (as the API returns it) into its GPU capability. Never raises on bad labels."""
    meta = node.get("metadata") or {}
    labels = meta.get("labels") if isinstance(meta, dict) else None
    labels = labels if isinstance(labels, dict) else {}
    status = node.get("status") or {}
    status = status if isinstance(status, dict) else {}
    keys = config.labels
    resource = keys.gpu_resource
    capacity = _gpu_quantity(status.get("capacity"), resource)
    allocatable = min(_gpu_quantity(status.get("allocatable"), resource), capacity) if capacity else 0
    gfd_product = str(labels.get(keys.gpu_product) or "")
    replicas = max(1, _int(labels.get(keys.gpu_replicas)) or 1)
    mig_raw = labels.get(keys.mig_strategy)
    mig = str(mig_raw) if mig_raw in ("single", "mixed") else None
    driver = _int(labels.get(keys.driver_major))
    if driver is None:
        driver = _int(labels.get(keys.driver_major_deprecated))
    str_labels = {str(k): str(v) for k, v in labels.items()}
    labelled = any(k in labels for k in (keys.gpu_memory, keys.gpu_product, keys.gpu_count, keys.normalized_memory))
    # Memory in order: GFD (or vramgate's copy of it), the managed cloud's labels, the config's labels.
    product = gfd_product
    count = max(0, _int(labels.get(keys.gpu_count)) or 0)
    vram, source = _gfd_vram(labels, keys), "gfd"
    vendor, partition, topology, cores = NVIDIA, "", "", None
    nvidia_labelled = any(k in labels for k in (keys.gpu_memory, keys.gpu_product, keys.gpu_count))
    other = None if capacity or nvidia_labelled else node_vendor_gpus(str_labels, status.get("capacity"),
                                                                status.get("allocatable"))
    if other is not None:
        vendor, partition, labelled = other.vendor, other.partition, labelled or other.labelled
        capacity, allocatable, product = other.capacity, other.allocatable, other.product
        count, topology, cores = count or other.count, other.topology, other.cores
        if other.vram_mib:
            vram, source = other.vram_mib, other.vram_source
    cloud = cloud_gpu(str_labels) if other is None else None
    if cloud is not None:
        labelled = True
        product = product or cloud.product
        count = count or (cloud.count or 0)
        if not vram and cloud.vram_mib:
            vram, source = cloud.vram_mib, cloud.source
    if not vram:
        vram, source, named = _config_vram(labels, keys)
        product = product or named
        labelled = labelled or bool(vram) or any(k in labels for k in (*keys.memory_labels, *keys.product_labels))
    if not vram:
        source = "unknown"
    fault = fault_of(node, config)
    profiles = node_profiles(labels, status.get("capacity"), status.get("allocatable"), keys.mig_resource_prefix)
    if other is not None and other.partitions:
        profiles = other.partitions  # AMD's mixed naming: one resource per partition mode, judged as slices are
    # Mixed strategy: the MIG slices are devices too (a node whose every GPU is partitioned has no nvidia.com/gpu).
    mig_capacity = sum(p.capacity for p in profiles)
    mig_allocatable = sum(p.allocatable for p in profiles)
    health, reason = classify(capacity + mig_capacity, allocatable + mig_allocatable,
                              labelled or bool(profiles), fault, config, vendor)
    if profiles and mig_capacity:
        slices = "MIG slices" if vendor == NVIDIA else "partitions"
        reason = reason.replace(" GPUs", f" GPUs and {slices}" if capacity else f" {slices}")
    if vendor != NVIDIA:
        reason = reason.replace(keys.gpu_resource, resource_of(vendor, keys.gpu_resource))  # habana.ai/gaudi …
    return NodeGPUs(
        name=str(meta.get("name") or "") if isinstance(meta, dict) else "",
        product=product,
        capacity=capacity,
        allocatable=allocatable,
        vram_mib=_per_device(vram, replicas, mig, gfd_product),
        driver_major=driver,
        replicas=replicas,
        mig=mig,
        health=health,
        health_reason=reason,
        labelled=labelled,
        unhealthy_gpus=max(0, capacity - allocatable),
        fault=fault,
        plugin_missing=(labelled or bool(profiles)) and capacity + mig_capacity == 0,
        labelled_count=count,
        vram_source=source,
        labels=str_labels,
        taints=_taints(node),
        mig_profiles=profiles,
        vendor=vendor,
        partition=partition,
        topology=topology,
        cores=cores,
    )


def with_devices(node: NodeGPUs, devices: tuple[Device, ...]) -> NodeGPUs:
    """The node with its DRA devices; where no label told its GPU memory, product or driver, the devices do."""
    if not devices and not node.dra:
        return node
    found = summarize(devices)
    if found is None:
        return replace(node, dra=())
    changes: dict[str, Any] = {"dra": devices}
    if node.vram_mib <= 0 and found.vram_mib > 0:
        changes.update(vram_mib=found.vram_mib, vram_source=DRA_SOURCE)
    if not node.product:
        changes["product"] = found.product
    if not node.labelled_count:
        changes["labelled_count"] = found.gpus
    if node.driver_major is None and found.driver_major is not None:
        changes["driver_major"] = found.driver_major
    if node.fault is None and node.capacity == 0:
        # No nvidia.com/gpu: the devices are DRA's (labels without capacity do not mean a missing device plugin).
        tainted = sum(1 for d in devices if d.taint)
        reason = describe_devices(devices) + (f", {tainted} tainted" if tainted else "")
        changes.update(plugin_missing=False, health_reason=reason,
                       health="unhealthy" if tainted == len(devices) else "degraded" if tainted else "healthy")
    return replace(node, **changes)


def describe_devices(devices: tuple[Device, ...]) -> str:
    """ "2 DRA devices: 2× NVIDIA A100-SXM4-80GB" — what a node's ResourceSlices offer, for tables and reasons."""
    counts: dict[str, int] = {}
    for d in devices:
        counts[d.label] = counts.get(d.label, 0) + 1
    return f"{len(devices)} DRA device{'s' if len(devices) != 1 else ''}: " + ", ".join(
        f"{n}× {label}" for label, n in counts.items())


def vram_missing(node: NodeGPUs) -> str:
    """Why a GPU node's memory is unknown, naming what to add."""
    return f"node {node.name}: VRAM unknown ({why_unknown(node.labels)})"


def _device_record(d: Device) -> dict[str, Any]:
    return {"driver": d.driver, "pool": d.pool, "name": d.name, "type": d.type, "product": d.product,
            "memory_mib": d.memory_mib, "profile": d.profile or None, "driver_version": d.driver_version or None,
            "shared": d.shared, "taint": d.taint}


def node_record(n: NodeGPUs, free: int) -> dict[str, Any]:
    """One node as ``/inventory`` and ``vramgate nodes -o json`` give it (the text table is drawn from this)."""
    return {
        "name": n.name,
        "vendor": n.vendor,
        "product": n.product,
        "gpus": n.capacity,
        "allocatable": n.allocatable,
        "free": free,
        "vram_mib": n.vram_mib,
        "vram_source": n.vram_source,
        "driver_major": n.driver_major,
        "replicas": n.replicas,
        "mig": n.mig,
        "partition": n.partition or None,
        "topology": n.topology or None,
        "cores": ({"resource": n.cores.resource, "count": n.cores.capacity, "allocatable": n.cores.allocatable,
                   "vram_mib": n.cores.vram_mib} if n.cores is not None else None),
        "health": n.health,
        "reason": n.health_reason,
        **({"devices": [_device_record(d) for d in n.dra]} if n.dra else {}),
    }
