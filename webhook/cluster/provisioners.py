"""Karpenter NodePools as GPU nodes the cluster can add: each pool's instance types, read as Node objects would be.

A workload no current node can hold may still start: Karpenter launches a node for a pending pod from any
NodePool whose requirements an instance type meets and whose limits leave room (the mutation's VRAM affinity
names the GPUs that hold it, docs/autoscaling.md). This module says, per NodePool, which nodes it could add.

Requirement semantics follow Karpenter's own (sigs.k8s.io/karpenter v1.15.0, pkg/scheduling/requirement.go and
requirements.go): a requirement is a set of values or its complement, with integer bounds for Gt/Lt (Gt N is
Gte N+1, Lt N is Lte N-1); Exists is the empty complement, DoesNotExist the empty set. An instance type is a
candidate when its requirements *intersect* the pool's (pkg/controllers/provisioning/scheduling/nodeclaim.go
``compatible``: ``instanceType.Requirements.Intersects``): only keys both define are compared, so a key the
instance type does not define never excludes it, and two NotIn/DoesNotExist sides never conflict. Limits: an
instance type is dropped when its capacity exceeds what the pool's ``spec.limits`` leave after the capacity of
its nodes (scheduling/scheduler.go ``filterByRemainingResources``, ``updateRemainingResources``).

Where the instance types come from: the AWS provider's (``nodeClassRef.group: karpenter.k8s.aws``) are the AWS
rows of webhook/data/gpu_instances.yaml with the labels Karpenter's AWS provider gives them; for any provider,
instance types named by the pool's ``node.kubernetes.io/instance-type In`` requirement are looked up in that
table and among the cluster's nodes of that type; a pool whose template labels declare the GPU (GFD's
``nvidia.com/gpu.memory``, a cloud's accelerator label) is read from those labels, as its nodes will carry them.
A pool that looks like a GPU pool but whose GPUs none of these tell is ``unknown``: never a reason to reject.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..config import Config
from .cloud import (
    GKE_ACCELERATOR_COUNT,
    INSTANCE_TYPE,
    INSTANCE_TYPE_BETA,
    KARPENTER_GPU_COUNT,
    KARPENTER_GPU_MANUFACTURER,
    KARPENTER_GPU_NAME,
    GPUTable,
    InstanceType,
    builtin_table,
)
from .inventory import NodeGPUs, node_gpus

NODEPOOL_KIND = "NodePool"
NODEPOOL_GROUP, NODEPOOL_VERSION, NODEPOOL_PLURAL = "karpenter.sh", "v1", "nodepools"
NODEPOOL_LABEL = "karpenter.sh/nodepool"  # on every node Karpenter launches (pkg/apis/v1/labels.go NodePoolLabelKey)
AWS_NODECLASS_GROUP = "karpenter.k8s.aws"
NODES_LIMIT = "nodes"  # spec.limits.nodes: how many nodes the pool may have (resources.Node)
_FAMILY = "karpenter.k8s.aws/instance-family"
_SIZE = "karpenter.k8s.aws/instance-size"
_CATEGORY = "karpenter.k8s.aws/instance-category"
_GENERATION = "karpenter.k8s.aws/instance-generation"
_ARCH = "kubernetes.io/arch"
# Aliased keys Karpenter rewrites before comparing (pkg/apis/v1/labels.go NormalizedLabels).
_NORMALIZED = {
    "failure-domain.beta.kubernetes.io/zone": "topology.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region": "topology.kubernetes.io/region",
    "beta.kubernetes.io/arch": _ARCH,
    "beta.kubernetes.io/os": "kubernetes.io/os",
    INSTANCE_TYPE_BETA: INSTANCE_TYPE,
}
# An EC2 instance type's name: category letters, generation digits, attributes, then the size (p5e.48xlarge,
# p6-b200.48xlarge, g6e.xlarge).
_EC2_NAME = re.compile(r"^(?P<family>(?P<category>[a-z]+)(?P<generation>\d+)[a-z0-9-]*)\.(?P<size>[a-z0-9-]+)$")
_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Gte", "Lte"})


@dataclass(frozen=True)
class Requirement:
    """One key's allowed values, as Karpenter holds a NodeSelectorRequirement (scheduling/requirement.go)."""

    key: str
    complement: bool  # True: every value but ``values`` (NotIn, Exists, Gt, Lt)
    values: frozenset[str] = frozenset()
    gte: int | None = None
    lte: int | None = None

    @classmethod
    def of(cls, key: str, operator: str, values: Sequence[str] = ()) -> Requirement:
        """``NewRequirementWithFlexibility``; raises ValueError for an operator or bound Karpenter's webhook refuses."""
        key = _NORMALIZED.get(key, key)
        if operator not in _OPERATORS:
            raise ValueError(f"requirement {key}: unknown operator {operator!r}")
        if operator == "In":
            return cls(key, False, frozenset(values))
        if operator == "DoesNotExist":
            return cls(key, False)
        if operator in ("Exists", "NotIn"):
            return cls(key, True, frozenset(values) if operator == "NotIn" else frozenset())
        try:
            bound = int(values[0])
        except (IndexError, ValueError) as exc:
            raise ValueError(f"requirement {key} {operator}: needs one integer value, got {list(values)}") from exc
        if operator == "Gt":
            return cls(key, True, gte=bound + 1)
        if operator == "Lt":
            return cls(key, True, lte=bound - 1)
        return cls(key, True, gte=bound) if operator == "Gte" else cls(key, True, lte=bound)

    @property
    def operator(self) -> str:
        """``Operator()``: NotIn or Exists for a complement (bounds read as Exists), In or DoesNotExist otherwise."""
        if self.complement:
            return "NotIn" if self.values else "Exists"
        return "In" if self.values else "DoesNotExist"

    def has(self, value: str) -> bool:
        """Whether the requirement allows ``value`` (``Has``)."""
        inside = (value not in self.values) if self.complement else (value in self.values)
        return inside and _within(value, self.gte, self.lte)

    def intersects(self, other: Requirement) -> bool:
        """``HasIntersection``: some value both allow."""
        gte = _max(self.gte, other.gte)
        lte = _min(self.lte, other.lte)
        if gte is not None and lte is not None and gte > lte:
            return False
        if self.complement and other.complement:
            return True
        if self.complement:
            return any(v not in self.values and _within(v, gte, lte) for v in other.values)
        if other.complement:
            return any(v not in other.values and _within(v, gte, lte) for v in self.values)
        return any(v in other.values and _within(v, gte, lte) for v in self.values)


def _within(value: str, gte: int | None, lte: int | None) -> bool:
    if gte is None and lte is None:
        return True
    try:
        number = int(value)
    except ValueError:
        return False  # bounds set: a value that is not an integer is outside them
    return (gte is None or number >= gte) and (lte is None or number <= lte)


def _max(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def _min(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


Requirements = Mapping[str, Requirement]


def requirements(items: Iterable[Requirement]) -> dict[str, Requirement]:
    """``Requirements.Add``: requirements of one key are intersected into one."""
    out: dict[str, Requirement] = {}
    for r in items:
        prev = out.get(r.key)
        out[r.key] = r if prev is None else _intersection(prev, r)
    return out


def _intersection(a: Requirement, b: Requirement) -> Requirement:
    """``Intersection``: both at once."""
    gte, lte = _max(a.gte, b.gte), _min(a.lte, b.lte)
    if gte is not None and lte is not None and gte > lte:
        return Requirement(a.key, False)
    complement = a.complement and b.complement
    if complement:
        values = a.values | b.values
    elif a.complement:
        values = b.values - a.values
    elif b.complement:
        values = a.values - b.values
    else:
        values = a.values & b.values
    values = frozenset(v for v in values if _within(v, gte, lte))
    return Requirement(a.key, complement, values, gte if complement else None, lte if complement else None)


def intersects(existing: Requirements, incoming: Requirements) -> bool:
    """``Requirements.Intersects``: every key both define has a common value, unless both sides only exclude."""
    for key in existing.keys() & incoming.keys():
        old, new = existing[key], incoming[key]
        if not old.intersects(new):
            if new.operator in ("NotIn", "DoesNotExist") and old.operator in ("NotIn", "DoesNotExist"):
                continue
            return False
    return True


def label_requirements(labels: Mapping[str, str]) -> dict[str, Requirement]:
    """``NewLabelRequirements``: each label as ``key In [value]``."""
    return requirements(Requirement.of(k, "In", [v]) for k, v in labels.items())


@dataclass(frozen=True)
class NodePool:
    """A ``karpenter.sh/v1`` NodePool: what its nodes must satisfy, carry, and how many GPUs it may still add."""

    name: str
    requirements: Mapping[str, Requirement]
    labels: Mapping[str, str]  # spec.template.metadata.labels: on every node it launches
    nodeclass_group: str  # spec.template.spec.nodeClassRef.group: which provider's instance types
    gpu_limit: int | None  # spec.limits[<gpu resource>]
    gpus_provisioned: int  # status.resources[<gpu resource>]
    node_limit: int | None  # spec.limits.nodes
    taints: tuple[dict[str, str], ...] = ()


@dataclass(frozen=True)
class PoolNode:
    """A node a pool can add: its instance type, how it was known, and its GPUs read as inventory reads a Node."""

    pool: str
    instance_type: str  # "" when only the pool's labels tell the GPU
    node: NodeGPUs
    source: str  # "instance table", "its template's labels", "node <name> of that type"

    @property
    def gpus(self) -> int:
        return max(self.node.capacity, self.node.labelled_count)


@dataclass(frozen=True)
class PoolOffer:
    """What one NodePool can add now: nodes of known GPUs; whether others are unknown; how many GPUs it has left."""

    pool: NodePool
    nodes: tuple[PoolNode, ...] = ()
    unknown: tuple[str, ...] = ()  # instance types (or "its template") whose GPUs nothing here tells
    gpus_left: int | None = None  # None: no GPU limit
    nodes_left: int | None = None
    gpus_used: int = 0

    def room_for(self, node: PoolNode) -> bool:
        """Whether the pool's limits let it launch ``node`` (filterByRemainingResources, the node count first)."""
        if self.nodes_left is not None and self.nodes_left <= 0:
            return False
        return self.gpus_left is None or node.gpus <= self.gpus_left

    @property
    def full(self) -> bool:
        return (self.nodes_left is not None and self.nodes_left <= 0) or (
            self.gpus_left is not None and self.gpus_left <= 0)

    def limit_words(self, resource: str) -> str:
        p = self.pool
        if self.nodes_left is not None and self.nodes_left <= 0:
            return f"its limit of {p.node_limit} nodes is reached"
        return f"{self.gpus_used} of its {resource} limit {p.gpu_limit} in use"


@dataclass(frozen=True)
class Provisioners:
    """The cluster's NodePools, parsed once per snapshot; their offers are worked out only when asked."""

    pools: tuple[NodePool, ...] = ()
    problems: tuple[str, ...] = field(default=(), compare=False)
    config: Config | None = field(default=None, compare=False, repr=False)  # how their nodes will be read
    # pool name → the nodes it can add from the tables and its labels: worked out once per pool object (the
    # Provisioners outlives snapshots while the NodePools do not change), never on the admit path.
    _candidates: dict[str, tuple[dict[str, PoolNode], tuple[str, ...]]] = field(
        default_factory=dict, compare=False, repr=False)

    def __bool__(self) -> bool:
        return bool(self.pools)

    def offers(self, nodes: Iterable[NodeGPUs] = ()) -> tuple[PoolOffer, ...]:
        """Every pool's offer; ``nodes`` are the cluster's (their pool's usage, the GPUs of instance types seen)."""
        if not self.pools or self.config is None:
            return ()
        known = list(nodes)
        out = []
        for p in self.pools:
            cached = self._candidates.get(p.name)
            if cached is None:
                cached = self._candidates[p.name] = candidates(p, self.config)
            out.append(offer(p, self.config, known, cached))
        return tuple(out)


def _int(value: Any) -> int | None:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def read_nodepool(obj: Mapping[str, Any], gpu_resource: str) -> NodePool:
    """A NodePool object into a NodePool; raises ValueError naming what is malformed."""
    meta, spec = _dict(obj.get("metadata")), _dict(obj.get("spec"))
    name = str(meta.get("name") or "")
    if not name:
        raise ValueError("NodePool without metadata.name")
    template = _dict(spec.get("template"))
    tspec = _dict(template.get("spec"))
    reqs = []
    for raw in tspec.get("requirements") or []:
        if not isinstance(raw, dict) or not isinstance(raw.get("key"), str):
            raise ValueError(f"NodePool {name}: requirement {raw!r} has no key")
        values = raw.get("values") or []
        if not isinstance(values, list):
            raise ValueError(f"NodePool {name}: requirement {raw['key']}: values must be a list")
        try:
            reqs.append(Requirement.of(raw["key"], str(raw.get("operator") or ""), [str(v) for v in values]))
        except ValueError as exc:
            raise ValueError(f"NodePool {name}: {exc}") from exc
    labels = {str(k): str(v) for k, v in _dict(_dict(template.get("metadata")).get("labels")).items()}
    # Karpenter adds the template's labels to the pool's requirements (NewNodeClaimTemplate) and its own name.
    reqs += [Requirement.of(k, "In", [v]) for k, v in labels.items()]
    reqs.append(Requirement.of(NODEPOOL_LABEL, "In", [name]))
    limits = _dict(spec.get("limits"))
    used = _dict(_dict(obj.get("status")).get("resources"))
    taints = tuple({str(k): str(v) for k, v in t.items()} for t in tspec.get("taints") or [] if isinstance(t, dict))
    return NodePool(name, requirements(reqs), labels, str(_dict(tspec.get("nodeClassRef")).get("group") or ""),
                    _int(limits.get(gpu_resource)) if gpu_resource in limits else None,
                    _int(used.get(gpu_resource)) or 0,
                    _int(limits.get(NODES_LIMIT)) if NODES_LIMIT in limits else None, taints)


def read_provisioners(objects: Iterable[Mapping[str, Any]], config: Config) -> Provisioners:
    """The NodePools among ``objects`` (other kinds are skipped); a malformed one is left out and said so."""
    pools, problems = [], []
    for obj in objects:
        if obj.get("kind") != NODEPOOL_KIND:
            continue
        try:
            pools.append(read_nodepool(obj, config.labels.gpu_resource))
        except ValueError as exc:
            problems.append(str(exc))
    pools.sort(key=lambda p: p.name)
    return Provisioners(tuple(pools), tuple(problems), config)


def _karpenter_gpu_name(row: InstanceType) -> str:
    """The value of ``instance-gpu-name`` the AWS provider writes: EC2's GPU name in lower case (H100-80GB → h100)."""
    return row.product.key.split("-")[0].lower()


def aws_labels(row: InstanceType) -> dict[str, str]:
    """The labels Karpenter's AWS provider gives an instance type (its GPU ones and the name's parts).

    ``instance-gpu-memory`` is left out: the table holds GFD's MiB, not EC2's, and a key an instance type does not
    define never excludes it (so a pool asking it is not held against it).
    """
    labels = {INSTANCE_TYPE: row.name, KARPENTER_GPU_NAME: _karpenter_gpu_name(row),
              KARPENTER_GPU_COUNT: str(row.gpus), KARPENTER_GPU_MANUFACTURER: "nvidia",
              _ARCH: "arm64" if row.product.key == "T4G" else "amd64"}
    parts = _EC2_NAME.match(row.name)
    if parts:
        labels |= {_FAMILY: parts["family"], _SIZE: parts["size"], _CATEGORY: parts["category"],
                   _GENERATION: parts["generation"]}
    return labels


def _is_aws_row(row: InstanceType) -> bool:
    # The table's AWS rows cite Karpenter's generated AWS instance-type reference.
    return "karpenter.sh/" in row.source


def _synthetic_node(name: str, labels: Mapping[str, str], gpus: int | None, config: Config) -> NodeGPUs:
    resource = config.labels.gpu_resource
    status = {"capacity": {resource: str(gpus)}, "allocatable": {resource: str(gpus)}} if gpus else {}
    return node_gpus({"metadata": {"name": name, "labels": dict(labels)}, "status": status}, config)


def _declared_gpus(labels: Mapping[str, str], config: Config) -> int | None:
    """GPUs per node the labels declare (GFD's count, a cloud's count label)."""
    for key in (config.labels.gpu_count, KARPENTER_GPU_COUNT, GKE_ACCELERATOR_COUNT):
        n = _int(labels.get(key))
        if n is not None and n > 0:
            return n
    return None


def _looks_gpu(pool: NodePool, config: Config) -> bool:
    """A pool whose limits, taints, requirements or labels speak of GPUs: one that may add them."""
    resource = config.labels.gpu_resource
    keys = {*pool.requirements, *pool.labels}
    return (pool.gpu_limit is not None or any(t.get("key") == resource for t in pool.taints)
            or any("gpu" in k or "accelerator" in k for k in keys))


def candidates(pool: NodePool, config: Config, table: GPUTable | None = None
               ) -> tuple[dict[str, PoolNode], tuple[str, ...]]:
    """The nodes ``pool`` can add that the tables and its labels tell (by instance type, "" for labels alone), and
    the instance types it names that neither tells."""
    table = table or builtin_table()
    found: dict[str, PoolNode] = {}
    asked = pool.requirements.get(INSTANCE_TYPE)
    named = sorted(asked.values) if asked is not None and not asked.complement else None
    rows: list[InstanceType] = []
    if named is not None:
        rows = [r for n in named if (r := table.instance_types.get(n.lower())) is not None]
    elif pool.nodeclass_group == AWS_NODECLASS_GROUP:
        rows = [r for r in table.instance_types.values() if _is_aws_row(r)]
    for row in rows:
        labels = {**aws_labels(row), **pool.labels} if _is_aws_row(row) else {INSTANCE_TYPE: row.name, **pool.labels}
        if intersects(label_requirements(labels), pool.requirements):
            node = _synthetic_node(f"{pool.name}/{row.name}", labels, row.gpus, config)
            found[row.name] = PoolNode(pool.name, row.name, node, "instance table")
    gpus = _declared_gpus(pool.labels, config)
    rest: list[str] = []
    for name in named or ():
        if name in found or name.lower() in table.instance_types:
            continue
        from_labels = _synthetic_node(f"{pool.name}/{name}", {INSTANCE_TYPE: name, **pool.labels}, gpus, config)
        if from_labels.vram_mib > 0 and gpus:
            found[name] = PoolNode(pool.name, name, from_labels, "its template's labels")
        else:
            rest.append(name)
    if named is None and not found:
        from_labels = _synthetic_node(pool.name, pool.labels, gpus, config)
        if from_labels.vram_mib > 0 and gpus:
            found[""] = PoolNode(pool.name, "", from_labels, "its template's labels")
        elif pool.nodeclass_group != AWS_NODECLASS_GROUP:
            rest.append("its instance types")
    return found, tuple(rest)


def offer(pool: NodePool, config: Config, nodes: Iterable[NodeGPUs] = (),
          known: tuple[dict[str, PoolNode], tuple[str, ...]] | None = None) -> PoolOffer:
    """What ``pool`` can add given the cluster's ``nodes``: ``candidates`` (``known``), plus the named instance
    types the cluster already runs nodes of; its room left under its limits."""
    found, rest = known if known is not None else candidates(pool, config)
    found = dict(found)
    nodes = list(nodes)
    members = [n for n in nodes if n.labels.get(NODEPOOL_LABEL) == pool.name]
    used = max(pool.gpus_provisioned, sum(n.capacity for n in members))
    gpus_left = None if pool.gpu_limit is None else pool.gpu_limit - used
    nodes_left = None if pool.node_limit is None else pool.node_limit - len(members)
    unknown: list[str] = []
    seen = {n.labels.get(INSTANCE_TYPE, ""): n for n in nodes if n.is_gpu_node and n.vram_mib > 0} if rest else {}
    for name in rest:
        like = seen.get(name)
        if like is not None:
            found[name] = PoolNode(pool.name, name, like, f"node {like.name} of that type")
        elif _looks_gpu(pool, config):
            unknown.append(name)
    ordered = sorted(found.values(), key=lambda p: (p.node.vram_mib, p.gpus, p.instance_type))
    return PoolOffer(pool, tuple(ordered), tuple(unknown), gpus_left, nodes_left, used)
