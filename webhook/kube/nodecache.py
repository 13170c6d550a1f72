"""The live inventory: list+watch of Nodes, Pods and Namespaces, published as immutable Snapshots.

Two layers, so the hard part can be tested without a cluster:

- ``InventoryState`` is a pure state machine. ``relist(kind, items, rv)`` takes a full list,
  ``apply(kind, event)`` one watch event, ``snapshot()`` publishes. It keeps each node's
  ``NodeGPUs`` (computed when the node event arrives, never per request), a record per GPU pod
  (uid → node, GPUs) so updates and deletes adjust free counts exactly, and the namespaces'
  ``vramgate.io/enforcement`` labels.
- ``KubeInventory`` is the I/O: one thread per kind runs the official client's list (paged) and
  watch (``allowWatchBookmarks``, resumed from the last resourceVersion after a dropped
  connection, re-listed on 410 Gone, exponential back-off with jitter on API errors) and feeds
  the state machine under a lock; after each batch of events it swaps in a new Snapshot.
- ``list_once`` is the list alone, once, through the same pages and state machine: the CLI's live inventory
  (``vramgate check|nodes|fit|audit|explain --kubeconfig``) is what the service would hold.

resourceVersions. Kubernetes calls them opaque strings. Every API server in use (etcd3 storage)
makes them the etcd revision, a decimal integer that grows with every write, and within one watch
they increase. We compare them numerically *per object*: an event whose resourceVersion is not
greater than the last one applied to that object (a node update arriving after a newer one, a pod
event after its deletion) is dropped, so state never rolls back. A resourceVersion that does not
parse as an integer disables the comparison for that event (it is applied), which is what
treating them as opaque would do. Deleted objects leave a tombstone (their last resourceVersion)
until the next re-list of their kind, so a late update cannot resurrect them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

import orjson

from ..cluster.dra import Device, DraView, devices_by_node, dra_view
from ..cluster.inventory import NodeGPUs, node_gpus, with_devices
from ..cluster.provisioners import NODEPOOL_GROUP, NODEPOOL_PLURAL, NODEPOOL_VERSION, read_provisioners
from ..cluster.snapshot import ClassTable, Snapshot, carry_node_views
from ..cluster.usage import holds_gpus, pod_gpus_of
from ..config import Config
from ..metrics import Metrics
from .heap import Settler

log = logging.getLogger("vramgate.nodecache")

Kind = Literal["Node", "Pod", "Namespace", "ResourceSlice", "DeviceClass", "ResourceClaimTemplate", "ResourceClaim",
               "PriorityClass", "NodePool"]
KINDS: tuple[Kind, ...] = ("Node", "Pod", "Namespace")
# resource.k8s.io/v1 (Kubernetes 1.34+): where DRA drivers publish GPUs, and what pods' claims refer to (the
# templates, and the claims: pre-created ones a pod names by resourceClaimName, and those made for a pod from its
# template). A cluster that does not serve them (404) counts as listed, with none.
DRA_KINDS: tuple[Kind, ...] = ("ResourceSlice", "DeviceClass", "ResourceClaimTemplate", "ResourceClaim")
# PriorityClasses: the value and preemption policy the Priority admission plugin will give a Pod of each class, so
# the mutation can set them as it would and the plugin's re-run changes nothing (no second mutating call).
PRIORITY_KIND: Kind = "PriorityClass"
# Karpenter NodePools (karpenter.sh/v1, a CRD): the nodes the cluster can add, read when no node holds a workload.
POOL_KIND: Kind = "NodePool"
# Kinds an API server may not serve or the RBAC may not grant: listed as empty, retried now and then.
OPTIONAL_KINDS: tuple[Kind, ...] = (*DRA_KINDS, PRIORITY_KIND, POOL_KIND)
ENFORCEMENT_LABEL = "vramgate.io/enforcement"
# Only pods that hold devices: bound (``holds_gpus``) and not terminal. The API server filters the rest out, so
# a pod arrives when it is bound and leaves (DELETED on the watch) when it finishes; creating, and the
# scheduler's status writes on pods it cannot place, wake nobody here. kube-scheduler watches its assigned
# pods with the same fields. The state machine also copes without the selector.
POD_FIELD_SELECTOR = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"

Outcome = Literal["applied", "unchanged", "stale", "gone", "error"]


def inventory_kinds(config: Config, *, dra: bool | None = None, priorities: bool = True, pools: bool = True
                    ) -> tuple[Kind, ...]:
    """The kinds the service's inventory lists: Nodes, Pods, Namespaces; the DRA kinds (``dra``; default: when the
    config names a DRA driver); PriorityClasses (``priorities``); Karpenter NodePools (``pools``)."""
    if dra is None:
        dra = bool(config.labels.dra_drivers)
    return (*KINDS, *(DRA_KINDS if dra else ()), *((PRIORITY_KIND,) if priorities else ()),
            *((POOL_KIND,) if pools else ()))


def resource_version(obj: Any) -> str | None:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
    return rv if isinstance(rv, str) and rv else None


def rv_number(rv: str | None) -> int | None:
    """A resourceVersion as an integer, or None when absent or not numeric (then it is not compared)."""
    if rv is None:
        return None
    try:
        return int(rv)
    except ValueError:
        return None


def _stale(new: int | None, old: int | None) -> bool:
    return new is not None and old is not None and new <= old


def _upsert_each(items: Iterable[Any], key_of: Callable[[dict[str, Any]], str | None],
                 upsert: Callable[[str, dict[str, Any]], Outcome]) -> set[str]:
    """Upsert every listed object that has a key; the keys seen."""
    seen: set[str] = set()
    for obj in items:
        key = key_of(obj) if isinstance(obj, dict) else None
        if key is not None:
            seen.add(key)
            upsert(key, obj)
    return seen


def _name(obj: dict[str, Any]) -> str | None:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) and name else None


def _dra_key(obj: dict[str, Any]) -> str | None:
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
        return None
    ns = meta.get("namespace")
    return f"{ns}/{meta['name']}" if isinstance(ns, str) and ns else str(meta["name"])


def _claim_part(obj: dict[str, Any]) -> dict[str, Any]:
    """What the inventory keeps of a ResourceClaim: its name, namespace and spec (not its status or managedFields)."""
    raw = obj.get("metadata")
    meta: dict[str, Any] = raw if isinstance(raw, dict) else {}
    keep = {k: meta[k] for k in ("name", "namespace", "resourceVersion") if k in meta}
    return {"kind": "ResourceClaim", "metadata": keep, "spec": obj.get("spec")}


def _pod_key(obj: dict[str, Any]) -> str | None:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return None
    uid = meta.get("uid")
    if isinstance(uid, str) and uid:
        return uid
    name = meta.get("name")
    return f"{meta.get('namespace', '')}/{name}" if isinstance(name, str) and name else None


@dataclass(frozen=True, slots=True)
class PodRecord:
    """A pod that holds GPUs now: bound to ``node``, not terminal."""

    node: str
    gpus: int


class InventoryState:
    """Nodes, GPU pods and namespaces as list+watch reports them. Not thread-safe: callers serialize."""

    def __init__(self, config: Config, kinds: tuple[Kind, ...] = KINDS) -> None:
        self.config = config
        self.kinds = kinds
        self._resource = config.labels.gpu_resource
        # DRA: objects by kind and key (name, or namespace/name), the nodes' label-only NodeGPUs, and the
        # devices the slices give each node.
        self._dra: dict[Kind, dict[str, dict[str, Any]]] = {k: {} for k in DRA_KINDS}
        self._dra_rv: dict[tuple[Kind, str], int | None] = {}
        self._base: dict[str, NodeGPUs] = {}
        self._devices: dict[str, tuple[Device, ...]] = {}
        self._dra_view = DraView(drivers=tuple(config.labels.dra_drivers))
        # ResourceClaims as the DRA view holds them, (namespace, name) → claim spec, and each one's key.
        self._claim_specs: dict[tuple[str, str], dict[str, Any]] = {}
        self._claim_keys: dict[str, tuple[str, str]] = {}
        # nodes
        self._nodes: dict[str, NodeGPUs] = {}
        self._node_rv: dict[str, int | None] = {}  # last applied RV per node; tombstones for deleted ones
        self._node_version: dict[str, str] = {}  # raw RV of each live node (Snapshot.versions)
        self._caps: dict[str, int] = {}
        self._classes: dict[str, int] = {}
        self._free: dict[str, int] = {}
        self._table = ClassTable()
        self._gpu_nodes = 0
        # pods: only pods that request GPUs are tracked
        self._pods: dict[str, PodRecord] = {}
        self._pod_rv: dict[str, int | None] = {}
        self._used: dict[str, int] = {}
        # namespaces
        self._enforcement: dict[str, str] = {}
        self._ns_rv: dict[str, int | None] = {}
        # priority classes: name → (value, preemptionPolicy)
        self._priorities: dict[str, tuple[int, str]] = {}
        self._pc_rv: dict[str, int | None] = {}
        # NodePools by name, and what they parse into (rebuilt only when one changes)
        self._pools: dict[str, dict[str, Any]] = {}
        self._pool_rv: dict[str, int | None] = {}
        self._provisioners = read_provisioners((), config)
        # per kind
        self._resume: dict[Kind, str] = {}
        self._listed: set[Kind] = set()
        self._revision = 0
        self._dirty = True
        self._nodes_changed = True  # a node's NodeGPUs changed since the last snapshot (not just its free GPUs)
        self._nodes_revision = 0  # counts the snapshots whose nodes changed (Snapshot.nodes_revision)
        self._snapshot = Snapshot()

    # ---- queries ---------------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        """True once every kind has been listed in full at least once."""
        return self._listed >= set(self.kinds)

    def resource_version(self, kind: Kind) -> str | None:
        """Where a watch of ``kind`` resumes: the list's RV, advanced by events and bookmarks."""
        return self._resume.get(kind)

    @property
    def gpu_node_count(self) -> int:
        return self._gpu_nodes

    @property
    def size(self) -> int:
        """Objects held: nodes, GPU pods and labelled namespaces (what the heap settler weighs changes against)."""
        return len(self._nodes) + len(self._pods) + len(self._enforcement)

    def used(self, node: str) -> int:
        return self._used.get(node, 0)

    def snapshot(self) -> Snapshot:
        """The current state as an immutable Snapshot; the same object until something changes."""
        if self._dirty:
            self._revision += 1
            nodes_changed, self._nodes_changed = self._nodes_changed, False
            self._nodes_revision += int(nodes_changed)
            # Plain dicts (copies, never mutated afterwards): the extender's hot loop maps over them.
            previous = self._snapshot
            self._snapshot = Snapshot(
                nodes=dict(self._nodes),
                free=dict(self._free),
                synced=self.synced,
                revision=self._revision,
                enforcement=dict(self._enforcement),
                classes=dict(self._classes),
                class_info=self._table.info,
                versions=dict(self._node_version),
                dra=self._dra_view,
                nodes_revision=self._nodes_revision,
                priority_classes=self._priorities,
                provisioners=self._provisioners,
            )
            if not nodes_changed:
                # Pod churn changes free GPUs only: the first review after it must not re-sort the fleet.
                carry_node_views(previous, self._snapshot)
            self._dirty = False
        return self._snapshot

    # ---- lists -----------------------------------------------------------------------------

    def relist(self, kind: Kind, items: Iterable[Any], rv: str | None) -> None:
        """Replace everything known of ``kind`` with a full list taken at resourceVersion ``rv``.

        Objects missing from the list are gone, unless we hold a newer version than the list
        itself (it was written after the list was taken). Tombstones are dropped: a watch started
        from ``rv`` only reports later events.
        """
        list_rv = rv_number(rv)
        if kind in DRA_KINDS:
            objs: dict[str, dict[str, Any]] = {}
            for obj in items:
                key = _dra_key(obj) if isinstance(obj, dict) else None
                if key is not None:
                    # list items carry no kind; of a claim only what is judged is kept
                    objs[key] = _claim_part(obj) if kind == "ResourceClaim" else {**obj, "kind": kind}
                    self._dra_rv[(kind, key)] = rv_number(resource_version(obj))
            self._dra_rv = {k: v for k, v in self._dra_rv.items() if k[0] != kind or k[1] in objs}
            self._dra[kind] = objs
            self._dra_changed(kind)
        elif kind == POOL_KIND:
            pools: dict[str, dict[str, Any]] = {}
            for obj in items:
                name = _name(obj) if isinstance(obj, dict) else None
                if name is not None:
                    pools[name] = {**obj, "kind": POOL_KIND}  # list items carry no kind
                    self._pool_rv[name] = rv_number(resource_version(obj))
            self._pool_rv = {k: v for k, v in self._pool_rv.items() if k in pools}
            self._pools = pools
            self._pools_changed()
        elif kind == PRIORITY_KIND:
            seen = _upsert_each(items, _name, self._upsert_priority)
            for name in [n for n in self._pc_rv if n not in seen]:
                if not _stale(list_rv, self._pc_rv.get(name)) or name not in self._priorities:
                    self._drop_priority(name)
                    self._pc_rv.pop(name, None)
        elif kind == "Node":
            seen = _upsert_each(items, _name, self._upsert_node)
            for name in [n for n in self._nodes if n not in seen]:
                if not _stale(list_rv, self._node_rv.get(name)):
                    self._remove_node(name)
            self._node_rv = {n: v for n, v in self._node_rv.items() if n in self._nodes}
        elif kind == "Pod":
            seen = _upsert_each(items, _pod_key, self._upsert_pod)
            for key in [k for k in self._pod_rv if k not in seen]:
                if not _stale(list_rv, self._pod_rv.get(key)) or key not in self._pods:
                    self._release(key)
                    self._pod_rv.pop(key, None)
            self._pod_rv = {k: v for k, v in self._pod_rv.items() if k in self._pods or k in seen}
        else:
            seen = _upsert_each(items, _name, self._upsert_namespace)
            for name in [n for n in self._ns_rv if n not in seen]:
                if not _stale(list_rv, self._ns_rv.get(name)) or name not in self._enforcement:
                    self._enforcement.pop(name, None)
                    self._ns_rv.pop(name, None)
            self._ns_rv = {n: v for n, v in self._ns_rv.items() if n in seen or n in self._enforcement}
        if rv:
            self._resume[kind] = rv
        self._listed.add(kind)
        self._dirty = True

    # ---- events ----------------------------------------------------------------------------

    def apply(self, kind: Kind, event: Any) -> Outcome:
        """Apply one watch event. "gone" (410: the caller must re-list) and "error" change nothing."""
        if not isinstance(event, dict):
            return "unchanged"
        etype = event.get("type")
        obj = event.get("object")
        if etype == "ERROR":
            status = obj if isinstance(obj, dict) else {}
            if status.get("code") == 410 or status.get("reason") in ("Expired", "Gone"):
                return "gone"
            return "error"
        if not isinstance(obj, dict):
            return "unchanged"
        rv = resource_version(obj)
        if etype == "BOOKMARK":
            self._advance(kind, rv)
            return "unchanged"
        if etype in ("ADDED", "MODIFIED"):
            outcome = self._upsert(kind, obj)
        elif etype == "DELETED":
            outcome = self._delete(kind, obj)
        else:
            return "unchanged"
        self._advance(kind, rv)
        return outcome

    def _advance(self, kind: Kind, rv: str | None) -> None:
        if not rv:
            return
        current = self._resume.get(kind)
        new, old = rv_number(rv), rv_number(current)
        if current is None or new is None or old is None or new > old:
            self._resume[kind] = rv

    def _upsert(self, kind: Kind, obj: dict[str, Any]) -> Outcome:
        if kind in DRA_KINDS:
            key = _dra_key(obj)
            if key is None:
                return "unchanged"
            new = rv_number(resource_version(obj))
            if _stale(new, self._dra_rv.get((kind, key))):
                return "stale"
            self._dra_rv[(kind, key)] = new
            if kind == "ResourceClaim":
                # Only a claim's spec is judged, and it is immutable: its status writes (allocation, reservedFor)
                # change nothing here, so they rebuild nothing.
                old = self._dra[kind].get(key)
                self._dra[kind][key] = _claim_part(obj)
                if old is not None and old.get("spec") == obj.get("spec"):
                    return "applied"
            else:
                self._dra[kind][key] = {**obj, "kind": kind}
            self._dra_changed(kind, key)
            return "applied"
        if kind == POOL_KIND:
            name = _name(obj)
            if name is None:
                return "unchanged"
            new = rv_number(resource_version(obj))
            if _stale(new, self._pool_rv.get(name)):
                return "stale"
            self._pool_rv[name] = new
            self._pools[name] = {**obj, "kind": POOL_KIND}
            self._pools_changed()
            return "applied"
        if kind == PRIORITY_KIND:
            name = _name(obj)
            return "unchanged" if name is None else self._upsert_priority(name, obj)
        if kind == "Node":
            name = _name(obj)
            return "unchanged" if name is None else self._upsert_node(name, obj)
        if kind == "Pod":
            key = _pod_key(obj)
            return "unchanged" if key is None else self._upsert_pod(key, obj)
        name = _name(obj)
        return "unchanged" if name is None else self._upsert_namespace(name, obj)

    def _delete(self, kind: Kind, obj: dict[str, Any]) -> Outcome:
        new = rv_number(resource_version(obj))
        if kind in DRA_KINDS:
            key = _dra_key(obj)
            if key is None or _stale(new, self._dra_rv.get((kind, key))):
                return "unchanged" if key is None else "stale"
            self._dra_rv[(kind, key)] = new  # tombstone until the next re-list
            if self._dra[kind].pop(key, None) is None:
                return "unchanged"
            self._dra_changed(kind, key)
            return "applied"
        if kind == POOL_KIND:
            name = _name(obj)
            if name is None or _stale(new, self._pool_rv.get(name)):
                return "unchanged" if name is None else "stale"
            self._pool_rv[name] = new  # tombstone until the next re-list
            if self._pools.pop(name, None) is None:
                return "unchanged"
            self._pools_changed()
            return "applied"
        if kind == PRIORITY_KIND:
            name = _name(obj)
            if name is None or _stale(new, self._pc_rv.get(name)):
                return "unchanged" if name is None else "stale"
            existed = self._drop_priority(name)
            self._pc_rv[name] = new  # tombstone until the next re-list
            return "applied" if existed else "unchanged"
        if kind == "Node":
            name = _name(obj)
            if name is None:
                return "unchanged"
            if _stale(new, self._node_rv.get(name)):
                return "stale"
            existed = name in self._nodes
            self._remove_node(name)
            self._node_rv[name] = new  # tombstone
            self._prune_tombstones()
            return "applied" if existed else "unchanged"
        if kind == "Pod":
            key = _pod_key(obj)
            if key is None or key not in self._pod_rv:  # never held GPUs: nothing to do
                return "unchanged"
            if _stale(new, self._pod_rv.get(key)):
                return "stale"
            existed = key in self._pods
            self._release(key)
            self._pod_rv[key] = new  # tombstone
            self._prune_tombstones()
            return "applied" if existed else "unchanged"
        name = _name(obj)
        if name is None:
            return "unchanged"
        if _stale(new, self._ns_rv.get(name)):
            return "stale"
        existed = self._enforcement.pop(name, None) is not None
        self._ns_rv[name] = new
        self._dirty = self._dirty or existed
        return "applied" if existed else "unchanged"

    # ---- nodes -----------------------------------------------------------------------------

    def _upsert_node(self, name: str, obj: dict[str, Any]) -> Outcome:
        rv = resource_version(obj)
        new = rv_number(rv)
        if _stale(new, self._node_rv.get(name)):
            return "stale"
        base = node_gpus(obj, self.config)
        self._base[name] = base
        info = with_devices(base, self._devices.get(name, ()))
        return self._set_node(name, info, rv, new)

    def _set_node(self, name: str, info: NodeGPUs, rv: str | None, new: int | None) -> Outcome:
        old = self._nodes.get(name)
        if old is not None and old == info and old.labels == info.labels and old.taints == info.taints:
            # An update that changes nothing vramgate reads (a status heartbeat, an annotation): keep the very
            # object, so what downstream caches by identity (the controller's steady decisions and per-node
            # metrics, the sorted node lists) stays cached instead of being redone for every node.
            info = old
        self._gpu_nodes += int(info.is_gpu_node) - int(old is not None and old.is_gpu_node)
        self._nodes[name] = info
        self._node_rv[name] = new
        self._node_version[name] = rv or ""
        if info is not old:
            self._nodes_changed = True  # labels and taints too: the sorted lists hand these objects to selectors
        if old is None or old != info:  # the capability (what placement classes compare) changed
            if len(self._table) > 4 * len(self._nodes) + 1024:
                self._reintern()
            self._caps[name] = self._table.cap_of(info)
        self._refresh(name)
        return "applied"

    def _remove_node(self, name: str) -> None:
        self._base.pop(name, None)
        old = self._nodes.pop(name, None)
        if old is None:
            return
        self._gpu_nodes -= int(old.is_gpu_node)
        for table in (self._node_version, self._caps, self._classes, self._free):
            table.pop(name, None)
        self._dirty = self._nodes_changed = True

    def _refresh(self, name: str) -> None:
        """Recompute a node's free GPUs and class after its capability or its pods changed."""
        node = self._nodes.get(name)
        if node is None:
            return
        free = max(0, node.allocatable - self._used.get(name, 0))
        self._free[name] = free
        self._classes[name] = self._table.class_of_cap(self._caps[name], free)
        self._dirty = True

    def _reintern(self) -> None:
        """Class ids only need to be consistent within a snapshot: start the table afresh when it grows."""
        self._table = ClassTable()
        for name, node in self._nodes.items():
            self._caps[name] = self._table.cap_of(node)
            self._classes[name] = self._table.class_of_cap(self._caps[name], self._free.get(name, 0))

    # ---- DRA -------------------------------------------------------------------------------

    def _dra_changed(self, kind: Kind, key: str | None = None) -> None:
        """Re-derive what a DRA kind feeds: the nodes' devices (slices) or the classes and templates view."""
        drivers = self.config.labels.dra_drivers
        if kind == "ResourceSlice":
            devices = devices_by_node(self._dra["ResourceSlice"].values(), drivers)
            for name in set(devices) | set(self._devices):
                if devices.get(name) == self._devices.get(name):
                    continue
                base = self._base.get(name)
                if base is not None:
                    self._set_node(name, with_devices(base, devices.get(name, ())), self._node_version.get(name),
                                   self._node_rv.get(name))
            self._devices = dict(devices)
        elif kind == "ResourceClaim":
            # One claim per pod: updated by key (a copy of the table, not a re-read of every claim).
            objs = self._dra[kind]
            keys = [key] if key is not None else None
            if keys is None:
                self._claim_keys, self._claim_specs = {}, {}
                keys = list(objs)
            for k in keys:
                old = self._claim_keys.pop(k, None)
                if old is not None:
                    self._claim_specs.pop(old, None)
                got = dra_view([objs[k]], drivers).claims if k in objs else {}
                for where, spec in got.items():
                    self._claim_keys[k], self._claim_specs[where] = where, spec
            self._dra_view = replace(self._dra_view, claims=dict(self._claim_specs))
        else:
            self._dra_view = replace(dra_view([*self._dra["DeviceClass"].values(),
                                               *self._dra["ResourceClaimTemplate"].values()], drivers),
                                     claims=dict(self._claim_specs))
        self._dirty = True

    # ---- pods ------------------------------------------------------------------------------

    def _upsert_pod(self, key: str, obj: dict[str, Any]) -> Outcome:
        new = rv_number(resource_version(obj))
        # Each vendor's resource: an amd.com/gpu pod holds GPUs of its AMD node as an nvidia.com/gpu one does.
        gpus = pod_gpus_of(obj, self._resource)
        if gpus == 0 and key not in self._pod_rv:
            return "unchanged"  # GPU requests are immutable: a pod without any never matters
        if _stale(new, self._pod_rv.get(key)):
            return "stale"
        self._pod_rv[key] = new
        record = PodRecord(str(obj["spec"]["nodeName"]), gpus) if gpus and holds_gpus(obj) else None
        if record == self._pods.get(key):
            return "unchanged"
        self._release(key)
        if record is not None:
            self._pods[key] = record
            self._used[record.node] = self._used.get(record.node, 0) + record.gpus
            self._refresh(record.node)
        return "applied"

    def _release(self, key: str) -> None:
        """Give back the GPUs a pod held (its resourceVersion record is the caller's business)."""
        record = self._pods.pop(key, None)
        if record is None:
            return
        left = self._used.get(record.node, 0) - record.gpus
        if left > 0:
            self._used[record.node] = left
        else:
            self._used.pop(record.node, None)
        self._refresh(record.node)

    def _prune_tombstones(self) -> None:
        if len(self._pod_rv) > 2 * len(self._pods) + 4096:
            self._pod_rv = {k: v for k, v in self._pod_rv.items() if k in self._pods}
        if len(self._node_rv) > 2 * len(self._nodes) + 1024:
            self._node_rv = {k: v for k, v in self._node_rv.items() if k in self._nodes}

    # ---- NodePools --------------------------------------------------------------------------

    def _pools_changed(self) -> None:
        # A new Provisioners (its offers cache starts empty): published snapshots keep the old one.
        self._provisioners = read_provisioners(self._pools.values(), self.config)
        for problem in self._provisioners.problems:  # left out: its nodes are not counted on
            log.warning("%s; left out of scale-up", problem)
        self._dirty = True

    # ---- priority classes ------------------------------------------------------------------

    def _upsert_priority(self, name: str, obj: dict[str, Any]) -> Outcome:
        new = rv_number(resource_version(obj))
        if _stale(new, self._pc_rv.get(name)):
            return "stale"
        self._pc_rv[name] = new
        value, policy = obj.get("value"), obj.get("preemptionPolicy") or "PreemptLowerPriority"
        if type(value) is not int or not isinstance(policy, str):
            return "applied" if self._drop_priority(name) else "unchanged"
        if self._priorities.get(name) == (value, policy):
            return "unchanged"
        # A new dict, not a mutation: published snapshots hold the old one.
        self._priorities = {**self._priorities, name: (value, policy)}
        self._dirty = True
        return "applied"

    def _drop_priority(self, name: str) -> bool:
        """Forget a class's value (its resourceVersion is the caller's); whether there was one."""
        if name not in self._priorities:
            return False
        self._priorities = {k: v for k, v in self._priorities.items() if k != name}
        self._dirty = True
        return True

    # ---- namespaces ------------------------------------------------------------------------

    def _upsert_namespace(self, name: str, obj: dict[str, Any]) -> Outcome:
        new = rv_number(resource_version(obj))
        if _stale(new, self._ns_rv.get(name)):
            return "stale"
        self._ns_rv[name] = new
        labels = obj["metadata"].get("labels")
        value = labels.get(ENFORCEMENT_LABEL) if isinstance(labels, dict) else None
        if not isinstance(value, str) or not value:
            value = None
        if self._enforcement.get(name) == value:
            return "unchanged"
        if value is None:
            self._enforcement.pop(name, None)
        else:
            self._enforcement[name] = value
        self._dirty = True
        return "applied"


# ---- I/O ---------------------------------------------------------------------------------------


class Gone(Exception):
    """410 Gone: the resourceVersion is too old (or a continue token expired); re-list."""


class Unavailable(Exception):
    """404: the API server does not serve this kind (resource.k8s.io/v1 before Kubernetes 1.34, or DRA off);
    403: vramgate may not read it."""


class WatchError(Exception):
    """The API server ended a watch with an ERROR event other than 410."""


class WatchApi(Protocol):
    """The three calls the inventory makes; the official client in production, a fake in tests."""

    def list_page(self, kind: Kind, *, limit: int, cont: str | None) -> dict[str, Any]:
        """One page of a list: ``items``, ``metadata.resourceVersion``, ``metadata.continue``. Raises Gone."""
        ...

    def watch(self, kind: Kind, resource_version: str | None, timeout_s: int) -> Iterator[list[dict[str, Any]]]:
        """Watch events in batches (what arrived together); ends when the server closes. Raises Gone."""
        ...

    def interrupt(self) -> None:
        """Unblock reads in progress (on stop)."""
        ...

    def ready(self) -> bool:
        """Whether the API server answers now (``/version``): probed while a retry waits, to retry once it is back."""
        ...


class Backoff:
    """Exponential back-off with jitter: a random delay in [d/2, d], d doubling from ``base`` to ``cap``."""

    def __init__(self, base: float = 0.5, cap: float = 30.0, rng: random.Random | None = None) -> None:
        self.base, self.cap = base, cap
        self._rng = rng or random.Random()
        self._attempt = 0

    def next(self) -> float:
        delay = min(self.cap, self.base * (2 ** self._attempt))
        self._attempt = min(self._attempt + 1, 32)
        return delay / 2 + self._rng.uniform(0, delay / 2)

    def reset(self) -> None:
        self._attempt = 0


class KubeApi:
    """WatchApi over the official ``kubernetes`` client (sync; the inventory runs it in threads)."""

    # No bytes for this long means a dead watch: the watch cache sends each watcher a bookmark every minute
    # (k8s.io/apiserver pkg/storage/cacher, defaultBookmarkFrequency), so one missed bookmark and slack restarts
    # it, resumed from its resourceVersion (was 150 s: a silent watch went unnoticed for 2.5 min).
    READ_TIMEOUT_S = 90

    def __init__(self, kubeconfig: str | None = None, *, client: Any = None,
                 optional: tuple[Kind, ...] = OPTIONAL_KINDS) -> None:
        """``client``: an ApiClient to use instead of one from ``kubeconfig`` (the CLI's, with its --context).
        ``optional``: the kinds a 403 or 404 makes Unavailable (listed as none) rather than an error."""
        from kubernetes import client as k8s

        from .client import api_client

        api = client if client is not None else api_client(kubeconfig)
        self._optional = optional
        self._core = k8s.CoreV1Api(api)
        self._resource = k8s.ResourceV1Api(api)
        self._scheduling = k8s.SchedulingV1Api(api)
        self._custom = k8s.CustomObjectsApi(api)
        # The liveness probe makes one attempt (urllib3's default retries made a frozen API server's probe 4 × 2 s).
        self._version = k8s.VersionApi(api_client(kubeconfig, retries=False) if client is None else api)
        self._open: set[Any] = set()
        self._lock = threading.Lock()

    def _call(self, kind: Kind, **kw: Any) -> Any:
        from kubernetes.client.exceptions import ApiException

        core, res = self._core, self._resource
        calls: dict[str, Any] = {
            "Node": core.list_node, "Pod": core.list_pod_for_all_namespaces, "Namespace": core.list_namespace,
            "ResourceSlice": res.list_resource_slice, "DeviceClass": res.list_device_class,
            "ResourceClaimTemplate": res.list_resource_claim_template_for_all_namespaces,
            "ResourceClaim": res.list_resource_claim_for_all_namespaces,
            PRIORITY_KIND: self._scheduling.list_priority_class,
            POOL_KIND: lambda **kw: self._custom.list_cluster_custom_object(
                group=NODEPOOL_GROUP, version=NODEPOOL_VERSION, plural=NODEPOOL_PLURAL, **kw),
        }
        fn = calls[kind]
        if kind == "Pod":
            kw["field_selector"] = POD_FIELD_SELECTOR
        try:
            return fn(_preload_content=False, **kw)
        except ApiException as exc:
            if exc.status == 410:
                raise Gone(f"{kind}: {exc.reason}") from exc
            if exc.status in (403, 404) and kind in self._optional:
                # 403: installed without the read rules (an older chart); run without the kind, not unready.
                raise Unavailable(f"{kind}: {exc.status} {exc.reason}") from exc
            raise

    def list_page(self, kind: Kind, *, limit: int, cont: str | None) -> dict[str, Any]:
        kw: dict[str, Any] = {"limit": limit, "_request_timeout": (10, 120)}
        if cont:
            kw["_continue"] = cont
        resp = self._call(kind, **kw)
        try:
            data = orjson.loads(resp.data)
        finally:
            resp.release_conn()
        return data if isinstance(data, dict) else {}

    def watch(self, kind: Kind, resource_version: str | None, timeout_s: int) -> Iterator[list[dict[str, Any]]]:
        kw: dict[str, Any] = {
            "watch": True, "allow_watch_bookmarks": True, "timeout_seconds": timeout_s,
            "_request_timeout": (10, self.READ_TIMEOUT_S),
        }
        if resource_version:
            kw["resource_version"] = resource_version
        resp = self._call(kind, **kw)
        with self._lock:
            self._open.add(resp)
        try:
            yield from event_batches(resp.stream(amt=None, decode_content=False))
        finally:
            with self._lock:
                self._open.discard(resp)
            resp.close()

    def ready(self) -> bool:
        try:  # /version: served by every version of both, and readable by anyone (system:public-info-viewer)
            self._version.get_code(_request_timeout=(1, 2))
        except Exception:
            return False
        return True

    def interrupt(self) -> None:
        with self._lock:
            open_now = list(self._open)
        for resp in open_now:
            with contextlib.suppress(Exception):  # best effort on the way out
                shutdown = getattr(resp, "shutdown", None)
                (shutdown or resp.close)()


def list_pages(api: WatchApi, kind: Kind, page_size: int = 500, *, heard: Callable[[], None] | None = None,
               stop: Callable[[], bool] | None = None) -> tuple[list[Any], str | None]:
    """Every item of a paged list of ``kind`` (``continue`` tokens followed), and the list's resourceVersion.

    ``heard`` is called after each page; ``stop`` ends the paging early (what was read so far is returned).
    Raises what ``api.list_page`` raises (Gone, Unavailable, API errors).
    """
    items: list[Any] = []
    cont: str | None = None
    rv: str | None = None
    while True:
        page = api.list_page(kind, limit=page_size, cont=cont)
        if heard is not None:
            heard()
        page_items = page.get("items")
        items.extend(page_items if isinstance(page_items, list) else [])
        meta = page.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        rv = meta.get("resourceVersion") or rv
        cont = meta.get("continue") or None
        if not cont or (stop is not None and stop()):
            return items, rv


def list_once(config: Config, api: WatchApi, kinds: tuple[Kind, ...] | None = None, *, page_size: int = 500,
              gone_retries: int = 2) -> Snapshot:
    """The inventory from one full list of each kind, as the service lists before it watches: its Snapshot.

    ``kinds``: default as the service (``inventory_kinds``). A kind the API reports Unavailable (an optional
    kind answering 403 or 404) counts as listed, with none, as the service runs without it. A list whose
    ``continue`` token expired (Gone) is taken again from the start, up to ``gone_retries`` times.
    """
    kinds = inventory_kinds(config) if kinds is None else kinds
    state = InventoryState(config, kinds)
    for kind in kinds:
        for attempt in range(gone_retries + 1):
            try:
                items, rv = list_pages(api, kind, page_size)
            except Unavailable as exc:
                log.info("%s not served by the API server (%s): listed without it", kind, exc)
                items, rv = [], None
            except Gone:
                if attempt < gone_retries:
                    continue
                raise
            break
        state.relist(kind, items, rv)
    return state.snapshot()


# The CLI reads namespaces for their enforcement labels only: where it may not list them, every namespace enforces.
CLI_OPTIONAL_KINDS: tuple[Kind, ...] = (*OPTIONAL_KINDS, "Namespace")


def live_snapshot(config: Config, kubeconfig: str | None = None, *, client: Any = None) -> Snapshot:
    """The live inventory for the CLI (check, nodes, fit, audit, explain): ``list_once`` over ``KubeApi``.

    ``client``: an ApiClient already made (with a --context); else one from ``kubeconfig`` (else in-cluster,
    else the default kubeconfig). Raises the client's errors.
    """
    return list_once(config, KubeApi(kubeconfig, client=client, optional=CLI_OPTIONAL_KINDS))


def event_batches(chunks: Iterable[bytes]) -> Iterator[list[dict[str, Any]]]:
    """Newline-delimited watch events from a byte stream, batched by the chunk that completed them."""
    pending: list[bytes] = []
    for chunk in chunks:
        if b"\n" not in chunk:
            pending.append(chunk)
            continue
        pending.append(chunk)
        *lines, rest = b"".join(pending).split(b"\n")
        pending = [rest] if rest else []
        batch = [orjson.loads(line) for line in lines if line.strip()]
        if batch:
            yield batch
    rest = b"".join(pending)
    if rest.strip():
        yield [orjson.loads(rest)]


class KubeInventory:
    """snapshot.InventorySource over a live cluster: list+watch of Nodes, Pods and Namespaces (and the DRA kinds).

    ``snapshot()`` is lock-free (a reference read) and cheap; ``synced`` turns true after the first
    full list of all three kinds. ``api`` replaces the official client (tests pass a fake).
    """

    UNAVAILABLE_RETRY_S = 600
    # A frozen API server (accepting connections, answering nothing) leaves every watch waiting for its read
    # timeout. When nothing has been heard for QUIET_S, /version is probed every PROBE_EVERY_S (1 s to connect,
    # 2 s to answer); after FROZEN_AFTER_PROBES failures in a row the inventory says it is stale (/readyz, the
    # status page, a gauge) and the open watches are cut, so they resume through the retry loop as soon as the
    # API server answers again: seen within ~15 s of the freeze, not at the 90-150 s read timeout.
    QUIET_S = 5.0
    PROBE_EVERY_S = 5.0
    FROZEN_AFTER_PROBES = 2
    # While a retry waits, the API server is probed this often: the watch resumes this soon after its return.
    PROBE_INTERVAL_S = 0.25

    def __init__(self, config: Config, kubeconfig: str | None = None, metrics: Metrics | None = None, *,
                 api: WatchApi | None = None, page_size: int = 500, watch_timeout_s: tuple[int, int] = (300, 600),
                 backoff_base_s: float = 0.5, backoff_cap_s: float = 3.0, dra: bool | None = None,
                 priorities: bool | None = None, pools: bool | None = None, settler: Settler | None = None) -> None:
        """``dra``: also list+watch the DRA kinds (default: with the real client, when the config names a driver).
        ``priorities``: also list+watch PriorityClasses (default: with the real client).
        ``pools``: also list+watch Karpenter NodePools (default: with the real client; none where the CRD is not
        served or the RBAC does not grant them, asked again now and then).

        ``settler`` freezes the inventory out of the garbage collector after each list and after enough
        watch changes (``kube/heap.py``): the serving process passes one; without it the heap is left alone.

        The retry back-off is capped at ``backoff_cap_s`` (3 s, with jitter): after an API server restart the
        inventory re-lists within seconds of its return, not after a 30 s wait (blind for 11–19 s before).
        """
        self.config = config
        self.kubeconfig = kubeconfig
        self.metrics = metrics
        self._api = api
        self._page_size = page_size
        self._watch_timeout = watch_timeout_s
        self._backoff = (backoff_base_s, backoff_cap_s)
        if dra is None:
            dra = api is None and bool(config.labels.dra_drivers)
        if priorities is None:
            priorities = api is None
        if pools is None:
            pools = api is None
        self.kinds = inventory_kinds(config, dra=dra, priorities=priorities, pools=pools)
        self._state = InventoryState(config, self.kinds)
        self._settler = settler
        self._lock = threading.Lock()
        self._snapshot = self._state.snapshot()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._last_heard = time.monotonic()
        self._unanswered_since: float | None = None
        self._failed_probes = 0
        self._frozen = False
        self._rng = random.Random()
        if metrics is not None:
            metrics.inventory_staleness.set_function(self.staleness)
            metrics.inventory_api_answering.set(1)

    # ---- InventorySource -------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        return self._snapshot

    async def start(self) -> None:
        """Start the watch threads; returns at once (``/readyz`` reports the first sync)."""
        if self._threads:
            return
        if self._api is None:
            self._api = await asyncio.to_thread(KubeApi, self.kubeconfig)
        self._stop.clear()
        for kind in self.kinds:
            thread = threading.Thread(target=self._run, args=(kind,), name=f"vramgate-watch-{kind.lower()}",
                                      daemon=True)
            self._threads.append(thread)
            thread.start()
        liveness = threading.Thread(target=self._watch_liveness, name="vramgate-watch-liveness", daemon=True)
        self._threads.append(liveness)
        liveness.start()

    async def stop(self) -> None:
        self._stop.set()
        if self._api is not None:
            self._api.interrupt()
        threads, self._threads = self._threads, []
        await asyncio.to_thread(self._join, threads)

    # ---- observability ---------------------------------------------------------------------

    def staleness(self) -> float:
        """Seconds since the API server last told us something (a list page, events or a bookmark)."""
        return time.monotonic() - self._last_heard

    def unanswered(self) -> float | None:
        """Seconds the API server has not answered vramgate's probes, once it is seen frozen; else None."""
        since = self._unanswered_since
        if not self._frozen or since is None:
            return None
        return time.monotonic() - since

    def wait_synced(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not self._snapshot.synced:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    # ---- the loops -------------------------------------------------------------------------

    @staticmethod
    def _join(threads: list[threading.Thread]) -> None:
        for thread in threads:
            thread.join(timeout=5)

    def _run(self, kind: Kind) -> None:
        backoff = Backoff(*self._backoff, rng=self._rng)
        must_list = True
        while not self._stop.is_set():
            try:
                if must_list:
                    self._list(kind)
                    must_list = False
                if not self._watch(kind, backoff):  # closed before any event: do not spin
                    self._stop.wait(backoff.next())
            except Unavailable as exc:
                # Not served: count it listed (with nothing) and look again now and then.
                log.info("%s not served by the API server (%s); running without it, checking again in %ss", kind, exc,
                         self.UNAVAILABLE_RETRY_S)
                with self._lock:
                    self._state.relist(kind, [], None)
                    self._publish()
                must_list = True
                self._stop.wait(self.UNAVAILABLE_RETRY_S)
            except Gone as exc:
                log.info("%s watch expired (%s): re-listing", kind, exc)
                if self.metrics is not None:
                    self.metrics.inventory_relists.labels(resource=kind, cause="gone").inc()
                must_list = True
            except Exception as exc:
                if self._stop.is_set():
                    break
                delay = backoff.next()
                log.warning("%s %s failed (%s: %s); retrying in %.1fs (sooner if the API server comes back) from "
                            "resourceVersion %s", kind, "list" if must_list else "watch", type(exc).__name__, exc,
                            delay, self._state.resource_version(kind))
                self._retry_wait(delay)

    def _watch_liveness(self) -> None:
        """Probe the API server while the watches are quiet; cut them once it has stopped answering."""
        while not self._stop.wait(self.PROBE_EVERY_S):
            if self.staleness() < self.QUIET_S:
                self._answered()
                continue
            if self._probe():
                self._answered()
                continue
            now = time.monotonic()
            if self._unanswered_since is None:
                self._unanswered_since = now - self.PROBE_EVERY_S  # it was quiet that long before this probe
            self._failed_probes += 1
            if not self._frozen and self._failed_probes >= self.FROZEN_AFTER_PROBES:
                self._frozen = True
                log.warning("the API server has not answered for %.0f s (nothing heard for %.0f s): the inventory "
                            "is stale; restarting the watches", now - self._unanswered_since, self.staleness())
                if self.metrics is not None:
                    self.metrics.inventory_api_answering.set(0)
                if self._api is not None:
                    self._api.interrupt()

    def _answered(self) -> None:
        if self._frozen:
            log.warning("the API server answers again after %.0f s", time.monotonic() - (self._unanswered_since or 0))
            if self.metrics is not None:
                self.metrics.inventory_api_answering.set(1)
        self._unanswered_since = None
        self._failed_probes = 0
        self._frozen = False

    def _retry_wait(self, delay: float) -> None:
        """Wait ``delay`` seconds, or until the API server, seen down meanwhile, answers again.

        The probe cuts the wait only after a failed probe: an API server that is up but refuses (a 500, a
        403) keeps the back-off, one that restarts is re-listed within a probe interval of its return.
        """
        deadline = time.monotonic() + delay
        seen_down = False
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or self._stop.wait(min(self.PROBE_INTERVAL_S, left)):
                return
            up = self._probe()
            if up and seen_down:
                return
            seen_down = seen_down or not up

    def _probe(self) -> bool:
        assert self._api is not None
        try:
            return self._api.ready()
        except Exception:  # a probe must never end the loop
            return False

    def _list(self, kind: Kind) -> None:
        items, rv = self._pages(kind)
        with self._lock:
            self._state.relist(kind, items, rv)
            self._publish()
            size = self._state.size
        del items  # the raw list is garbage now: settle frees it instead of freezing it
        if self._settler is not None:
            self._settler.listed(size)

    def _pages(self, kind: Kind) -> tuple[list[Any], str | None]:
        """Every item of a paged list, and the list's resourceVersion."""
        assert self._api is not None
        return list_pages(self._api, kind, self._page_size, heard=self._heard, stop=self._stop.is_set)

    def _watch(self, kind: Kind, backoff: Backoff) -> bool:
        """One watch from the resume point until the server ends it; whether any event arrived."""
        assert self._api is not None
        timeout = self._rng.randint(*self._watch_timeout)
        heard = False
        for batch in self._api.watch(kind, self._state.resource_version(kind), timeout):
            self._heard()
            heard = True
            backoff.reset()
            with self._lock:
                try:
                    for event in batch:
                        outcome = self._state.apply(kind, event)
                        if outcome == "gone":
                            raise Gone(_status_message(event))
                        if outcome == "error":
                            raise WatchError(_status_message(event))
                finally:
                    self._publish()
                    size = self._state.size
            if self._settler is not None:
                self._settler.note(len(batch), size)
            if self._stop.is_set():
                break
        return heard

    def _heard(self) -> None:
        self._last_heard = time.monotonic()
        if self._frozen:  # it answers again: say so now, not at the next probe
            self._answered()

    def _publish(self) -> None:
        """Swap in the state's snapshot (called with the lock held)."""
        self._snapshot = self._state.snapshot()
        if self.metrics is not None:
            self.metrics.inventory_nodes.set(self._state.gpu_node_count)


def _status_message(event: dict[str, Any]) -> str:
    obj = event.get("object")
    if isinstance(obj, dict):
        return str(obj.get("message") or obj.get("reason") or obj.get("code") or "watch error")
    return "watch error"
