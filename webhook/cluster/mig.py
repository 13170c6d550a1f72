"""MIG slices under the device plugin's ``mixed`` strategy: the resource names pods ask for, and what a node offers.

Under ``mig.strategy=mixed`` the NVIDIA device plugin advertises each MIG profile as its own extended resource,
``nvidia.com/mig-<profile>`` (internal/lm/mig-strategy.go, ``newMigStrategyMixedLabeler``:
``"nvidia.com/mig-" + name``), and GPU Feature Discovery labels each profile on the node with the resource name
as prefix (internal/lm/resource.go, ``NewMIGResourceLabeler``): ``.count``, ``.product``, ``.replicas`` and the
MIG device's attributes ``.memory`` (MiB), ``.multiprocessors``, ``.slices.gi``, ``.slices.ci``, ``.engines.*``.
An A100-80GB PCIe labels ``nvidia.com/mig-1g.10gb.memory: 9728``, ``mig-2g.20gb.memory: 19968``,
``mig-3g.40gb.memory: 40192``.

A profile is ``[<c>c.]<g>g.<mem>gb`` with optional extensions (``1g.10gb+me``, ``1g.23gb+me.all``, ``1g.24gb-me``).
Where no ``.memory`` label says a slice's memory, the name's ``<mem>gb`` is read as GiB (× 1024 MiB): NVIDIA rounds
the name up (1g.10gb is 9728 MiB on an A100-80GB, 9984 on an H100), so this is an upper bound within ~5 %: it may
admit a borderline pod, never reject one that fits.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

PROFILE_RE = re.compile(r"^(?:\d+c\.)?\d+g\.(\d+(?:\.\d+)?)gb(?:[+-][a-z0-9]+(?:\.[a-z0-9]+)*)*$", re.IGNORECASE)
# The per-profile labels vramgate reads (GFD writes more: .slices.gi, .slices.ci, .engines.*, .multiprocessors).
_SUFFIXES = ("count", "memory", "product", "replicas")


@dataclass(frozen=True)
class MigProfile:
    """One MIG profile a node offers under the mixed strategy."""

    name: str  # "1g.10gb", "3g.40gb", "1g.10gb+me"
    memory_mib: int  # per slice (per replica when the slice is time-shared); 0 = unknown
    memory_source: str  # "gfd" (the .memory label) or "name" (the profile's <mem>gb read as GiB)
    capacity: int  # nvidia.com/mig-<profile> in status.capacity
    allocatable: int  # ... in status.allocatable (healthy slices)
    labelled_count: int  # GFD's .count label: the slices the node has once its device plugin runs
    product: str  # GFD's .product label, e.g. NVIDIA-A100-80GB-PCIe-MIG-1g.10gb ("" when absent)

    def resource(self, prefix: str = "nvidia.com/mig-") -> str:
        return prefix + self.name


def is_profile(name: str) -> bool:
    return PROFILE_RE.match(name) is not None


def profile_of(resource: str, prefix: str = "nvidia.com/mig-", is_name: Callable[[str], bool] = is_profile
               ) -> str | None:
    """The MIG profile a resource name asks for (``nvidia.com/mig-1g.10gb`` → ``1g.10gb``), else None; with
    ``is_name`` another vendor's slice names (AMD's ``amd.com/cpx_nps4``: cluster/accelerators.py)."""
    if not resource.startswith(prefix):
        return None
    profile = resource[len(prefix):]
    return profile if is_name(profile) else None


def name_memory_mib(profile: str) -> int:
    """The memory a profile's name states, read as GiB: ``3g.40gb`` → 40960 MiB (0 when the name says none)."""
    match = PROFILE_RE.match(profile)
    return int(float(match.group(1)) * 1024) if match else 0


def _int(value: Any) -> int | None:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


def node_profiles(labels: dict[str, Any], capacity: Any, allocatable: Any,
                  prefix: str = "nvidia.com/mig-") -> tuple[MigProfile, ...]:
    """The MIG profiles a node offers: those its capacity lists or GFD labels, smallest memory first."""
    found: dict[str, dict[str, str]] = {}
    for key, value in labels.items():
        key = str(key)
        if not key.startswith(prefix):
            continue
        rest = key[len(prefix):]
        for suffix in _SUFFIXES:
            if rest.endswith("." + suffix) and is_profile(profile := rest[: -len(suffix) - 1]):
                found.setdefault(profile, {})[suffix] = str(value)
                break
    cap = capacity if isinstance(capacity, dict) else {}
    alloc = allocatable if isinstance(allocatable, dict) else {}
    for key in cap:
        asked = profile_of(str(key), prefix)
        if asked is not None:
            found.setdefault(asked, {})
    profiles = []
    for name, said in found.items():
        replicas = max(1, _int(said.get("replicas")) or 1)
        memory, source = _int(said.get("memory")) or 0, "gfd"
        if memory <= 0:
            memory, source = name_memory_mib(name), "name"
        n_cap = max(0, _int(cap.get(prefix + name)) or 0)
        n_alloc = min(max(0, _int(alloc.get(prefix + name)) or 0), n_cap)
        profiles.append(MigProfile(name=name, memory_mib=memory // replicas, memory_source=source,
                                   capacity=n_cap, allocatable=n_alloc,
                                   labelled_count=max(0, _int(said.get("count")) or 0),
                                   product=said.get("product", "")))
    return tuple(sorted(profiles, key=lambda p: (p.memory_mib, p.name)))
