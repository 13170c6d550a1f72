"""The extender's wire format: k8s.io/kube-scheduler/extender/v1 types, PascalCase as Go marshals them."""

from __future__ import annotations

from typing import Any, TypedDict

import orjson

# k8s.io/kube-scheduler/extender/v1: MaxExtenderPriority. The scheduler scales by weight × 10.
MAX_EXTENDER_PRIORITY = 10


class ExtenderArgs(TypedDict, total=False):
    """What the scheduler POSTs to filter and prioritize (NodeNames when nodeCacheCapable, else Nodes)."""

    Pod: dict[str, Any]
    Nodes: dict[str, Any] | None  # a v1.NodeList; the scheduler reads only .items
    NodeNames: list[str] | None


class ExtenderFilterResult(TypedDict):
    """The filter answer. NodeNames must be a subset of the input; FailedAndUnresolvableNodes wins over FailedNodes."""

    Nodes: dict[str, Any] | None
    NodeNames: list[str] | None
    FailedNodes: dict[str, str]
    FailedAndUnresolvableNodes: dict[str, str]
    Error: str


class HostPriority(TypedDict):
    """One entry of the prioritize answer (a HostPriorityList is a JSON array of these)."""

    Host: str
    Score: int


class BadRequest(Exception):
    """Input that is not ExtenderArgs: answered with a 4xx and a one-line reason, counted by ``code``."""

    def __init__(self, reason: str, *, status: int = 400, code: str = "shape") -> None:
        super().__init__(reason)
        self.reason = reason.replace("\n", " ")
        self.status = status
        self.code = code


class Parsed:
    """ExtenderArgs checked for shape: the pod, and either the node names or the NodeList and its items."""

    __slots__ = ("items", "names", "node_list", "pod")

    def __init__(self, pod: dict[str, Any], names: list[Any] | None, node_list: dict[str, Any] | None,
                 items: list[Any] | None) -> None:
        self.pod = pod
        self.names = names  # element types are checked lazily, on the paths that could see a non-string
        self.node_list = node_list
        self.items = items


def parse_args(body: bytes) -> Parsed:
    """Decode and shape-check ExtenderArgs. Raises BadRequest."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"body is not JSON: {exc}", code="json") from None
    if not isinstance(data, dict):
        raise BadRequest("ExtenderArgs must be a JSON object")
    pod = data.get("Pod")
    if not isinstance(pod, dict):
        raise BadRequest("ExtenderArgs.Pod must be a Pod object")
    kind = pod.get("kind")
    if kind not in (None, "", "Pod"):
        raise BadRequest(f"ExtenderArgs.Pod has kind {kind!r}, not Pod")
    if not isinstance(pod.get("metadata") or {}, dict):
        raise BadRequest("ExtenderArgs.Pod.metadata must be an object")
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        raise BadRequest("ExtenderArgs.Pod has no spec")
    for key in ("containers", "initContainers"):
        if not isinstance(spec.get(key) or [], list):
            raise BadRequest(f"ExtenderArgs.Pod.spec.{key} must be a list")
    names = data.get("NodeNames")
    if names is not None:
        if not isinstance(names, list):
            raise BadRequest("ExtenderArgs.NodeNames must be a list of node names")
        return Parsed(pod, names, None, None)
    node_list = data.get("Nodes")
    if node_list is None:
        raise BadRequest("ExtenderArgs needs NodeNames (nodeCacheCapable: true) or Nodes (a NodeList)")
    if not isinstance(node_list, dict):
        raise BadRequest("ExtenderArgs.Nodes must be a NodeList object")
    items = node_list.get("items")
    if items is None:
        items = []
    if not isinstance(items, list):
        raise BadRequest("ExtenderArgs.Nodes.items must be a list of Node objects")
    return Parsed(pod, None, node_list, items)


def node_name(item: Any) -> str:
    """The name of a Node object from Nodes.items. Raises BadRequest."""
    meta = item.get("metadata") if isinstance(item, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    if not isinstance(name, str) or not name:
        raise BadRequest("every item of ExtenderArgs.Nodes.items must be a Node with metadata.name")
    return name


def check_names(names: list[Any]) -> None:
    """Every NodeNames element is a string. Raises BadRequest."""
    for n in names:
        if type(n) is not str:
            raise BadRequest("ExtenderArgs.NodeNames must be a list of strings")
