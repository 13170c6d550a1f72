"""GPU vendors other than NVIDIA: the resource a pod asks, and what a node of theirs offers, from one data table.

The table is ``webhook/data/accelerators.yaml`` (a source per row); no vendor's resource or label is spelled
anywhere else. NVIDIA stays the config's (``labels.gpu_resource`` and GFD's labels); a pod or node is NVIDIA's
unless it asks or advertises one of this table's resources.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml

NVIDIA = "nvidia"
_GIB_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*(?:G|GB|Gi|GiB)?$", re.IGNORECASE)


@dataclass(frozen=True)
class Vendor:
    name: str
    resource: str
    product_labels: tuple[str, ...]
    memory_labels: tuple[str, ...]
    partition_labels: tuple[str, ...]
    partitions: dict[str, int]
    products: tuple[tuple[str, int, str], ...]  # (token, MiB of one device, source), longest token first
    fault_taints: tuple[str, ...] = ()  # taint keys its operator puts on a node whose GPUs failed
    no_fp8_compute: tuple[str, ...] = ()  # product tokens without FP8 compute (upper case)


@dataclass(frozen=True)
class VendorGPUs:
    """What a node of a listed vendor offers: its devices (partitions, where partitioned) and their memory."""

    vendor: str
    capacity: int
    allocatable: int
    product: str
    vram_mib: int  # per device the resource counts; 0 = unknown
    vram_source: str
    partition: str  # "cpx_nps4", "" when not said
    labelled: bool


@cache
def vendors() -> tuple[Vendor, ...]:
    text = resources.files("webhook").joinpath("data/accelerators.yaml").read_text(encoding="utf-8")
    out = []
    for name, row in (yaml.safe_load(text) or {}).items():
        products = sorted(((str(k).upper(), int(float(v["gib"]) * 1024), str(v.get("source", "")))
                           for k, v in (row.get("products") or {}).items()), key=lambda p: -len(p[0]))
        out.append(Vendor(name=str(name), resource=str(row["resource"]),
                          product_labels=tuple(row.get("product_labels") or ()),
                          memory_labels=tuple(row.get("memory_labels") or ()),
                          partition_labels=tuple(row.get("partition_labels") or ()),
                          partitions={str(k).lower(): int(v) for k, v in (row.get("partitions") or {}).items()},
                          products=tuple(products), fault_taints=tuple(row.get("fault_taints") or ()),
                          no_fp8_compute=tuple(str(t).upper() for t in row.get("no_fp8_compute") or ())))
    return tuple(out)


def resources_of_vendors() -> tuple[str, ...]:
    return tuple(v.resource for v in vendors())


def vendor_of(resource: str) -> str | None:
    """The listed vendor whose resource this is (``amd.com/gpu`` → ``amd``), else None (NVIDIA's or unknown)."""
    return next((v.name for v in vendors() if v.resource == resource), None)


def resource_of(vendor: str, default: str) -> str:
    """The resource a vendor's pods ask (``default``, the config's, for NVIDIA)."""
    return next((v.resource for v in vendors() if v.name == vendor), default)


@cache
def fault_taints_of_vendors() -> frozenset[str]:
    return frozenset(k for v in vendors() for k in v.fault_taints)


def vendor_named(name: str) -> Vendor | None:
    return next((v for v in vendors() if v.name == name), None)


def memory_labels_of_vendors() -> tuple[str, ...]:
    return tuple(k for v in vendors() for k in v.memory_labels)


def partition_labels_of_vendors() -> tuple[str, ...]:
    return tuple(k for v in vendors() for k in v.partition_labels)


def memory_values_holding(vendor: Vendor, floor_mib: int) -> tuple[str, ...]:
    """The values of the vendor's memory label, as its labeller writes them ("%dG": ``192G``), of every product in
    the table with at least ``floor_mib`` MiB per GPU: what a node affinity can ask with ``In`` where no integer
    label (``vramgate.io/gpu-memory-mib``) is there yet for ``Gt``. A partitioned GPU is left to that label."""
    return tuple(f"{g}G" for g in sorted({mib // 1024 for _, mib, _ in vendor.products if mib >= floor_mib}))


_MEMORY_MODES = ("nps1", "nps2", "nps4", "nps8")


def partitioned_modes(vendor: Vendor) -> tuple[str, ...]:
    """The partition label's values (``<compute>_<memory>``) of every mode that splits a GPU (``cpx_nps4``): where
    the labeller's vram may be the whole GPU's, a node affinity on it alone would over-promise."""
    return tuple(f"{mode}_{mem}" for mode, split in vendor.partitions.items() if split > 1 for mem in _MEMORY_MODES)


def _label(labels: dict[str, str], keys: tuple[str, ...]) -> list[str]:
    """Values of the first key present: ``key: value``, else every ``key.<value>: <count>``."""
    for key in keys:
        if labels.get(key):
            return [labels[key]]
        forms = [k[len(key) + 1:] for k in labels if k.startswith(key + ".")]
        if forms:
            return forms
    return []


def _gib(value: str) -> int:
    m = _GIB_RE.match(value.strip())
    return int(float(m.group(1)) * 1024) if m else 0


def lacks_fp8(vendor: str, product: str) -> bool:
    """Whether a listed vendor's GPU of this product has no FP8 compute (AMD's MI2xx: see accelerators.yaml)."""
    found = vendor_named(vendor)
    if found is None or not found.no_fp8_compute:
        return False
    return _product_token(found, product) in found.no_fp8_compute


def _product_token(vendor: Vendor, product: str) -> str:
    return product_mib(vendor, product)[1]


def product_mib(vendor: Vendor, product: str) -> tuple[int, str]:
    upper = product.upper()
    for token, mib, _ in vendor.products:
        if re.search(rf"(?<![A-Z0-9]){re.escape(token)}(?![A-Z0-9])", upper.replace("_", " ")):
            return mib, token
    return 0, ""


def _int(value: Any) -> int:
    try:
        return max(0, int(str(value).strip()))
    except (TypeError, ValueError):
        return 0


def node_vendor_gpus(labels: dict[str, str], capacity: Any, allocatable: Any) -> VendorGPUs | None:
    """A listed vendor's GPUs on a node (its resource in capacity, or its labels), else None."""
    cap = capacity if isinstance(capacity, dict) else {}
    alloc = allocatable if isinstance(allocatable, dict) else {}
    for v in vendors():
        n_cap = _int(cap.get(v.resource))
        products = _label(labels, v.product_labels)
        memories = [m for m in (_gib(x) for x in _label(labels, v.memory_labels)) if m]
        if not n_cap and not products and not memories:
            continue
        n_alloc = min(_int(alloc.get(v.resource)), n_cap)
        product = products[0] if len(products) == 1 else "/".join(sorted(products))
        partition = next((x.lower() for x in _label(labels, v.partition_labels)), "")
        split = v.partitions.get(partition.split("_")[0], 1)
        table = min((product_mib(v, p)[0] for p in products), default=0)
        # The labeller's vram is per KFD node (a partition's share, where partitioned); the table's is a whole GPU's,
        # split evenly between its compute partitions. The smaller of the two is what one device holds.
        vram, source = 0, "unknown"
        if memories:
            vram, source = min(memories), f"{v.name} label {v.memory_labels[0]}"
        if table:
            per = table // split
            if not vram or per < vram:
                vram = per
                source = f"{v.name} product {product}" + (f" in {partition} ({split} partitions)" if split > 1 else "")
        return VendorGPUs(vendor=v.name, capacity=n_cap, allocatable=n_alloc, product=product, vram_mib=vram,
                          vram_source=source, partition=partition, labelled=bool(products or memories))
    return None
