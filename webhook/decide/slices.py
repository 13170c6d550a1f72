"""Accelerator slices that span hosts (GKE TPU topologies): the topologies a pod selects, and its slice's pods."""

from __future__ import annotations

from typing import Any

from ..cluster.accelerators import topology_chips, vendor_named
from ..kinds import PodView
from .selectors import node_selector, required_terms


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
