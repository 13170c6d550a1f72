"""KAITO MultiRoleInference (kaito.sh/v1alpha1): a prefill and a decode InferenceSet, each judged as KAITO's.

Shape from kaito-project/kaito api/v1alpha1/multiroleinference_types.go (at 289d2c4): ``spec.model.name`` ("maps
to the preset name used when generating child InferenceSets"), ``spec.roles[].{type (prefill | decode),
replicas (default 1; each replica one Workspace), instanceType, runtimeConfig (a ConfigMap of vLLM
arguments)}``. Each role is read as the InferenceSet KAITO generates for it (``kaito``): a preset on an
instance type, judged on that instance type and only ever warned about.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from . import kaito
from .runtimes import Context
from .view import Role, RoleSet, as_dict, as_list, count, identity

GROUP = kaito.GROUP
KINDS = frozenset({"MultiRoleInference"})


def child_inferenceset(name: str, meta: dict[str, Any], model: str, role: dict[str, Any],
                       where: str) -> dict[str, Any]:
    """The InferenceSet KAITO generates for one role of a MultiRoleInference."""
    inference: dict[str, Any] = {"preset": {"name": model}}
    if isinstance(role.get("runtimeConfig"), str) and role["runtimeConfig"]:
        inference["config"] = role["runtimeConfig"]
    template: dict[str, Any] = {"inference": inference}
    if isinstance(role.get("instanceType"), str) and role["instanceType"]:
        template["resource"] = {"instanceType": role["instanceType"]}
    return {"apiVersion": f"{GROUP}/v1alpha1", "kind": "InferenceSet",
            "metadata": {**meta, "name": f"{name}-{role.get('type') or 'role'}"},
            "spec": {"replicas": count(role.get("replicas"), 1, f"{where}.replicas", minimum=1),
                     "template": template}}


def roles(obj: dict[str, Any], ctx: Context) -> RoleSet:
    """One role per MultiRoleInference role (prefill, decode), each as its child InferenceSet is judged."""
    kind = str(obj.get("kind"))
    name, _, meta = identity(obj, ctx.namespace)
    spec = as_dict(obj.get("spec"))
    model = as_dict(spec.get("model")).get("name")
    ref = f"{kind.lower()}/{name}"
    if not isinstance(model, str) or not model:
        return RoleSet(kind, name, (), (f"{ref}: spec.model.name is missing: the model is not known",))
    out: list[Role] = []
    warnings: list[str] = []
    for i, role in enumerate(as_dict(r) for r in as_list(spec.get("roles"))):
        label = str(role.get("type") or f"role-{i}")
        child = kaito.roles(child_inferenceset(name, meta, model, role, f"spec.roles[{i}]"), ctx)
        for r in child.roles:
            out.append(Role(label, replace(r.view, kind=kind, name=name, role=label), r.group_size, r.replicas))
        warnings.extend(w.replace(child.ref, f"{ref} ({label})", 1) for w in child.warnings)
    return RoleSet(kind, name, tuple(out), tuple(warnings), grouped=True)
