"""Node selection as kube-scheduler reads it: nodeSelector and required node affinity, matched, described, widened.

One module for every place that asks which nodes a pod's own constraints admit: the rules (narrow
selectors, GPU-less pods on GPU nodes), mutation (rerouting, VRAM affinity) and explanations.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..cluster.inventory import NodeGPUs
from ..kinds import as_list


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
