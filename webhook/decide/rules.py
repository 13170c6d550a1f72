"""Admission rules beyond "does it fit": node selectors, GPU-less pods on GPU nodes, CUDA_VISIBLE_DEVICES.

Pure functions of a pod view, its demand and the inventory snapshot, called from
``verdict.judge`` so that ``vramgate check`` and ``/validate`` always agree.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..cluster.inventory import NodeGPUs
from ..cluster.snapshot import Snapshot
from ..cluster.usage import container_gpus
from ..config import Config
from ..kinds import PodView, as_list
from .demand import Demand
from .placement import Need, fit, fits_ever

# Kinds whose pods are node agents (device plugin, DCGM exporter): they belong on GPU nodes without a GPU.
NODE_AGENT_KINDS = frozenset({"DaemonSet"})


# ---------------------------------------------------------------------------------------------------------------
# Node selection, as kube-scheduler reads nodeSelector and required node affinity.


def _expr_matches(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key = expr.get("key")
    if not isinstance(key, str):
        return False
    op = expr.get("operator")
    values = as_list(expr.get("values"))
    present = key in labels
    if op == "In":
        return present and labels[key] in values
    if op == "NotIn":
        return not present or labels[key] not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt"):
        if not present or len(values) != 1:
            return False
        try:
            have, want = int(labels[key]), int(values[0])
        except (TypeError, ValueError):
            return False
        return have > want if op == "Gt" else have < want
    return False


def _field_matches(expr: Mapping[str, Any], node_name: str) -> bool:
    if expr.get("key") != "metadata.name":
        return False
    return _expr_matches(expr, {"metadata.name": node_name})


def term_matches(term: Any, node: NodeGPUs) -> bool:
    """One nodeSelectorTerm: its expressions and fields ANDed; an empty term matches nothing."""
    if not isinstance(term, dict):
        return False
    exprs = as_list(term.get("matchExpressions"))
    fields = as_list(term.get("matchFields"))
    if not (exprs or fields):
        return False
    return all(isinstance(e, dict) and _expr_matches(e, node.labels) for e in exprs) and all(
        isinstance(f, dict) and _field_matches(f, node.name) for f in fields
    )


def required_terms(spec: Mapping[str, Any]) -> list[Any] | None:
    """The required node affinity's nodeSelectorTerms, or None when the pod has none."""
    affinity = spec.get("affinity")
    if not isinstance(affinity, dict):
        return None
    node_affinity = affinity.get("nodeAffinity")
    if not isinstance(node_affinity, dict):
        return None
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if not isinstance(required, dict):
        return None
    terms = required.get("nodeSelectorTerms")
    return terms if isinstance(terms, list) else None


def node_selector(spec: Mapping[str, Any]) -> dict[str, str]:
    sel = spec.get("nodeSelector")
    return {str(k): str(v) for k, v in sel.items()} if isinstance(sel, dict) else {}


def selects(spec: Mapping[str, Any], node: NodeGPUs) -> bool:
    """Whether the pod's nodeSelector and required node affinity admit ``node``."""
    labels = node.labels
    sel = spec.get("nodeSelector")
    for key, value in (sel.items() if isinstance(sel, dict) else ()):
        if labels.get(str(key)) != str(value):
            return False
    terms = required_terms(spec)
    if terms is None:
        return True
    return any(term_matches(t, node) for t in terms)


def has_node_constraints(spec: Mapping[str, Any]) -> bool:
    return bool(node_selector(spec)) or required_terms(spec) is not None


def describe_constraints(spec: Mapping[str, Any], limit: int = 3) -> str:
    """A short human rendering: ``nodeSelector a=b`` / ``required nodeAffinity k In [v]``."""
    parts: list[str] = []
    sel = node_selector(spec)
    if sel:
        parts.append("nodeSelector " + ", ".join(f"{k}={v}" for k, v in sel.items()))
    terms = required_terms(spec)
    if terms:
        rendered = []
        for term in terms[:limit]:
            exprs = as_list(term.get("matchExpressions")) if isinstance(term, dict) else []
            rendered.append(" and ".join(_describe_expr(e) for e in exprs if isinstance(e, dict)) or "(fields)")
        more = f" or {len(terms) - limit} more" if len(terms) > limit else ""
        parts.append("required nodeAffinity " + " or ".join(rendered) + more)
    return "; ".join(parts)


def _describe_expr(expr: Mapping[str, Any]) -> str:
    op = expr.get("operator")
    values = as_list(expr.get("values"))
    if op in ("Exists", "DoesNotExist"):
        return f"{expr.get('key')} {op}"
    if op in ("Gt", "Lt"):
        return f"{expr.get('key')} {op} {values[0] if values else '?'}"
    return f"{expr.get('key')} {op} [{','.join(str(v) for v in values)}]"


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


def narrow_selector(demand: Demand, snapshot: Snapshot) -> Narrow | None:
    """The pod's selector when it matches some nodes, none of which can ever hold the pod, while others can.

    DaemonSets are exempt: their pods are pinned to one node each by design.
    """
    spec = demand.view.spec
    if not has_node_constraints(spec) or _is_node_agent(demand.view):
        return None
    need = Need.of(demand)
    # Usually the selector admits a node that can hold the pod: stop at the first one.
    for n in snapshot.by_vram:
        if fits_ever(need, n) and selects(spec, n):
            return None
    # Only nodes known to hold it can make a selector "narrow" (unknown VRAM never rejects, nor reroutes there).
    fitting = [n for n in snapshot.by_vram if fits_ever(need, n) and (n.vram_mib > 0 or need.per_gpu_mib is None)]
    if not fitting:
        return None
    matched = [n for n in snapshot.nodes.values() if selects(spec, n)]
    if not matched:
        return None
    matched.sort(key=lambda n: n.name)
    fitting.sort(key=lambda n: (-n.vram_mib, n.name))
    first = matched[0]
    why = fit(need, first, ever=True).reason if first.is_gpu_node else "no GPUs"
    return Narrow(describe_constraints(spec), tuple(n.name for n in matched), why, tuple(fitting))


def widen(spec: dict[str, Any], fitting: Iterable[NodeGPUs]) -> tuple[dict[str, str] | None, list[Any] | None]:
    """The nodeSelector and required terms left after dropping what no fitting node satisfies.

    Each nodeSelector entry and each term expression that excludes every fitting node goes; a
    term left empty goes; if what remains still excludes every fitting node, all of it goes.
    Returns (nodeSelector or None, nodeSelectorTerms or None) — None meaning "remove".
    """
    nodes = list(fitting)
    sel = {k: v for k, v in node_selector(spec).items() if any(n.labels.get(k) == v for n in nodes)}
    terms = required_terms(spec)
    kept_terms: list[Any] | None = None
    if terms is not None:
        kept_terms = []
        for term in terms:
            if not isinstance(term, dict):
                continue
            exprs = [e for e in as_list(term.get("matchExpressions"))
                     if isinstance(e, dict) and any(_expr_matches(e, n.labels) for n in nodes)]
            fields = [f for f in as_list(term.get("matchFields"))
                      if isinstance(f, dict) and any(_field_matches(f, n.name) for n in nodes)]
            if exprs or fields:
                new = {k: v for k, v in term.items() if k not in ("matchExpressions", "matchFields")}
                if exprs:
                    new["matchExpressions"] = exprs
                if fields:
                    new["matchFields"] = fields
                kept_terms.append(new)
        if not kept_terms:
            kept_terms = None
    probe: dict[str, Any] = {"nodeSelector": sel}
    if kept_terms is not None:
        probe["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": kept_terms}}}
    if not any(selects(probe, n) for n in nodes):
        return None, None
    return (sel or None), kept_terms


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
    """Warn where a GPU container's literal CUDA_VISIBLE_DEVICES lists more devices than it requests."""
    resource = config.labels.gpu_resource
    out: list[str] = []
    for c in demand.view.containers():
        gpus = container_gpus(c, resource)
        if not gpus:
            continue
        for e in as_list(c.get("env")):
            if not isinstance(e, dict) or e.get("name") != "CUDA_VISIBLE_DEVICES":
                continue
            value = e.get("value")
            if not isinstance(value, str):
                continue
            devices = [d for d in value.split(",") if d.strip()]
            if len(devices) > gpus:
                out.append(f"container {c.get('name')}: CUDA_VISIBLE_DEVICES lists {len(devices)} devices but "
                           f"the container requests {gpus} {resource}")
    return out
