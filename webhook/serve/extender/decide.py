"""Filter and prioritize decisions: raw ExtenderArgs bytes in, response bytes out, no I/O.

Speed comes from judging each (capability class, free GPUs) pair once per request: thousands of
nodes share a handful of classes (same product, VRAM, driver, health), so the per-node work is a
few dict lookups. Snapshot.classes carries the class ids, computed when a node event arrives.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from itertools import compress
from typing import Any

import orjson

from ...cluster.inventory import NodeGPUs, node_gpus, with_devices
from ...cluster.snapshot import ClassTable, Snapshot
from ...config import Config, PlacementMode
from ...decide.demand import read_demand
from ...decide.placement import Code, Need, fit, score
from ...decide.rules import spans_hosts
from ...kinds import WorkloadError, pod_view
from ...metrics import Metrics
from ...models.catalog import Catalog
from ...units.bounds import TooLarge
from ...units.declaration import DeclarationError
from .wire import BadRequest, Parsed, check_names, node_name, parse_args

log = logging.getLogger("vramgate.extender")

NOT_IN_INVENTORY = "NotInInventory"
# Short: it is said once per unknown name, and the old 70-byte reason made a 56 MB body of names answer 293 MB.
NOT_IN_INVENTORY_REASON = f"{NOT_IN_INVENTORY}: no Node object seen"
NOT_SYNCED_ERROR = "vramgate: node inventory not synced yet"

# Verdict status: the node passes, fails for now (preemption or waiting may help), or can never fit.
PASS, FAILED, UNRESOLVABLE = 0, 1, 2
_DEMAND_CACHE_SIZE = 1024
_MEMO_NEEDS = 256  # distinct needs (and pod needs) memoised before the memos start afresh

# (PASS/FAILED/UNRESOLVABLE, "<Code>: <reason>" or "", the code)
_Verdict = tuple[int, str, Code | None]


@dataclass(frozen=True)
class PodNeed:
    """What the extender needs from a pod: its Need and the placement mode for scoring."""

    need: Need
    mode: PlacementMode


# A verdict memo key: a snapshot class id, or (capability id, free GPUs) for a node judged from the request.
_MemoKey = int | tuple[int, int | None]
_NO_GPUS = object()  # demand-cache marker: the pod needs no GPU, or its declaration is malformed


class Extender:
    """The scheduler extender's decisions for one service instance."""

    def __init__(self, config: Config, catalog: Catalog, snapshot: Callable[[], Snapshot],
                 metrics: Metrics | None = None) -> None:
        self.config = config
        self.catalog = catalog
        self.snapshot = snapshot
        self.metrics = metrics
        # Needs by pod (uid, resourceVersion) and by pod template (what the need is read from, as bytes).
        self._demands: dict[tuple[str, str] | bytes, object] = {}
        # The DRA view the cached needs were read with: a DeviceClass (extendedResourceName) or claim template that
        # comes or goes changes what a pod asks, so a new view forgets them.
        self._dra_seen: object = None
        self._lock = threading.Lock()
        # Verdicts and scores per need and snapshot class, kept while the snapshots share one class table
        # (class ids are append-only within it): kube-scheduler asks filter then prioritize for each pod, and
        # pods of one Deployment share a need, so most classes are judged once, not once per call.
        self._memo_table: object = None
        self._verdict_memo: dict[Need, dict[int, _Verdict]] = {}
        self._score_memo: dict[PodNeed, dict[int, int]] = {}

    def _memo_for(self, snap: Snapshot) -> None:
        """Start the memos afresh for a new class table, or when they hold too many needs."""
        if snap.class_info is not self._memo_table or len(self._verdict_memo) + len(self._score_memo) > _MEMO_NEEDS:
            self._memo_table = snap.class_info
            self._verdict_memo, self._score_memo = {}, {}

    def use_catalog(self, catalog: Catalog) -> None:
        """Judge with a new catalog from now on (a reloaded models file); forget needs read with the old one."""
        with self._lock:
            self.catalog = catalog
            self._demands.clear()

    # ---- the pod ---------------------------------------------------------------------------

    def pod_need(self, pod: dict[str, Any]) -> PodNeed | None:
        """The pod's need, or None when it asks for no GPU or its declaration is malformed (logged)."""
        dra = self.snapshot().dra
        if dra is not self._dra_seen:
            with self._lock:
                self._demands.clear()
                self._dra_seen = dra
        meta = pod.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        uid, rv = meta.get("uid"), meta.get("resourceVersion")
        key = (uid, rv) if isinstance(uid, str) and uid and isinstance(rv, str) and rv else None
        if key is not None:
            cached = self._demands.get(key)
            if cached is not None:
                return None if cached is _NO_GPUS else cached  # type: ignore[return-value]
        # The pods of one ReplicaSet differ in name and uid only: the first one's need serves the rest.
        template = _template_key(meta, pod.get("spec"))
        cached = self._demands.get(template) if template is not None else None
        if cached is not None:
            result = None if cached is _NO_GPUS else cached
        else:
            result = self._read_need(pod if pod.get("kind") == "Pod" else {**pod, "kind": "Pod"})
        with self._lock:
            if len(self._demands) >= _DEMAND_CACHE_SIZE:
                self._demands.clear()
            for k in (key, template):
                if k is not None:
                    self._demands[k] = _NO_GPUS if result is None else result
        return result  # type: ignore[return-value]

    def _read_need(self, pod: dict[str, Any]) -> PodNeed | None:
        try:
            view = pod_view(pod)
        except WorkloadError as exc:
            raise BadRequest(f"ExtenderArgs.Pod: {exc}") from None
        if view is None:  # pragma: no cover - kind is forced to Pod above
            return None
        try:
            demand = read_demand(view, self.config, self.catalog, dra=self.snapshot().dra)
        except DeclarationError as exc:
            log.warning("pod %s/%s: malformed GPU declaration, keeping every node (admission rejects it): %s",
                        view.namespace, view.name, exc)
            return None
        except (TooLarge, OverflowError, RecursionError) as exc:
            # Past a bound of units/bounds.py: admission admitted it unjudged; the extender keeps every node for it.
            log.debug("pod %s/%s: not judged (too large: %s), keeping every node", view.namespace, view.name, exc)
            return None
        if demand is None:
            return None
        need = Need.of(demand)
        if spans_hosts(demand, self.snapshot().nodes.values()) is not None:
            # A TPU slice over several hosts holds the model with their chips (decide/slices.py): one host's chips
            # are no grounds to fail a node on; devices and health still are.
            need = replace(need, per_gpu_mib=None, expected_mib=None)
        return PodNeed(need, demand.placement or self.config.extender.placement)

    # ---- filter ----------------------------------------------------------------------------

    def filter(self, body: bytes) -> bytes:
        """/scheduler/filter: ExtenderArgs → ExtenderFilterResult. Raises BadRequest."""
        args = parse_args(body)
        pod_need = self.pod_need(args.pod)
        if pod_need is None:
            return _keep_all(args)
        snap = self.snapshot()
        if args.names is not None:
            if not snap.synced:
                return orjson.dumps(_filter_result(None, None, {}, {}, NOT_SYNCED_ERROR))
            passed, failed, unresolvable, codes = self._judge_names(pod_need.need, args.names, snap)
            out = _filter_result(None, passed, failed, unresolvable, "")
        else:
            kept, failed, unresolvable, codes = self._judge_items(pod_need.need, args, snap)
            node_list = {k: v for k, v in args.node_list.items() if k != "items"}  # type: ignore[union-attr]
            node_list["items"] = kept
            out = _filter_result(node_list, None, failed, unresolvable, "")
        self._count(codes)
        return orjson.dumps(out)

    def _judge_names(self, need: Need, names: list[Any], snap: Snapshot
                     ) -> tuple[list[str], dict[str, str], dict[str, str], Counter[Code | None]]:
        keys, classes = _name_classes(names, snap)
        self._memo_for(snap)
        memo = self._verdict_memo.setdefault(need, {})
        verdicts: dict[int | None, _Verdict] = {}
        for key, info in classes.items():
            if info is None:
                verdicts[key] = _NOT_IN_INVENTORY
            elif key is not None and key >= 0:  # a snapshot class (negative: a class of this request only)
                found = memo.get(key)
                verdicts[key] = found if found is not None else memo.setdefault(key, _verdict(need, *info))
            else:
                verdicts[key] = _verdict(need, *info)
        passes = {key: v[0] == PASS for key, v in verdicts.items()}
        passed = list(compress(names, map(passes.__getitem__, keys)))
        failed = _failures(names, keys, verdicts, FAILED)
        unresolvable = _failures(names, keys, verdicts, UNRESOLVABLE)
        codes: Counter[Code | None] = Counter()
        if failed or unresolvable:
            for key, n in Counter(keys).items():
                if not passes[key]:
                    codes[verdicts[key][2]] += n
        return passed, failed, unresolvable, codes

    def _judge_items(self, need: Need, args: Parsed, snap: Snapshot
                     ) -> tuple[list[Any], dict[str, str], dict[str, str], Counter[Code | None]]:
        kept: list[Any] = []
        failed: dict[str, str] = {}
        unresolvable: dict[str, str] = {}
        memo: dict[_MemoKey, tuple[int, str, Code | None]] = {}
        codes: Counter[Code | None] = Counter()
        local = ClassTable()
        for item in args.items or ():
            name = node_name(item)
            node, key, free = self._node_of(item, name, snap, local)
            verdict = memo.get(key)
            if verdict is None:
                verdict = memo[key] = _verdict(need, node, free)
            status = verdict[0]
            if status == PASS:
                kept.append(item)
                continue
            codes[verdict[2]] += 1
            if status == FAILED:
                failed[name] = verdict[1]
            else:
                unresolvable[name] = verdict[1]
        return kept, failed, unresolvable, codes

    def _node_of(self, item: dict[str, Any], name: str, snap: Snapshot, local: ClassTable
                 ) -> tuple[NodeGPUs, _MemoKey, int | None]:
        """The request's Node object as NodeGPUs, a memo key for its verdict, and its free GPUs (None: unknown).

        The Node object in the request wins; the snapshot's precomputed NodeGPUs (and class) is
        reused when it was computed from the very same resourceVersion. Free GPUs come from the
        live snapshot.
        """
        rv = item["metadata"].get("resourceVersion")
        known = snap.nodes.get(name)
        if known is not None and rv and snap.synced and snap.versions.get(name) == rv:
            cls = snap.classes.get(name)
            if cls is not None:
                return known, cls, snap.free_gpus(name)
        node = known if known is not None and rv and snap.versions.get(name) == rv else node_gpus(item, self.config)
        if node is not known and known is not None and known.dra:
            node = with_devices(node, known.dra)  # the Node object says nothing of its DRA devices
        free: int | None = None
        if known is not None and snap.synced:
            used = known.allocatable - snap.free_gpus(name)
            free = max(0, node.allocatable - used)
        return node, (local.cap_of(node), free), free

    def _count(self, codes: Counter[Code | None]) -> None:
        if self.metrics is None:
            return
        metric = self.metrics.extender_filtered
        for code, n in codes.items():
            metric.labels(reason=NOT_IN_INVENTORY if code is None else str(code)).inc(n)

    # ---- prioritize ------------------------------------------------------------------------

    def prioritize(self, body: bytes) -> bytes:
        """/scheduler/prioritize: ExtenderArgs → HostPriorityList (0–10 each). Raises BadRequest."""
        args = parse_args(body)
        pod_need = self.pod_need(args.pod)
        snap = self.snapshot()
        if args.names is not None:
            check_needed = pod_need is None or not snap.synced
            if check_needed:
                check_names(args.names)
                return orjson.dumps([{"Host": n, "Score": 0} for n in args.names])
            return self._score_names(pod_need, args.names, snap)  # type: ignore[arg-type]
        names = [node_name(item) for item in args.items or ()]
        if pod_need is None:
            return orjson.dumps([{"Host": n, "Score": 0} for n in names])
        memo: dict[_MemoKey, int] = {}
        local = ClassTable()
        out = []
        for item, name in zip(args.items or (), names, strict=True):
            node, key, free = self._node_of(item, name, snap, local)
            s = memo.get(key)
            if s is None:
                s = memo[key] = _score(pod_need, node, free)
            out.append({"Host": name, "Score": s})
        return orjson.dumps(out)

    def _score_names(self, pod_need: PodNeed, names: list[Any], snap: Snapshot) -> bytes:
        keys, classes = _name_classes(names, snap)
        self._memo_for(snap)
        memo = self._score_memo.setdefault(pod_need, {})
        scores: dict[int | None, int] = {}
        for key, info in classes.items():
            if info is None:
                scores[key] = 0
            elif key is not None and key >= 0:
                found = memo.get(key)
                scores[key] = found if found is not None else memo.setdefault(key, _score(pod_need, *info))
            else:
                scores[key] = _score(pod_need, *info)
        if names and _json_safe(names):
            # Names that need no escaping (node names always): write the array without a dict per node.
            tails = {key: f'","Score":{s}}}' for key, s in scores.items()}
            return ('[{"Host":"' + ',{"Host":"'.join(map(str.__add__, names, map(tails.__getitem__, keys)))
                    + "]").encode()
        by_name = map(scores.__getitem__, keys)
        return orjson.dumps([{"Host": n, "Score": s} for n, s in zip(names, by_name, strict=True)])


# Templates bigger than this are read every time (bounds the cache's keys, as the admission answer cache does).
_TEMPLATE_KEY_BYTES = 32 * 1024


def _template_key(meta: dict[str, Any], spec: Any) -> bytes | None:
    """What a pod's need is read from (namespace, labels, annotations, spec) as bytes; None when too big to keep.

    The name, uid and resourceVersion are left out, so the pods of one template share the key; anything
    that can change a need (an annotation, an image, a GPU count, a label such as LWS's worker index) is in.
    """
    try:
        key = orjson.dumps([meta.get("namespace"), meta.get("labels"), meta.get("annotations"), spec])
    except TypeError:
        return None
    return key if len(key) <= _TEMPLATE_KEY_BYTES else None


def _json_safe(names: list[str]) -> bool:
    """Whether every name can go between JSON quotes as it is (no quote, backslash or control character)."""
    joined = "".join(names)
    return joined.isprintable() and '"' not in joined and "\\" not in joined


def _verdict(need: Need, node: NodeGPUs, free: int | None) -> _Verdict:
    result = fit(need, node, free)
    if result.fits:
        return PASS, "", result.code
    text = f"{result.code}: {result.reason}"
    return (FAILED if result.resolvable else UNRESOLVABLE), text, result.code


def _score(pod_need: PodNeed, node: NodeGPUs, free: int | None) -> int:
    if not fit(pod_need.need, node, free).fits:
        return 0
    return score(pod_need.need, node, node.allocatable if free is None else free, pod_need.mode)


_NOT_IN_INVENTORY: _Verdict = (UNRESOLVABLE, NOT_IN_INVENTORY_REASON, None)


_ClassInfo = tuple[NodeGPUs, int]


def _name_classes(names: list[Any], snap: Snapshot) -> tuple[list[int | None], dict[int | None, _ClassInfo | None]]:
    """Each name's placement class, and each class's (capability, free GPUs); None: an unknown name.

    The common case (the snapshot knows every name) runs at C speed: one map over the names.
    """
    try:
        keys: list[int | None] = list(map(snap.classes.get, names))
        if None not in keys and snap.class_info:
            info = snap.class_info
            return keys, {key: info[key] for key in set(keys)}  # type: ignore[index]
        return _name_classes_slow(names, snap)
    except TypeError:  # an unhashable element (a list or object) in NodeNames
        raise BadRequest("ExtenderArgs.NodeNames must be a list of strings") from None


def _name_classes_slow(names: list[Any], snap: Snapshot
                       ) -> tuple[list[int | None], dict[int | None, _ClassInfo | None]]:
    """Classes for a list with names the snapshot has no class for (unknown nodes, or a bare Snapshot)."""
    local = ClassTable()
    known = snap.classes if snap.class_info else {}
    keys: list[int | None] = []
    classes: dict[int | None, _ClassInfo | None] = {}
    for name in names:
        key = known.get(name)
        if key is not None:
            classes[key] = snap.class_info[key]
        else:
            node = snap.nodes.get(name)
            if node is not None:
                local_id = local.class_of(node, snap.free_gpus(name))
                key = -1 - local_id
                classes[key] = local.info[local_id]
            elif type(name) is not str:
                raise BadRequest("ExtenderArgs.NodeNames must be a list of strings")
            else:
                classes[None] = None
        keys.append(key)
    return keys, classes


def _failures(names: list[str], keys: list[int | None], verdicts: dict[int | None, tuple[int, str, Code | None]],
              status: int) -> dict[str, str]:
    """name → "<Code>: <reason>" for the names whose class has this status (C-speed: compress and zip)."""
    texts = {key: v[1] for key, v in verdicts.items() if v[0] == status}
    if not texts:
        return {}
    mask = list(map(texts.__contains__, keys))
    return dict(zip(compress(names, mask), map(texts.__getitem__, compress(keys, mask)), strict=True))


def _filter_result(nodes: dict[str, Any] | None, names: list[str] | None, failed: dict[str, str],
                   unresolvable: dict[str, str], error: str) -> dict[str, Any]:
    return {
        "Nodes": nodes,
        "NodeNames": names,
        "FailedNodes": failed,
        "FailedAndUnresolvableNodes": unresolvable,
        "Error": error,
    }


def _keep_all(args: Parsed) -> bytes:
    """A pod without GPUs, or with a malformed declaration (admission's job): every node passes."""
    if args.names is not None:
        check_names(args.names)
        return orjson.dumps(_filter_result(None, args.names, {}, {}, ""))
    for item in args.items or ():
        node_name(item)
    return orjson.dumps(_filter_result(args.node_list, None, {}, {}, ""))

