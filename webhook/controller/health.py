"""GPU health decisions of the controller: hysteresis over each node's classification, and the label,
taint and Event bodies that publish it. Pure: the clock is an argument and nothing here calls the API."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from ..cluster.accelerators import NVIDIA, resource_of
from ..cluster.inventory import HealthState, NodeGPUs, classify, fault_of
from ..config import Config
from ..kube.events import event_body as new_event

RANK: dict[HealthState, int] = {"healthy": 0, "degraded": 1, "unhealthy": 2}
EVENT_REASONS: dict[HealthState, str] = {
    "healthy": "GPUHealthy",
    "degraded": "GPUDegraded",
    "unhealthy": "GPUUnhealthy",
}
TAINT_EFFECT = "NoSchedule"


def controller_config(config: Config) -> Config:
    """The config the controller classifies with: its own taint is no fault, or a tainted node never recovers."""
    own = config.labels.unhealthy_taint
    if own not in config.health.fault_taints:
        return config
    health = config.health.model_copy(update={"fault_taints": [t for t in config.health.fault_taints if t != own]})
    return config.model_copy(update={"health": health})


def reclassify(node: NodeGPUs, ctrl_config: Config) -> NodeGPUs:
    """The node classified without the controller's own taint among its fault signals.

    ``ctrl_config`` comes from :func:`controller_config`. Only a node whose first fault is our taint
    changes: a fault condition wins over any taint, and a foreign fault taint before ours stays a fault.
    """
    own = ctrl_config.labels.unhealthy_taint
    if not (node.fault and node.fault.startswith(f"taint {own}:")):
        return node
    fault = fault_of({"spec": {"taints": list(node.taints)}}, ctrl_config)
    health, reason = classify(node.capacity, node.allocatable, node.labelled, fault, ctrl_config, node.vendor)
    return replace(node, fault=fault, health=health, health_reason=reason)


# --------------------------------------------------------------------------- taints and labels


def is_own_taint(taint: Mapping[str, Any], config: Config) -> bool:
    return taint.get("key") == config.labels.unhealthy_taint and taint.get("effect") == TAINT_EFFECT


def has_own_taint(taints: Iterable[Mapping[str, Any]], config: Config) -> bool:
    return any(is_own_taint(t, config) for t in taints)


def merge_taints(current: Sequence[Mapping[str, Any]], want: bool, config: Config) -> list[dict[str, Any]] | None:
    """``current`` with our taint added (``want``) or removed; None when nothing changes.

    Every other taint is kept as it is, in its place, including taints with our key but another effect.
    """
    has = has_own_taint(current, config)
    if want == has:
        return None
    if want:
        return [dict(t) for t in current] + [{"key": config.labels.unhealthy_taint, "effect": TAINT_EFFECT}]
    return [dict(t) for t in current if not is_own_taint(t, config)]


def owned_labels(config: Config) -> tuple[str, str]:
    """The only two labels the controller writes (and ever removes)."""
    return config.labels.normalized_memory, config.labels.health


def label_changes(current: Mapping[str, str], desired: Mapping[str, str | None], config: Config) -> dict[str, Any]:
    """The merge-patch ``metadata.labels`` for ``desired`` (None = remove); only owned keys, only differences."""
    owned = owned_labels(config)
    changes: dict[str, Any] = {}
    for key, value in desired.items():
        if key not in owned:
            raise ValueError(f"label {key} is not the controller's to write")
        if current.get(key) != value and not (value is None and key not in current):
            changes[key] = value
    return changes


def node_patch(
    node: Mapping[str, Any], desired_labels: Mapping[str, str | None], want_taint: bool | None, config: Config
) -> dict[str, Any] | None:
    """A JSON merge patch that brings a Node (as just read) to the desired labels and taint; None if it is there.

    The patch carries the node's ``metadata.resourceVersion``, so the API server refuses it (409) when
    the node changed since it was read: ``spec.taints`` is replaced whole and must not drop a taint
    someone else added meanwhile.
    """
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    labels = meta.get("labels") or {}
    changes = label_changes(labels, desired_labels, config)
    taints = None if want_taint is None else merge_taints(spec.get("taints") or [], want_taint, config)
    if not changes and taints is None:
        return None
    patch: dict[str, Any] = {"metadata": {"resourceVersion": str(meta.get("resourceVersion") or "")}}
    if not patch["metadata"]["resourceVersion"]:
        del patch["metadata"]["resourceVersion"]
    if changes:
        patch["metadata"]["labels"] = changes
    if taints is not None:
        patch["spec"] = {"taints": taints}
    return patch


# --------------------------------------------------------------------------- decisions


@dataclass(frozen=True)
class Transition:
    """A node's acted health state changed: recorded as an Event on the Node."""

    node: str
    old: HealthState | None
    new: HealthState
    message: str

    @property
    def reason(self) -> str:
        return EVENT_REASONS[self.new]

    @property
    def event_type(self) -> Literal["Normal", "Warning"]:
        return "Normal" if self.new == "healthy" else "Warning"


@dataclass(frozen=True)
class NodeDecision:
    """What one node should look like now, after hysteresis."""

    name: str
    health: HealthState | None  # the acted state; None until one is decided (the label is then left alone)
    reason: str
    observed: HealthState | None  # this observation's state; None while the device plugin's grace runs
    observed_reason: str
    pending: HealthState | None = None  # a different observed state waiting out its hysteresis
    pending_since: float | None = None
    labels: Mapping[str, str | None] = field(default_factory=dict)  # owned labels to set (None = remove)
    taint: bool | None = None  # whether our taint belongs on the node; None = leave it as it is
    transition: Transition | None = None


@dataclass(frozen=True)
class Decision:
    """One reconcile's desired state for every node observed, and the nodes that disappeared."""

    nodes: Mapping[str, NodeDecision]
    gone: tuple[str, ...] = ()

    def unhealthy(self) -> set[str]:
        return {name for name, d in self.nodes.items() if d.health == "unhealthy"}

    def counts(self) -> dict[HealthState, int]:
        out: dict[HealthState, int] = {"healthy": 0, "degraded": 0, "unhealthy": 0}
        for d in self.nodes.values():
            state = d.health or d.observed
            if state is not None:
                out[state] += 1
        return out

    def transitions(self) -> list[Transition]:
        return [d.transition for d in self.nodes.values() if d.transition is not None]


@dataclass
class _NodeState:
    stable: HealthState | None
    reason: str
    pending: HealthState | None = None
    pending_worse: bool = False
    pending_since: float = 0.0
    plugin_missing_since: float | None = None


class HealthTracker:
    """Hysteresis per node: a new state acts only once it has persisted long enough.

    Worse states wait ``controller.unhealthy_after_seconds``, better ones ``healthy_after_seconds``;
    the wait restarts when the direction changes, so a flapping node keeps its state. A node whose
    GPU labels show no GPU capacity (no device plugin) counts as unhealthy only once it has been so
    for ``device_plugin_grace_seconds``. The acted state starts from the node's own
    ``vramgate.io/gpu-health`` label (or our taint), so a new leader continues where the last one was.
    """

    def __init__(self, config: Config) -> None:
        self.config = config
        self.ctrl_config = controller_config(config)
        self._states: dict[str, _NodeState] = {}
        # Nodes in a steady state (nothing pending, no grace running): the NodeGPUs object last seen
        # and its decision. The inventory keeps a node's object until the node changes, so an
        # unchanged node costs an identity check per pass, not a classification.
        self._steady: dict[str, tuple[NodeGPUs, NodeDecision]] = {}

    def forget(self) -> None:
        self._states.clear()
        self._steady.clear()

    @property
    def settled(self) -> bool:
        """Every GPU node is steady: observing the same node objects again, at any later time, decides the same."""
        return len(self._steady) == len(self._states)

    def observe(self, nodes: Iterable[NodeGPUs], now: float) -> Decision:
        keys = self.config.labels
        out: dict[str, NodeDecision] = {}
        for node in nodes:
            if not node.name:
                continue
            steady = self._steady.get(node.name)
            if steady is not None and steady[0] is node:
                out[node.name] = steady[1]
                continue
            if not node.is_gpu_node:
                self._states.pop(node.name, None)
                self._steady.pop(node.name, None)
                stale_label = keys.health in node.labels
                stale_taint = has_own_taint(node.taints, self.config)
                if stale_label or stale_taint:  # no longer a GPU node: take back what we wrote
                    out[node.name] = NodeDecision(
                        name=node.name, health=None, reason="not a GPU node", observed=None,
                        observed_reason="not a GPU node", labels={keys.health: None}, taint=False,
                    )
                continue
            decided = out[node.name] = self._observe_node(node, now)
            st = self._states[node.name]
            if st.stable is not None and st.pending is None and st.plugin_missing_since is None:
                self._steady[node.name] = (node, replace(decided, transition=None))
            else:
                self._steady.pop(node.name, None)
        gone = tuple(sorted(set(self._states) - set(out)))
        for name in gone:
            del self._states[name]
            self._steady.pop(name, None)
        return Decision(nodes=out, gone=gone)

    def _initial(self, node: NodeGPUs) -> _NodeState:
        label = node.labels.get(self.config.labels.health)
        if label in RANK:
            return _NodeState(stable=label, reason=f"{label} (label set earlier)")
        if has_own_taint(node.taints, self.config):
            return _NodeState(stable="unhealthy", reason="unhealthy (tainted earlier)")
        return _NodeState(stable=None, reason="not decided yet")

    def _observe_node(self, node: NodeGPUs, now: float) -> NodeDecision:
        rule = self.config.controller
        view = reclassify(node, self.ctrl_config)
        st = self._states.get(node.name)
        if st is None:
            st = self._states[node.name] = self._initial(node)
        observed: HealthState | None = view.health
        observed_reason = view.health_reason
        if view.plugin_missing and view.fault is None:
            if st.plugin_missing_since is None:
                st.plugin_missing_since = now
            left = rule.device_plugin_grace_seconds - (now - st.plugin_missing_since)
            if left > 0:
                observed = None
                observed_reason = (
                    f"GPU labels but no {resource_of(view.vendor, self.config.labels.gpu_resource)} capacity: "
                    f"waiting {left:.0f}s more for the device plugin"
                )
        else:
            st.plugin_missing_since = None
        transition = None if observed is None else self._step(node.name, st, observed, observed_reason, now)

        labels: dict[str, str | None] = {}
        # GFD's memory, copied as an integer; an AMD node's from its labeller or the product table (the labeller
        # writes "192G", which a node affinity's Gt cannot compare): the label the VRAM affinity asks first.
        if view.vram_mib > 0 and (self.config.labels.gpu_memory in view.labels or view.vendor != NVIDIA):
            labels[self.config.labels.normalized_memory] = str(view.vram_mib)
        if st.stable is not None:
            labels[self.config.labels.health] = st.stable
        return NodeDecision(
            name=node.name,
            health=st.stable,
            reason=st.reason,
            observed=observed,
            observed_reason=observed_reason,
            pending=st.pending,
            pending_since=st.pending_since if st.pending is not None else None,
            labels=labels,
            taint=None if st.stable is None else st.stable == "unhealthy",
            transition=transition,
        )

    def _step(
        self, name: str, st: _NodeState, observed: HealthState, reason: str, now: float
    ) -> Transition | None:
        rule = self.config.controller
        if observed == st.stable or (st.stable is None and observed == "healthy"):
            st.stable, st.reason, st.pending = observed, reason, None
            return None
        worse = RANK[observed] > RANK[st.stable or "healthy"]
        if st.pending is None or st.pending_worse != worse:
            st.pending_since, st.pending_worse = now, worse
        st.pending = observed
        wait = rule.unhealthy_after_seconds if worse else rule.healthy_after_seconds
        if now - st.pending_since < wait:
            return None
        old = st.stable
        st.stable, st.reason, st.pending = observed, reason, None
        return Transition(
            node=name, old=old, new=observed, message=f"GPU health {old or 'unknown'} -> {observed}: {reason}"
        )


def event_body(
    transition: Transition, node_uid: str | None, component: str, instance: str, timestamp: str
) -> dict[str, Any]:
    """A core/v1 Event on the Node (namespace ``default``, as the kubelet records node events)."""
    involved: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "name": transition.node}
    if node_uid:
        involved["uid"] = node_uid
    return new_event(involved, "default", reason=transition.reason, message=transition.message,
                     type=transition.event_type, component=component, instance=instance, action="Classify",
                     timestamp=timestamp)
