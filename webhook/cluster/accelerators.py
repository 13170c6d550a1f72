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
                          products=tuple(products)))
    return tuple(out)


def resources_of_vendors() -> tuple[str, ...]:
    return tuple(v.resource for v in vendors())


def vendor_of(resource: str) -> str | None:
    """The listed vendor whose resource this is (``amd.com/gpu`` → ``amd``), else None (NVIDIA's or unknown)."""
    return next((v.name for v in vendors() if v.resource == resource), None)


def resource_of(vendor: str, default: str) -> str:
    """The resource a vendor's pods ask (``default``, the config's, for NVIDIA)."""
    return next((v.resource for v in vendors() if v.name == vendor), default)


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


@dataclass(frozen=True)
class DraDriver:
    """A vendor's DRA driver: the ``type`` attribute values of its whole GPUs and partitions, and the profile's."""

    vendor: str
    driver: str
    full_types: tuple[str, ...]
    partition_types: tuple[str, ...]
    profile_attribute: str


@cache
def dra_driver_rows() -> dict[str, DraDriver]:
    """The vendors' DRA drivers by driver name (the ``dra:`` rows of webhook/data/accelerators.yaml)."""
    text = resources.files("webhook").joinpath("data/accelerators.yaml").read_text(encoding="utf-8")
    out = {}
    for name, row in (yaml.safe_load(text) or {}).items():
        dra = row.get("dra") if isinstance(row, dict) else None
        if isinstance(dra, dict) and isinstance(dra.get("driver"), str):
            out[dra["driver"]] = DraDriver(str(name), dra["driver"], tuple(dra.get("full_types") or ()),
                                           tuple(dra.get("partition_types") or ()),
                                           str(dra.get("profile_attribute") or "profile"))
    return out
