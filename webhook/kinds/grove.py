"""NVIDIA Grove (grove.io): a PodCliqueSet's cliques, a scaling group's cliques as one multi-node instance.

What Dynamo 1.x creates for a DynamoGraphDeployment. Shapes from ai-dynamo/grove at fcc3b3b
(operator/api/core/v1alpha1): podcliqueset.go (``spec.replicas``, ``spec.template.cliques[].{name, labels,
annotations, spec}``, ``spec.template.podCliqueScalingGroups[].{name, cliqueNames, replicas}`` — "each member
PodClique.Replicas will be computed as a product of PodCliqueScalingGroupConfig.Replicas and
PodCliqueTemplateSpec.Spec.Replicas"), podclique.go (``PodCliqueSpec.{roleName, podSpec, replicas}``) and
scalinggroup.go (``PodCliqueScalingGroupSpec.{replicas, cliqueNames}``: no pods of its own). The pods of one
scaling-group replica hold one model instance together: docs/user-guide/03_environment-variables-for-pod-discovery
(``GROVE_PCSG_TEMPLATE_NUM_PODS``, "the sum of replicas across all PodCliques in the PCSG").
"""

from __future__ import annotations

from typing import Any

from .runtimes import Context
from .view import PodView, Role, RoleSet, WorkloadError, as_dict, as_list, copied, count, identity, inherit_annotations

GROUP = "grove.io"  # operator/api/common/constants OperatorGroupName; CRDs grove.io_podcliquesets.yaml …
KINDS = frozenset({"PodCliqueSet", "PodClique", "PodCliqueScalingGroup"})
GROUP_PODS_ENV = "GROVE_PCSG_TEMPLATE_NUM_PODS"
SCALING_GROUP_LABEL = "grove.io/podcliquescalinggroup"  # operator/api/common/labels.go


def roles(obj: dict[str, Any], ctx: Context) -> RoleSet:
    """The roles of a PodCliqueSet, a PodClique, or (none of its own) a PodCliqueScalingGroup."""
    kind = str(obj.get("kind"))
    name, ns, meta = identity(obj, ctx.namespace)
    spec = as_dict(obj.get("spec"))
    ref = f"{kind.lower()}/{name}"
    if kind == "PodCliqueScalingGroup":
        return RoleSet(kind, name, (), (f"{ref}: holds no pods of its own: its PodCliques run them, judged with "
                                        f"their PodCliqueSet",))
    if kind == "PodClique":
        group = as_dict(meta.get("labels")).get(SCALING_GROUP_LABEL)
        if group:
            # One instance spans the scaling group's cliques, which this object alone does not show.
            return RoleSet(kind, name, (), (f"{ref}: a member of scaling group {group}: its pods hold one model "
                                            f"instance with other cliques', judged with their PodCliqueSet",))
        role = _clique(kind, ns, name, meta, {"name": str(spec.get("roleName") or name), "spec": spec}, "spec", 1, 1)
        return RoleSet(kind, name, (role,), grouped=True)
    replicas = count(spec.get("replicas"), 1, "spec.replicas")
    template = as_dict(spec.get("template"))
    cliques = [as_dict(c) for c in as_list(template.get("cliques"))]
    if not cliques:
        raise WorkloadError("spec.template.cliques is missing")
    by_name = {str(c.get("name")): c for c in cliques}
    # clique name → (scaling-group replicas, pods of one scaling-group replica)
    scaling: dict[str, tuple[int, int]] = {}
    for i, sg in enumerate(as_dict(g) for g in as_list(template.get("podCliqueScalingGroups"))):
        where = f"spec.template.podCliqueScalingGroups[{i}]"
        members = [str(n) for n in as_list(sg.get("cliqueNames"))]
        unknown = [n for n in members if n not in by_name]
        if unknown:
            raise WorkloadError(f"{where}.cliqueNames names no clique: {', '.join(unknown)}")
        pods = sum(count(as_dict(by_name[n].get("spec")).get("replicas"), 1, f"clique {n} spec.replicas")
                   for n in members)
        sg_replicas = count(sg.get("replicas"), 1, f"{where}.replicas")
        for n in members:
            scaling[n] = (sg_replicas, pods)
    out = []
    for i, clique in enumerate(cliques):
        sg_replicas, group = scaling.get(str(clique.get("name")), (1, 1))
        out.append(_clique(kind, ns, name, meta, clique, f"spec.template.cliques[{i}].spec", replicas * sg_replicas,
                           group))
    return RoleSet(kind, name, tuple(out), grouped=True)


def _clique(kind: str, ns: str, name: str, meta: dict[str, Any], clique: dict[str, Any], where: str, times: int,
            group: int) -> Role:
    spec = as_dict(clique.get("spec"))
    pod = spec.get("podSpec")
    if not isinstance(pod, dict):
        raise WorkloadError(f"{where}.podSpec is missing")
    role = str(clique.get("name") or spec.get("roleName") or "clique")
    pod = copied(pod)
    if group > 1:
        for c in as_list(pod.get("containers")):
            if isinstance(c, dict) and GROUP_PODS_ENV not in {str(as_dict(e).get("name")) for e in
                                                              as_list(c.get("env"))}:
                c["env"] = [*as_list(c.get("env")), {"name": GROUP_PODS_ENV, "value": str(group)}]
    pod_meta = inherit_annotations({"labels": as_dict(clique.get("labels")),
                                    "annotations": as_dict(clique.get("annotations"))}, meta)
    n = count(spec.get("replicas"), 1, f"{where}.replicas")
    return Role(role, PodView(kind, ns, name, pod_meta, pod, role, group), group, times * n)
