"""The one way in for `vramgate check`: files → documents → the workloads and all they refer to, with the snapshot.

Like kyverno's ``PolicyContext``: every output form (text, json, yaml, junit, sarif), ``--explain``, ``--fix``
and ``--autofit`` judge the same :class:`Inputs`, so no form can see objects another does not. The files'
ResourceClaimTemplates, ResourceClaims and DeviceClasses are folded into the snapshot's DRA view; their
ServingRuntimes, TrainingRuntimes, ConfigMaps and templates become the :class:`Runtimes` the kinds look up.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from ..cluster.dra import dra_view
from ..cluster.snapshot import Snapshot
from ..config import Config
from ..kinds import Runtimes
from ..kube.manifests import LOADER, ManifestError, flatten


@dataclass(frozen=True)
class Located:
    """An object read from a file: its YAML document, its index in a List (if any) and its first line."""

    file: str
    document: int
    item: int | None
    line: int
    obj: dict[str, Any]

    @property
    def prefix(self) -> str:
        return "" if self.item is None else f"/items/{self.item}"


def load_located(path: str | Path) -> list[Located]:
    """Objects of a manifest file with the line each starts on (``List`` kinds flattened, as ``check`` reads).

    Raises ManifestError when the file, or any document in it, cannot be read.
    """
    located, problems = read_documents(path)
    if problems:
        raise ManifestError(problems[0])
    return located


def read_documents(path: str | Path) -> tuple[list[Located], list[str]]:
    """Every readable object of a manifest file, and one ``file:line:column: …`` line per unreadable document.

    A broken document (a ``{{HF_TOKEN}}`` placeholder Secret at the end of a published file) costs only itself:
    the file is first read whole, as YAML reads it; when that fails, document by document.
    """
    text = read_text(path)
    name = str(path)
    try:
        if text.lstrip().startswith(("{", "[")):
            return [Located(name, 0, None, 1, obj) for obj in flatten(json.loads(text))], []
        pairs = _load_all(text)
    except json.JSONDecodeError as exc:
        return [], [f"{name}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}"]
    except (yaml.YAMLError, RecursionError):
        return _documents_one_by_one(name, text)
    out: list[Located] = []
    problems: list[str] = []
    for i, (node, doc) in enumerate(pairs):
        _locate(name, i, node, doc, 0, out, problems)
    return out, problems


def read_text(path: str | Path) -> str:
    """A manifest file's text; ManifestError when it cannot be read (absent, a folder, not UTF-8)."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ManifestError(f"{path}: {getattr(exc, 'strerror', None) or exc}") from exc


def _load_all(text: str) -> list[tuple[Any, Any]]:
    """Each document's node (for its lines) and its value, from one pass of the loader: the node is composed
    once and constructed from, as ``safe_load_all`` does inside, instead of scanning the text twice."""
    loader = LOADER(text)
    try:
        pairs = []
        while loader.check_node():
            node = loader.get_node()
            pairs.append((node, loader.construct_document(node)))
        return pairs
    finally:
        loader.dispose()


def _load_one(text: str) -> tuple[Any, Any]:
    loader = LOADER(text)
    try:
        node = loader.get_single_node()
        return node, (loader.construct_document(node) if node is not None else None)
    finally:
        loader.dispose()


_DOCUMENT_START = re.compile(r"^---(?:[ \t].*)?$", re.MULTILINE)


def _documents_one_by_one(name: str, text: str) -> tuple[list[Located], list[str]]:
    starts = [0, *(m.start() for m in _DOCUMENT_START.finditer(text) if m.start() > 0)]
    out: list[Located] = []
    problems: list[str] = []
    index = 0
    for begin, end in zip(starts, [*starts[1:], len(text)], strict=True):
        chunk = text[begin:end]
        offset = text.count("\n", 0, begin)
        if not any(line.strip() and not line.lstrip().startswith(("#", "---")) for line in chunk.splitlines()):
            continue  # comments or an empty marker: no document
        try:
            node, doc = _load_one(chunk)
        except RecursionError:
            # Nested past Python's recursion limit (a 5,000-deep flow sequence): unreadable, not a crash.
            problems.append(f"{name}:{offset + 1}:1: document {index} is not valid YAML (nested too deep); "
                            "the others are judged")
            index += 1
            continue
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
            where = f"{offset + mark.line + 1}:{mark.column + 1}" if mark is not None else f"{offset + 1}:1"
            reason = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            problems.append(f"{name}:{where}: document {index} is not valid YAML ({reason}); the others are judged")
            index += 1
            continue
        _locate(name, index, node, doc, offset, out, problems)
        index += 1
    return out, problems


def _locate(name: str, i: int, node: Any, doc: Any, offset: int, out: list[Located], problems: list[str]) -> None:
    if doc is None or node is None:
        return
    try:
        kind = doc.get("kind") if isinstance(doc, dict) else None
        if isinstance(kind, str) and kind.endswith("List") and isinstance(doc.get("items"), list):
            items_node = next((v for k, v in node.value if getattr(k, "value", None) == "items"), None)
            for j, item in enumerate(doc["items"]):
                line = items_node.value[j].start_mark.line + 1 if items_node is not None else node.start_mark.line + 1
                for obj in flatten(item):
                    out.append(Located(name, i, j, offset + line, obj))
            return
        for obj in flatten(doc):
            out.append(Located(name, i, None, offset + node.start_mark.line + 1, obj))
    except ManifestError as exc:
        problems.append(f"{name}:{offset + node.start_mark.line + 1}:1: document {i}: {exc}")


@dataclass(frozen=True)
class Inputs:
    """Everything `vramgate check` judges: the objects with where they are, unreadable documents, the snapshot
    with the files' DRA objects folded in, and the runtimes, templates and ConfigMaps they refer to."""

    located: tuple[Located, ...]
    snapshot: Snapshot
    runtimes: Runtimes
    problems: tuple[str, ...] = field(default=())

    @property
    def objects(self) -> list[dict[str, Any]]:
        return [loc.obj for loc in self.located]


def gather(files: Sequence[str | Path], snapshot: Snapshot, config: Config, *, strict: bool = False) -> Inputs:
    """Read ``files`` once and build the :class:`Inputs` every output form judges.

    An unreadable file raises ManifestError; an unreadable document is one line of ``problems`` (the others
    are still judged), or raises ManifestError too when ``strict``.
    """
    located: list[Located] = []
    problems: list[str] = []
    for path in files:
        found, bad = read_documents(path)
        if bad and strict:
            raise ManifestError(bad[0])
        located.extend(found)
        problems.extend(bad)
    objects = [loc.obj for loc in located]
    # ResourceClaimTemplates and ResourceClaims in the same files are what their pods' claims refer to.
    snapshot = replace(snapshot, dra=dra_view(objects, config.labels.dra_drivers, snapshot.dra))
    return Inputs(tuple(located), snapshot, Runtimes.of(objects), tuple(problems))
