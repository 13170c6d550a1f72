"""A workload seen through one of its pods (PodView) and the roles a kind runs (Role, RoleSet)."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

ANNOTATION_PREFIX = "vramgate.io/"


class WorkloadError(ValueError):
    """The object is not a workload, or its pod spec is malformed."""

    code = "malformed"


class DeclaredValueError(WorkloadError):
    """A value the workload declares cannot be read (e.g. a RayService's serveConfigV2 that is not YAML)."""

    code = "declaration"


@dataclass(frozen=True)
class PodView:
    """A workload seen through its pod: identity, pod metadata and pod spec (all read-only dicts).

    ``role`` names the part of a multi-role workload this pod plays (``worker``, ``head``, …; empty for
    the built-in kinds) and ``group_size`` is how many pods together hold one model instance, so each
    pod's need is its share when tensor/pipeline parallelism spans the group.
    """

    kind: str
    namespace: str
    name: str
    meta: dict[str, Any]  # the Pod's or the template's metadata
    spec: dict[str, Any]  # the PodSpec
    role: str = ""
    group_size: int = 1
    # The instance type an operator provisions this pod's nodes as (KAITO's resource.instanceType): the pod
    # is judged on that instance type, not on today's nodes (decide/provisioned.py).
    provisioned: str = ""
    # ResourceClaimTemplates the operator creates for this pod from its own fields (KServe's managed DRA, the NIM
    # Operator's claimCreationSpec): (name, ResourceClaimSpec), read as if they were in the cluster already.
    claim_templates: tuple[tuple[str, dict[str, Any]], ...] = ()
    # A Pod's status.resourceClaimStatuses: its claim's name → the ResourceClaim made for it from its template.
    generated_claims: tuple[tuple[str, str], ...] = ()
    # The model an operator's own field names, and which field: (``Qwen/Qwen3-8B``, ``Workspace
    # spec.inference.preset.name``). The command the operator starts carries it, and --explain names the field,
    # not that command; a pod that names no model of its own (a ModelClaim's warm pool) is judged with it.
    named_model: tuple[str, str] | None = None

    @property
    def annotations(self) -> dict[str, str]:
        return _strings(self.meta.get("annotations"))

    @property
    def labels(self) -> dict[str, str]:
        return _strings(self.meta.get("labels"))

    @property
    def owner_kinds(self) -> frozenset[str]:
        """Kinds of the controllers that own this pod (a ReplicaSet, a Job, a DaemonSet …)."""
        return frozenset(
            o["kind"] for o in as_list(self.meta.get("ownerReferences"))
            if isinstance(o, dict) and o.get("controller") and isinstance(o.get("kind"), str)
        )

    @property
    def ref(self) -> str:
        """``kind/name`` as kubectl prints it, then `` (role)`` for a role of a multi-role workload."""
        base = f"{self.kind.lower()}/{self.name or '<unnamed>'}"
        return f"{base} ({self.role})" if self.role else base

    def containers(self, include_init: bool = True) -> list[dict[str, Any]]:
        """App containers, then init containers, skipping anything that is not a mapping."""
        out: list[dict[str, Any]] = []
        keys = ("containers", "initContainers") if include_init else ("containers",)
        for key in keys:
            items = self.spec.get(key) or []
            if not isinstance(items, list):
                raise WorkloadError(f"spec.{key} must be a list")
            out.extend(c for c in items if isinstance(c, dict))
        return out


@dataclass(frozen=True)
class Role:
    """One kind of pod a workload runs: its view, how many pods hold one model instance, how many run."""

    name: str
    view: PodView
    group_size: int = 1
    replicas: int = 1


@dataclass(frozen=True)
class RoleSet:
    """What a workload object runs: its roles, and what reading them taught (warnings for admission)."""

    kind: str
    name: str
    roles: tuple[Role, ...]
    warnings: tuple[str, ...] = ()
    # True for the kinds that run several pod shapes (LWS, Ray, …): `vramgate check` prints one line per role.
    grouped: bool = False

    @property
    def ref(self) -> str:
        return f"{self.kind.lower()}/{self.name or '<unnamed>'}"


def as_list(value: Any) -> list[Any]:
    """``value`` when it is a list, else an empty one (objects may come from files, not the API server)."""
    return value if isinstance(value, list) else []


def as_dict(value: Any) -> dict[str, Any]:
    """``value`` when it is a mapping, else an empty one."""
    return value if isinstance(value, dict) else {}


def engine_flags(kwargs: Mapping[str, Any], skip: frozenset[str] = frozenset()) -> list[str]:
    """Engine arguments written as a mapping (Ray Serve's ``engine_kwargs``, KAITO's ``vllm:``) as vLLM flags.

    ``max_model_len: 4096`` → ``--max-model-len 4096``; ``true`` → the bare flag; false, null and nested
    configs (speculative_config, hf_overrides …, which do not reach the memory model) are left out.
    """
    flags: list[str] = []
    for key, value in kwargs.items():
        if not isinstance(key, str) or key in skip:
            continue
        flag = "--" + key.replace("_", "-")
        if value is True:
            flags.append(flag)
        elif isinstance(value, int | float | str) and not isinstance(value, bool):
            flags += [flag, str(value)]
    return flags


def _strings(value: Any) -> dict[str, str]:
    """A string map as the API guarantees it; anything else in it (from a hand-made review) is dropped."""
    if not isinstance(value, dict) or not value:
        return {}
    if all(type(v) is str for v in value.values()):
        return value
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}


def dig(obj: Any, path: tuple[str, ...]) -> Any:
    """The value at ``path`` under ``obj``, or None where any step is missing or not a mapping."""
    cur: Any = obj
    for key in path:
        if not isinstance(cur, dict):
            return None
        cur = cur.get(key)
    return cur


_PLACEHOLDER = re.compile(r"^\s*(\$\{?[A-Za-z_]\w*\}?|\{\{.*\}\}|<[^>]+>|[A-Z][A-Z0-9]*(_[A-Z0-9]+)+)\s*$")


def is_placeholder(value: str) -> bool:
    """A template value left unfilled in published YAML: ``$NUM_NODES``, ``{{ .Replicas }}``, ``<N>``, ``GPU_COUNT``."""
    return bool(_PLACEHOLDER.search(value))


def count(value: Any, default: int, where: str, minimum: int = 0) -> int:
    """A replica or size field: a whole number ≥ minimum (``default`` when absent), else WorkloadError."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise WorkloadError(f"{where} must be a whole number")
    try:
        n = int(value)
    except ValueError:
        if isinstance(value, str) and is_placeholder(value):
            return default  # a template left unfilled in published YAML (`$NUM_NODES`, `{{ .Replicas }}`)
        raise WorkloadError(f"{where} must be a whole number, not {value!r}") from None
    if n < minimum:
        raise WorkloadError(f"{where} must be at least {minimum}, not {n}")
    return n


def identity(obj: dict[str, Any], namespace: str | None) -> tuple[str, str, dict[str, Any]]:
    """``(name, namespace, metadata)`` of an object; raises WorkloadError when metadata is not a mapping."""
    meta = obj.get("metadata") or {}
    if not isinstance(meta, dict):
        raise WorkloadError("metadata must be a mapping")
    name = meta.get("name") or meta.get("generateName") or ""
    ns = meta.get("namespace") or namespace or ""
    return str(name), str(ns), meta


def template_parts(template: Any, where: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(metadata, spec)`` of a PodTemplateSpec at ``where``; raises WorkloadError when malformed."""
    if not isinstance(template, dict):
        raise WorkloadError(f"{where} must be a mapping" if template is not None else f"{where} is missing")
    meta, spec = template.get("metadata") or {}, template.get("spec")
    if not isinstance(spec, dict):
        raise WorkloadError(f"{where} has no pod spec")
    if not isinstance(meta, dict):
        raise WorkloadError(f"{where}.metadata must be a mapping")
    return meta, spec


def inherit_annotations(pod_meta: dict[str, Any], owner_meta: dict[str, Any]) -> dict[str, Any]:
    """Pod metadata with the owner's ``vramgate.io/*`` annotations added where the template sets none.

    Returns ``pod_meta`` itself when there is nothing to add, else a shallow copy (the object is never changed).
    """
    owner = {k: v for k, v in _strings(owner_meta.get("annotations")).items() if k.startswith(ANNOTATION_PREFIX)}
    if not owner:
        return pod_meta
    own = _strings(pod_meta.get("annotations"))
    added = {k: v for k, v in owner.items() if k not in own}
    if not added:
        return pod_meta
    return {**pod_meta, "annotations": {**added, **own}}


def gpu_count(container: dict[str, Any], resource: str | tuple[str, ...]) -> int:
    """The container's GPU limit (or request) of ``resource`` (or of each of several: one vendor's each);
    0 when absent or unreadable (the demand reader judges those)."""
    if not isinstance(resource, str):
        return sum(gpu_count(container, r) for r in resource)
    resources = as_dict(container.get("resources"))
    for key in ("limits", "requests"):
        section = as_dict(resources.get(key))
        if resource in section:
            try:
                return max(int(str(section[resource])), 0)
            except ValueError:
                return 0
    return 0


def asked_resource(containers: Iterable[Any], resources: tuple[str, ...]) -> str:
    """The first of ``resources`` one of the containers asks for (``amd.com/gpu``), else the first of them."""
    for r in resources:
        if any(isinstance(c, dict) and gpu_count(c, r) for c in containers):
            return r
    return resources[0]


def pod_gpus(spec: dict[str, Any], resource: str | tuple[str, ...]) -> int:
    """GPUs one pod of this spec asks for: the app containers' sum, or the largest init container's."""
    app = sum(gpu_count(c, resource) for c in as_list(spec.get("containers")) if isinstance(c, dict))
    init = max((gpu_count(c, resource) for c in as_list(spec.get("initContainers")) if isinstance(c, dict)),
               default=0)
    return max(app, init)


def copied(value: Any) -> Any:
    """A deep copy, so a synthesised container never aliases the object under review."""
    return copy.deepcopy(value)
