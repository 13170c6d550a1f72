"""Argo Workflows (argoproj.io): Workflow and CronWorkflow, one role per template that runs a container.

Shape from argoproj/argo-workflows pkg/apis/workflow/v1alpha1/workflow_types.go: ``spec.templates[].{name,
container | script (a container with a source) | containerSet.containers, inputs.parameters[].value,
nodeSelector, tolerations, affinity, podSpecPatch, metadata}``, ``spec.arguments.parameters[].{name, value}``;
a CronWorkflow wraps the same spec in ``spec.workflowSpec``. ``{{workflow.parameters.x}}`` and
``{{inputs.parameters.x}}`` are substituted as Argo does before the pod exists; a ``podSpecPatch`` string is
merged over the pod (JSON or YAML, as Argo accepts).
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from ..units.bounds import load_yaml
from .runtimes import Context
from .view import PodView, Role, RoleSet, as_dict, as_list, copied, identity, inherit_annotations

GROUP = "argoproj.io"
KINDS = frozenset({"Workflow", "CronWorkflow"})
_PARAM = re.compile(r"\{\{\s*(workflow|inputs)\.parameters\.([A-Za-z0-9_.-]+)\s*\}\}")
_POD_FIELDS = ("nodeSelector", "tolerations", "affinity", "volumes", "schedulerName", "priorityClassName")


def _params(items: Any) -> dict[str, str]:
    return {str(p["name"]): str(p["value"]) for p in as_list(items)
            if isinstance(p, dict) and isinstance(p.get("name"), str) and p.get("value") is not None}


def _substitute(value: Any, workflow: dict[str, str], inputs: dict[str, str]) -> Any:
    if isinstance(value, str):
        def repl(m: re.Match[str]) -> str:
            table = workflow if m.group(1) == "workflow" else inputs
            return table.get(m.group(2), m.group(0))
        return _PARAM.sub(repl, value)
    if isinstance(value, list):
        return [_substitute(v, workflow, inputs) for v in value]
    if isinstance(value, dict):
        return {k: _substitute(v, workflow, inputs) for k, v in value.items()}
    return value


def roles(obj: dict[str, Any], ctx: Context) -> RoleSet:
    """One role per template that runs containers; steps and DAG templates run none themselves."""
    kind = str(obj.get("kind"))
    name, ns, meta = identity(obj, ctx.namespace)
    spec = as_dict(obj.get("spec"))
    if kind == "CronWorkflow":
        spec = as_dict(spec.get("workflowSpec"))
    workflow = _params(as_dict(spec.get("arguments")).get("parameters"))
    out: list[Role] = []
    warnings: list[str] = []
    for i, template in enumerate(as_list(spec.get("templates"))):
        if not isinstance(template, dict):
            continue
        containers = [c for c in (template.get("container"), template.get("script")) if isinstance(c, dict)]
        containers += [c for c in as_list(as_dict(template.get("containerSet")).get("containers"))
                       if isinstance(c, dict)]
        if not containers:
            continue
        role = str(template.get("name") or f"template-{i}")
        inputs = _params(as_dict(template.get("inputs")).get("parameters"))
        pod: dict[str, Any] = {k: copied(template[k]) for k in _POD_FIELDS if k in template}
        pod["containers"] = [_substitute({"name": c.get("name") or "main", **copied(c)}, workflow, inputs)
                             for c in containers]
        patch = template.get("podSpecPatch")
        if isinstance(patch, str) and patch.strip():
            try:
                merged = load_yaml(_substitute(patch, workflow, inputs), "podSpecPatch")
            except yaml.YAMLError as exc:
                warnings.append(f"{kind.lower()}/{name} ({role}): podSpecPatch is not JSON or YAML ({exc}); ignored")
                merged = None
            if isinstance(merged, dict):
                pod = _merge(pod, merged)
        pod_meta = inherit_annotations(as_dict(template.get("metadata")), meta)
        out.append(Role(role, PodView(kind, ns, name, pod_meta, pod, role, 1), 1, 1))
    return RoleSet(kind, name, tuple(out), tuple(warnings), grouped=True)


def _merge(pod: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """A strategic-merge patch of the pod spec, as far as GPUs care: containers by name, other fields replaced."""
    out = dict(pod)
    for key, value in patch.items():
        if key == "containers" and isinstance(value, list):
            by_name = {c.get("name"): c for c in out.get("containers", []) if isinstance(c, dict)}
            for c in value:
                if isinstance(c, dict) and c.get("name") in by_name:
                    by_name[c["name"]].update(copied(c))
                elif isinstance(c, dict):
                    out.setdefault("containers", []).append(c)
        else:
            out[key] = value
    return out
