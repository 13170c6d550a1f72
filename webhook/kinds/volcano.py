"""Volcano Job (batch.volcano.sh): one role per task, each task's pod template and replicas.

Shape from volcano-sh/apis pkg/apis/batch/v1alpha1/job.go: ``spec.tasks[].{name, replicas, template:
PodTemplateSpec}``, ``spec.minAvailable``. Its kind is ``Job`` like batch/v1's: the API group tells them apart.
"""

from __future__ import annotations

from typing import Any

from .runtimes import Context
from .view import (
    PodView,
    Role,
    RoleSet,
    WorkloadError,
    as_dict,
    as_list,
    count,
    identity,
    inherit_annotations,
    template_parts,
)

GROUP = "batch.volcano.sh"
KINDS = frozenset({"Job"})


def roles(obj: dict[str, Any], ctx: Context) -> RoleSet:
    """One role per task (a Volcano Job says nothing about model sharding: group size 1)."""
    kind = str(obj.get("kind"))
    name, ns, meta = identity(obj, ctx.namespace)
    out: list[Role] = []
    for i, task in enumerate(as_list(as_dict(obj.get("spec")).get("tasks"))):
        where = f"spec.tasks[{i}]"
        if not isinstance(task, dict):
            raise WorkloadError(f"{where} must be a mapping")
        pod_meta, pod = template_parts(task.get("template"), f"{where}.template")
        role = task.get("name") if isinstance(task.get("name"), str) and task.get("name") else f"task-{i}"
        replicas = count(task.get("replicas"), 1, f"{where}.replicas")
        out.append(Role(str(role), PodView(kind, ns, name, inherit_annotations(pod_meta, meta), pod, str(role), 1),
                        1, replicas))
    return RoleSet(kind, name, tuple(out), grouped=True)
