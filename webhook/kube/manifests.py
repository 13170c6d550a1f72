"""Read Kubernetes objects from YAML or JSON files: multi-document, ``List`` kinds, ``kubectl get -o``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

# Files people write are read as kubectl reads them: kubectl's go-yaml is a port of libyaml, and both take a tab
# after a value ("cpu: '2'<TAB># comment"; gopkg.in/yaml.v2 scannerc.go yaml_parser_scan_to_next_token) that
# PyYAML's pure-Python scanner refuses. So libyaml's C loader where PyYAML has it (~10x faster too), else its twin.
LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class ManifestError(ValueError):
    """A file that cannot be read or parsed as Kubernetes objects."""


def flatten(doc: Any) -> Iterator[dict[str, Any]]:
    """The objects in one parsed YAML document: lists and ``kind: *List`` items unrolled."""
    if doc is None:
        return
    if isinstance(doc, list):
        for item in doc:
            yield from flatten(item)
        return
    if not isinstance(doc, dict):
        raise ManifestError(f"expected a Kubernetes object, got {type(doc).__name__}")
    kind = doc.get("kind")
    if isinstance(kind, str) and kind.endswith("List") and isinstance(doc.get("items"), list):
        for item in doc["items"]:
            yield from flatten(item)
        return
    yield doc


def load_text(text: str, source: str = "<input>") -> list[dict[str, Any]]:
    """Parse YAML (one or many documents) or JSON into a flat list of objects."""
    try:
        stripped = text.lstrip()
        if stripped.startswith(("{", "[")):
            docs: list[Any] = [json.loads(text)]
        else:
            docs = list(yaml.load_all(text, Loader=LOADER))
    except (yaml.YAMLError, json.JSONDecodeError, RecursionError) as exc:
        raise ManifestError(f"{source}: not valid YAML or JSON: {str(exc).splitlines()[0]}") from exc
    out: list[dict[str, Any]] = []
    for doc in docs:
        out.extend(flatten(doc))
    return out


def load_file(path: str | Path) -> list[dict[str, Any]]:
    """Objects from a file (``-`` is not supported: pass a path)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ManifestError(f"{path}: {exc.strerror or exc}") from exc
    return load_text(text, str(path))


# What `kubectl get nodes,resourceslices,deviceclasses -o yaml` prints besides Nodes.
INVENTORY_KINDS = frozenset({"ResourceSlice", "DeviceClass", "NodePool"})


def load_inventory(path: str | Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(Node objects, ResourceSlices, DeviceClasses and Karpenter NodePools) from a file; any other kind is an error."""
    nodes: list[dict[str, Any]] = []
    dra: list[dict[str, Any]] = []
    for obj in load_file(path):
        kind = obj.get("kind", "Node")
        if kind in INVENTORY_KINDS:
            dra.append(obj)
        elif kind == "Node":
            nodes.append(obj)
        else:
            raise ManifestError(f"{path}: expected Node objects (and ResourceSlices, DeviceClasses, NodePools), "
                                f"found kind {kind!r}")
    return nodes, dra


def load_nodes(path: str | Path) -> list[dict[str, Any]]:
    """Node objects from a file (ResourceSlices and DeviceClasses beside them are skipped); other kinds are errors."""
    return load_inventory(path)[0]
