"""GPU model, count and memory that managed clouds imply through node labels and instance types, where GFD is absent."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ..units.data import packaged_yaml

GKE_ACCELERATOR = "cloud.google.com/gke-accelerator"
GKE_ACCELERATOR_COUNT = "cloud.google.com/gke-accelerator-count"
GKE_PARTITION = "cloud.google.com/gke-gpu-partition-size"
KARPENTER_GPU_NAME = "karpenter.k8s.aws/instance-gpu-name"
# MiB of ONE GPU: Karpenter copies EC2 GpuDeviceInfo.MemoryInfo.SizeInMiB (p4d.24xlarge: 8 GPUs, 40960 each).
KARPENTER_GPU_MEMORY = "karpenter.k8s.aws/instance-gpu-memory"
KARPENTER_GPU_COUNT = "karpenter.k8s.aws/instance-gpu-count"
KARPENTER_GPU_MANUFACTURER = "karpenter.k8s.aws/instance-gpu-manufacturer"
EKS_ACCELERATOR = "k8s.amazonaws.com/accelerator"
AKS_ACCELERATOR = "kubernetes.azure.com/accelerator"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
INSTANCE_TYPE_BETA = "beta.kubernetes.io/instance-type"

# Every label this module reads: a node carrying one of them may be a GPU node.
CLOUD_LABELS = (
    GKE_ACCELERATOR, KARPENTER_GPU_NAME, KARPENTER_GPU_MEMORY, EKS_ACCELERATOR, AKS_ACCELERATOR,
)
_PARTITION_RE = re.compile(r"^(\d+)g\.(\d+)gb$", re.IGNORECASE)


@dataclass(frozen=True)
class Product:
    """A GPU model and the memory of one such GPU as NVIDIA's driver (and so GFD) reports it."""

    key: str
    name: str
    mib: int
    source: str
    verified: bool


@dataclass(frozen=True)
class InstanceType:
    """A cloud instance type (VM size, shape) with its GPUs: ``mib`` is per GPU, a fraction's for fractional sizes."""

    name: str
    product: Product
    gpus: int
    mib: int
    source: str
    verified: bool  # the GPU count (and a fraction's memory) was seen in the source, not inferred from the name


@dataclass(frozen=True)
class GPUTable:
    """Products, label values that name them, and instance types, as shipped in ``webhook/data/gpu_instances.yaml``."""

    products: Mapping[str, Product]
    aliases: Mapping[str, Product]  # lower-case label value → product
    instance_types: Mapping[str, InstanceType]  # lower-case instance type → row


@dataclass(frozen=True)
class CloudGPU:
    """What a node's cloud labels say about its GPUs."""

    vram_mib: int  # per GPU; 0 = the labels mark a GPU node but do not tell its memory
    count: int | None  # GPUs per node, when the labels or the instance type tell
    product: str
    source: str  # e.g. "gke-accelerator nvidia-l4", "karpenter", "instance-type g2-standard-8"


def _positive_int(value: Any) -> int | None:
    try:
        number = int(str(value).strip())
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None


def parse_table(data: Any) -> GPUTable:
    """Validate the table's YAML structure into a GPUTable. Raises ValueError on any malformed entry."""
    if not isinstance(data, dict):
        raise ValueError("GPU table must be a mapping")
    products: dict[str, Product] = {}
    for key, row in (data.get("products") or {}).items():
        if not isinstance(row, dict) or _positive_int(row.get("mib")) is None or not row.get("source"):
            raise ValueError(f"product {key!r} needs a positive mib and a source")
        products[str(key)] = Product(str(key), str(row.get("name") or key), int(row["mib"]), str(row["source"]),
                                     bool(row.get("verified", False)))
    aliases: dict[str, Product] = {}
    for alias, key in (data.get("aliases") or {}).items():
        if key not in products:
            raise ValueError(f"alias {alias!r} names unknown product {key!r}")
        aliases[str(alias).lower()] = products[key]
    types: dict[str, InstanceType] = {}
    for row in data.get("instance_types") or []:
        if not isinstance(row, dict) or row.get("product") not in products:
            raise ValueError(f"instance type row {row!r} names no known product")
        gpus = _positive_int(row.get("gpus"))
        if gpus is None or not row.get("type") or not row.get("source"):
            raise ValueError(f"instance type row {row!r} needs type, gpus > 0 and source")
        product = products[row["product"]]
        mib = _positive_int(row["mib"]) if "mib" in row else product.mib
        if mib is None:
            raise ValueError(f"instance type row {row!r}: mib must be positive")
        name = str(row["type"])
        if name.lower() in types:
            raise ValueError(f"instance type {name!r} listed twice")
        types[name.lower()] = InstanceType(name, product, gpus, mib, str(row["source"]),
                                           bool(row.get("verified", True)))
    return GPUTable(products, aliases, types)


@lru_cache(maxsize=1)
def builtin_table() -> GPUTable:
    """The table shipped in the package (read once)."""
    return parse_table(packaged_yaml("gpu_instances.yaml"))


def provisioner_requirements(floor_mib: int, table: GPUTable | None = None) -> list[list[dict[str, Any]]]:
    """Node requirements a node provisioner can satisfy before the node exists, naming only GPUs of at least
    ``floor_mib`` (GFD MiB per GPU): Karpenter's ``instance-gpu-name`` (AWS) and GKE's ``gke-accelerator``.

    The names come from the table's aliases (Karpenter's are bare, ``l40s``; GKE's start ``nvidia-``); the
    ambiguous ``a100``/``v100`` (40/80 GB, 16/32 GB) are not aliases, so never named. Karpenter's term also asks
    for a whole GPU (fractional g6f instances report count 0); GKE's for no MIG partition (its slices are
    smaller than the GPU the accelerator label names). Fresh dicts each call: the caller may keep them.
    """
    karpenter, gke = _gpu_names(floor_mib) if table is None else _names_in(table, floor_mib)
    out: list[list[dict[str, Any]]] = []
    if karpenter:
        out.append([{"key": KARPENTER_GPU_NAME, "operator": "In", "values": list(karpenter)},
                    {"key": KARPENTER_GPU_COUNT, "operator": "Gt", "values": ["0"]}])
    if gke:
        out.append([{"key": GKE_ACCELERATOR, "operator": "In", "values": list(gke)},
                    {"key": GKE_PARTITION, "operator": "DoesNotExist"}])
    return out


@lru_cache(maxsize=1024)
def _gpu_names(floor_mib: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    # Every mutated GPU pod asks this; the floors in a cluster are few.
    return _names_in(builtin_table(), floor_mib)


def _names_in(table: GPUTable, floor_mib: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(Karpenter names, GKE names) of the table's GPUs with at least ``floor_mib``."""
    fits = sorted(v for v, p in table.aliases.items() if p.mib >= floor_mib)
    return tuple(v for v in fits if not v.startswith("nvidia-")), tuple(v for v in fits if v.startswith("nvidia-"))


PROVISIONER_KEYS = frozenset({KARPENTER_GPU_NAME, KARPENTER_GPU_COUNT, GKE_ACCELERATOR, GKE_PARTITION})


def _label(labels: Mapping[str, str], key: str) -> str:
    return str(labels.get(key) or "").strip()


def instance_type_of(labels: Mapping[str, str]) -> str:
    """The node's instance type (VM size, shape), from the GA label or the deprecated beta one."""
    return _label(labels, INSTANCE_TYPE) or _label(labels, INSTANCE_TYPE_BETA)


def from_instance_type(labels: Mapping[str, str], table: GPUTable) -> CloudGPU | None:
    """The GPUs an instance type in the table implies."""
    name = instance_type_of(labels)
    row = table.instance_types.get(name.lower()) if name else None
    if row is None:
        return None
    return CloudGPU(row.mib, row.gpus, row.product.name, f"instance-type {row.name}")


def from_karpenter(labels: Mapping[str, str], table: GPUTable) -> CloudGPU | None:
    """Karpenter's ``instance-gpu-*`` labels (AWS): memory is MiB per GPU; count 0 means a fractional GPU."""
    name = _label(labels, KARPENTER_GPU_NAME).lower()
    memory = _positive_int(labels.get(KARPENTER_GPU_MEMORY))
    if not name and memory is None:
        return None
    maker = _label(labels, KARPENTER_GPU_MANUFACTURER).lower()
    if maker and maker != "nvidia":
        return None  # an AMD or Habana device is not an nvidia.com/gpu
    count = _positive_int(labels.get(KARPENTER_GPU_COUNT))
    known = table.aliases.get(name)
    by_type = from_instance_type(labels, table)
    product = known.name if known else (by_type.product if by_type else (f"nvidia-{name}" if name else ""))
    if memory is not None:
        return CloudGPU(memory, count, product, "karpenter")
    if known is not None:
        return CloudGPU(known.mib, count, product, f"karpenter instance-gpu-name {name}")
    return CloudGPU(0, count, product, "karpenter")


def _named(labels: Mapping[str, str], key: str, source: str, table: GPUTable) -> CloudGPU | None:
    value = _label(labels, key)
    if not value:
        return None
    product = table.aliases.get(value.lower())
    if product is None:
        return CloudGPU(0, None, value, source)
    return CloudGPU(product.mib, None, product.name, f"{source} {value}")


def from_gke(labels: Mapping[str, str], table: GPUTable) -> CloudGPU | None:
    """GKE's ``gke-accelerator`` (+ ``-count``); a MIG partition label makes the memory the slice's."""
    found = _named(labels, GKE_ACCELERATOR, "gke-accelerator", table)
    if found is None:
        return None
    partition = _PARTITION_RE.match(_label(labels, GKE_PARTITION))
    if partition:
        mib = int(partition.group(2)) * 1024
        return CloudGPU(mib, None, f"{found.product} MIG {partition.group(0)}",
                        f"{found.source} partition {partition.group(0)}")
    return CloudGPU(found.vram_mib, _positive_int(labels.get(GKE_ACCELERATOR_COUNT)), found.product, found.source)


def from_eks(labels: Mapping[str, str], table: GPUTable) -> CloudGPU | None:
    """The EKS node-group label ``k8s.amazonaws.com/accelerator`` (values named like GKE's)."""
    return _named(labels, EKS_ACCELERATOR, "eks-accelerator", table)


def from_aks(labels: Mapping[str, str]) -> CloudGPU | None:
    """AKS's ``kubernetes.azure.com/accelerator: nvidia`` marks a GPU node; the size comes from the VM size."""
    value = _label(labels, AKS_ACCELERATOR)
    if value.lower() != "nvidia":
        return None
    return CloudGPU(0, None, "", "aks-accelerator")


def cloud_gpu(labels: Mapping[str, str], table: GPUTable | None = None) -> CloudGPU | None:
    """The first cloud source that tells the memory: Karpenter, GKE, EKS, then the instance-type table.

    A GPU-marking label whose memory is unknown gives ``vram_mib == 0``; no cloud GPU label at all gives None.
    The GPU count falls back to the instance type's when the instance type names the same product.
    """
    table = table or builtin_table()
    by_type = from_instance_type(labels, table)
    marker: CloudGPU | None = None
    for found in (from_karpenter(labels, table), from_gke(labels, table), from_eks(labels, table), by_type,
                  from_aks(labels)):
        if found is None:
            continue
        if found.vram_mib <= 0:
            marker = marker or found
            continue
        if found.count is None and by_type is not None and by_type.product == found.product:
            return CloudGPU(found.vram_mib, by_type.count, found.product, found.source)
        return found
    return marker


def why_unknown(labels: Mapping[str, str], table: GPUTable | None = None) -> str:
    """What a node lacks for its GPU memory to be known, in words a person can act on."""
    table = table or builtin_table()
    parts = ["no nvidia.com/gpu.memory"]
    for key in (GKE_ACCELERATOR, EKS_ACCELERATOR, KARPENTER_GPU_NAME):
        value = _label(labels, key)
        if value and value.lower() not in table.aliases:
            parts.append(f"{key}={value} not in vramgate's GPU table")
    kind = instance_type_of(labels)
    if kind and kind.lower() not in table.instance_types:
        parts.append(f"instance type {kind} not in vramgate's GPU table")
    if len(parts) == 1:
        parts.append("no cloud accelerator label")
    return ", ".join(parts)
