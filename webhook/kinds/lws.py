"""LeaderWorkerSet (leaderworkerset.x-k8s.io): a leader and size-1 workers hold one model instance."""

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
    copied,
    count,
    gpu_count,
    identity,
    inherit_annotations,
    template_parts,
)

# kubernetes-sigs/lws config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml (v0.7.0, .cache/crds).
GROUP = "leaderworkerset.x-k8s.io"
KINDS = frozenset({"LeaderWorkerSet"})
# Words that show a container names its model itself (then a worker does not borrow the leader's command).
_MODEL_WORDS = ("--model", "serve", "MODEL_ID", "MODEL_NAME", "--model-path", "--hf-repo")


def roles(obj: dict[str, Any], ctx: Context) -> RoleSet:
    """Leader and worker roles of an LWS; ``size`` pods per group, ``replicas`` groups.

    Shape from https://github.com/kubernetes-sigs/lws/blob/main/api/leaderworkerset/v1/leaderworkerset_types.go:
    ``spec.replicas`` (default 1), ``spec.leaderWorkerTemplate.size`` (default 1), ``workerTemplate`` and an
    optional ``leaderTemplate`` (absent: the leader runs the worker template).
    """
    kind = str(obj.get("kind"))
    name, ns, meta = identity(obj, ctx.namespace)
    spec = as_dict(obj.get("spec"))
    lwt = spec.get("leaderWorkerTemplate")
    if not isinstance(lwt, dict):
        raise WorkloadError("spec.leaderWorkerTemplate is missing")
    replicas = count(spec.get("replicas"), 1, "spec.replicas")
    size = count(lwt.get("size"), 1, "spec.leaderWorkerTemplate.size", minimum=1)
    w_meta, w_spec = template_parts(lwt.get("workerTemplate"), "spec.leaderWorkerTemplate.workerTemplate")

    def view(role: str, pod_meta: dict[str, Any], pod_spec: dict[str, Any]) -> PodView:
        return PodView(kind=kind, namespace=ns, name=name, meta=inherit_annotations(pod_meta, meta), spec=pod_spec,
                       role=role, group_size=size)

    if lwt.get("leaderTemplate") is None:
        # One template for every pod of the group: one role.
        return RoleSet(kind, name, (Role("worker", view("worker", w_meta, w_spec), size, replicas * size),),
                       grouped=True)
    l_meta, l_spec = template_parts(lwt.get("leaderTemplate"), "spec.leaderWorkerTemplate.leaderTemplate")
    leader = Role("leader", view("leader", l_meta, l_spec), size, replicas)
    if size == 1:
        return RoleSet(kind, name, (leader,), grouped=True)
    w_meta = inherit_annotations(w_meta, l_meta)
    # No warning when the worker borrows the leader's command: vLLM's recipe always does, and docs/admission.md says so.
    w_spec, _ = _borrow_command(w_spec, l_spec, ctx.gpu_resources)
    worker = Role("worker", view("worker", w_meta, w_spec), size, replicas * (size - 1))
    return RoleSet(kind, name, (leader, worker), grouped=True)


def _text(c: dict[str, Any]) -> str:
    parts = [str(t) for key in ("command", "args") for t in as_list(c.get(key))]
    parts += [str(e.get("name")) for e in as_list(c.get("env")) if isinstance(e, dict)]
    return " ".join(parts)


def _borrow_command(worker: dict[str, Any], leader: dict[str, Any],
                    resource: str | tuple[str, ...]) -> tuple[dict[str, Any], bool]:
    """A worker spec whose GPU container runs the leader's serving command when it names no model itself.

    vLLM's multi-node LWS recipe starts Ray on the workers and ``vllm serve`` (with TP × PP over the whole
    group) on the leader alone; each worker's GPUs hold their share of that model.
    """
    w_gpu = [c for c in as_list(worker.get("containers")) if isinstance(c, dict) and gpu_count(c, resource)]
    l_gpu = [c for c in as_list(leader.get("containers")) if isinstance(c, dict) and gpu_count(c, resource)]
    if len(w_gpu) != 1 or not l_gpu:
        return worker, False
    mine, theirs = w_gpu[0], l_gpu[0]
    if any(w in _text(mine) for w in _MODEL_WORDS) or not any(w in _text(theirs) for w in _MODEL_WORDS):
        return worker, False
    borrowed = {**mine, "command": copied(theirs.get("command") or []), "args": copied(theirs.get("args") or [])}
    names = {str(e.get("name")) for e in as_list(mine.get("env")) if isinstance(e, dict)}
    extra = [copied(e) for e in as_list(theirs.get("env")) if isinstance(e, dict) and str(e.get("name")) not in names]
    if extra:
        borrowed["env"] = [*as_list(mine.get("env")), *extra]
    if "image" in theirs:
        borrowed["image"] = theirs["image"]
    containers = [borrowed if c is mine else c for c in as_list(worker.get("containers"))]
    return {**worker, "containers": containers}, True
