"""Pods whose nodes an operator provisions (KAITO's ``instanceType``): that instance type's GPUs, to judge on.

KAITO creates the nodes a preset runs on, so today's nodes say nothing about whether it fits. The instance
type does: its GPUs come from the cloud tables (webhook/data/gpu_instances.yaml), one node per pod of the
group. The preset's vLLM is assumed to use every GPU of a node (tensor parallel) and to span the nodes
(pipeline parallel), vLLM's multi-node layout; the verdict is only ever a warning (decide/verdict.py), so a
different layout costs a wrong warning, never a rejection.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..cluster.cloud import INSTANCE_TYPE, builtin_table
from ..cluster.snapshot import Snapshot, snapshot_from_nodes
from ..config import Config
from ..engines import engines
from ..kinds import PodView


def provisioned_nodes(view: PodView, config: Config) -> tuple[PodView, Snapshot, str] | None:
    """The pod given the instance type's GPUs, nodes of that type to judge it on, and how to say where; None when
    the instance type is not in the tables."""
    row = builtin_table().instance_types.get(view.provisioned.lower())
    if row is None or row.gpus < 1:
        return None
    resource = config.labels.gpu_resource
    nodes_wanted = max(view.group_size, 1)
    containers: list[Any] = list(view.spec.get("containers") or [])
    if containers and isinstance(containers[0], dict):
        main = dict(containers[0])
        resources = dict(main.get("resources") or {})
        resources["limits"] = {**(resources.get("limits") or {}), resource: str(row.gpus)}
        main["resources"] = resources
        command = [str(w) for w in main.get("command") or []]
        given = next((out for e in engines() if e.give_gpus is not None
                      and (out := e.give_gpus(command, row.gpus, nodes_wanted)) is not None), None)
        if given is not None:
            main["command"] = given
        containers[0] = main
    patched = replace(view, spec={**view.spec, "containers": containers}, provisioned="")
    nodes = [{"apiVersion": "v1", "kind": "Node",
              "metadata": {"name": f"{row.name.lower()}-{i}", "labels": {INSTANCE_TYPE: row.name}},
              "status": {"capacity": {resource: str(row.gpus)}, "allocatable": {resource: str(row.gpus)}}}
             for i in range(nodes_wanted)]
    where = (f"{nodes_wanted} × {row.name} ({row.gpus} × {row.product.name}, {row.mib / 1024:.0f} GiB each), "
             f"the nodes {view.kind} provisions")
    return patched, snapshot_from_nodes(nodes, config, revision=1), where
