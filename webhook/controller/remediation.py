"""Which GPU pods the controller evicts from failed GPUs, and how fast: pure selection and a token bucket."""

from __future__ import annotations

from collections.abc import Iterable, Set
from dataclasses import dataclass
from typing import Any

from ..cluster.accelerators import resources_of_vendors
from ..cluster.usage import holds_gpus, pod_gpus
from ..config import Config

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


@dataclass(frozen=True)
class Candidate:
    """A pod to evict and why."""

    namespace: str
    name: str
    uid: str
    node: str
    reason: str

    @property
    def key(self) -> str:
        return self.uid or f"{self.namespace}/{self.name}"


def unhealthy_devices(pod: dict[str, Any], resource: str = "nvidia.com/gpu") -> list[str]:
    """IDs of the pod's devices of ``resource`` that the kubelet reports Unhealthy (KEP-4680)."""
    status = pod.get("status")
    if not isinstance(status, dict):
        return []
    out: list[str] = []
    for key in ("containerStatuses", "initContainerStatuses"):
        for cs in status.get(key) or []:
            if not isinstance(cs, dict):
                continue
            for res in cs.get("allocatedResourcesStatus") or []:
                if not isinstance(res, dict) or res.get("name") != resource:
                    continue
                for dev in res.get("resources") or []:
                    if isinstance(dev, dict) and dev.get("health") == "Unhealthy":
                        out.append(str(dev.get("resourceID") or "?"))
    return out


def _owned_by_daemonset(meta: dict[str, Any]) -> bool:
    return any(isinstance(o, dict) and o.get("kind") == "DaemonSet" for o in meta.get("ownerReferences") or [])


def select_evictions(
    pods: Iterable[dict[str, Any]], unhealthy_nodes: Set[str], config: Config
) -> list[Candidate]:
    """GPU pods to evict: bound, non-terminal pods holding GPUs on an unhealthy node, or reporting an
    Unhealthy GPU of their own; never in excluded namespaces or vramgate's own, never a pod already
    being deleted, a DaemonSet pod (it would come back to the same node) or a static pod."""
    # Each vendor's resource (amd.com/gpu): an AMD pod on a failed AMD node is evicted as an NVIDIA one is.
    resources = (config.labels.gpu_resource, *resources_of_vendors())
    excluded = {*config.admission.excluded_namespaces, config.namespace}
    device_faults: list[Candidate] = []
    node_faults: list[Candidate] = []
    seen: set[str] = set()
    for pod in pods:
        meta = pod.get("metadata")
        spec = pod.get("spec")
        if not isinstance(meta, dict) or not isinstance(spec, dict):
            continue
        namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        if not name or namespace in excluded or meta.get("deletionTimestamp"):
            continue
        if _owned_by_daemonset(meta) or MIRROR_ANNOTATION in (meta.get("annotations") or {}):
            continue
        if not holds_gpus(pod):
            continue
        resource = next((r for r in resources if pod_gpus(pod, r) > 0), None)
        if resource is None:
            continue
        node = str(spec.get("nodeName"))
        cand = Candidate(namespace=namespace, name=name, uid=str(meta.get("uid") or ""), node=node, reason="")
        if cand.key in seen:
            continue
        bad = unhealthy_devices(pod, resource)
        if bad:
            seen.add(cand.key)
            reason = f"{resource} {', '.join(bad[:4])} reported Unhealthy in allocatedResourcesStatus"
            device_faults.append(Candidate(namespace, name, cand.uid, node, reason))
        elif node in unhealthy_nodes:
            seen.add(cand.key)
            node_faults.append(Candidate(namespace, name, cand.uid, node, f"node {node} has unhealthy GPUs"))
    order = lambda c: (c.node, c.namespace, c.name)  # noqa: E731
    return sorted(device_faults, key=order) + sorted(node_faults, key=order)


class TokenBucket:
    """A cluster-wide rate limit: ``rate_per_minute`` tokens a minute, up to ``burst`` saved up."""

    def __init__(self, rate_per_minute: float, now: float, burst: float | None = None) -> None:
        self.rate = rate_per_minute / 60.0
        self.burst = max(1.0, rate_per_minute if burst is None else burst)
        self.tokens = self.burst
        self._at = now

    def _refill(self, now: float) -> None:
        if now > self._at:
            self.tokens = min(self.burst, self.tokens + (now - self._at) * self.rate)
        self._at = max(self._at, now)

    def take(self, now: float) -> bool:
        self._refill(now)
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False

    def give_back(self) -> None:
        """Return a token taken for an eviction that did not happen (a PDB blocked it)."""
        self.tokens = min(self.burst, self.tokens + 1.0)


def eviction_body(candidate: Candidate) -> dict[str, Any]:
    """A policy/v1 Eviction; the UID precondition makes sure a recreated pod of the same name is spared."""
    body: dict[str, Any] = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": candidate.name, "namespace": candidate.namespace},
    }
    if candidate.uid:
        body["deleteOptions"] = {"preconditions": {"uid": candidate.uid}}
    return body
