"""JobSet (jobset.x-k8s.io): one role per replicated job, each job's pod template."""

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

# kubernetes-sigs/jobset api/jobset/v1alpha2/groupversion_info.go.
GROUP = "jobset.x-k8s.io"
KINDS = frozenset({"JobSet"})


def replicated_jobs(spec: dict[str, Any], where: str) -> list[tuple[str, dict[str, Any], dict[str, Any], int]]:
    """``(name, pod metadata, pod spec, pods)`` of each ``replicatedJobs[]`` entry of a JobSet spec.

    Shape from https://github.com/kubernetes-sigs/jobset/blob/main/api/jobset/v1alpha2/jobset_types.go:
    ``replicatedJobs[].{name, replicas (default 1), template: JobTemplateSpec}``; pods per job = parallelism.
    """
    out = []
    for i, rj in enumerate(as_list(spec.get("replicatedJobs"))):
        w = f"{where}.replicatedJobs[{i}]"
        if not isinstance(rj, dict):
            raise WorkloadError(f"{w} must be a mapping")
        job = as_dict(as_dict(rj.get("template")).get("spec"))
        meta, pod = template_parts(job.get("template"), f"{w}.template.spec.template")
        pods = count(rj.get("replicas"), 1, f"{w}.replicas") * count(job.get("parallelism"), 1,
                                                                     f"{w}.template.spec.parallelism")
        name = rj.get("name") if isinstance(rj.get("name"), str) and rj.get("name") else f"job-{i}"
        out.append((str(name), meta, pod, pods))
    return out


def roles(obj: dict[str, Any], ctx: Context) -> RoleSet:
    """One role per replicated job (a JobSet says nothing about model sharding: group size 1)."""
    kind = str(obj.get("kind"))
    name, ns, meta = identity(obj, ctx.namespace)
    jobs = replicated_jobs(as_dict(obj.get("spec")), "spec")
    return RoleSet(kind, name, tuple(
        Role(job, PodView(kind, ns, name, inherit_annotations(pm, meta), pod, job, 1), 1, pods)
        for job, pm, pod, pods in jobs), grouped=True)
