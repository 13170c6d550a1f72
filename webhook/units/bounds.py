"""Bounds on the work one input may cause: sizes, depths, bounded YAML, and the CPU budget of one review.

Whatever a request carries is parsed under these bounds. Past one, the object is not judged: ``TooLarge`` runs up
to ``decide.verdict.judge``, which admits it with a warning that says why (rejecting a deployment that works is
the worst failure; blocking every other review while a hostile one is parsed is the next). The figures sit far
above what real workloads write and far below what blocks the event loop for long (bench/hostile.py).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import orjson
import yaml

# A `sh -c` script: the longest in the published fixtures is 2 KiB, and the tokenizer (Python, char by char) takes
# ~2 us a character on a busy core, so 16 KiB stay well inside the review's CPU budget.
MAX_SCRIPT_BYTES = 16 * 1024
# The words of one command line (vLLM's longest published ones have about a hundred).
MAX_WORDS = 4096
# YAML a request carries: Ray's serveConfigV2 and runtimeEnvYAML, an Argo podSpecPatch (the longest published
# serveConfigV2 is 5 KiB; 16 KiB parse in ~30 ms on a busy core, inside the budget).
MAX_YAML_BYTES = 16 * 1024
# A config file read from a ConfigMap (a trainer's YAML, KAITO's inference config): parsed once per content
# (ParsedCache), outside the budget, so it may be longer: 64 KiB take ~0.12 s the first time, then nothing.
MAX_CONFIG_BYTES = 64 * 1024
MAX_YAML_DEPTH = 64
# Nodes a YAML document may expand to, aliases counted each time they are used ("billion laughs").
MAX_YAML_NODES = 200_000
# How many objects and arrays deep a request's object may nest: orjson's serialisation limit. Kubernetes objects
# are about 20 deep; a CRD with unknown fields may hold anything, and the JSON Patch copy, deep copies and
# comparisons recurse (a deep copy at this depth takes about 510 of Python's 1,000 frames).
MAX_OBJECT_DEPTH = 254


class TooLarge(Exception):
    """Input past a bound: the object is not judged. ``what`` says which bound, for the warning."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what

    @property
    def warning(self) -> str:
        return f"vramgate did not judge this object (too large: {self.what}); admitted without a VRAM check"


class OverBudget(TooLarge):
    """The review spent its CPU budget: not judged this time (another try, on a less loaded process, may be)."""


_DEADLINE: ContextVar[tuple[float, float] | None] = ContextVar("vramgate_review_budget", default=None)


@contextmanager
def budget(seconds: float | None) -> Iterator[None]:
    """Within this block, ``spend`` raises OverBudget once the thread has used ``seconds`` of CPU (None, 0: never).

    CPU time of the thread, not wall time: a review is not cut short because the machine is busy elsewhere.
    """
    token = _DEADLINE.set((time.thread_time() + seconds, seconds) if seconds else None)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def spend(what: str) -> None:
    """A point in a loop whose length the input decides: raise OverBudget when the review's budget is spent."""
    found = _DEADLINE.get()
    if found is not None and time.thread_time() > found[0]:
        raise OverBudget(f"judging it took more than {found[1] * 1000:.0f} ms of CPU, at {what}; "
                         "admission.review_cpu_budget_seconds")


def check_size(text: str, limit: int, what: str) -> None:
    if len(text) > limit:
        raise TooLarge(f"{what} of {len(text):,} characters, more than {limit:,}")


def too_deep(obj: Any) -> bool:
    """Whether a JSON-like ``obj`` nests deeper than MAX_OBJECT_DEPTH, found at C speed (orjson refuses to
    serialise past it): a 3 MiB object costs milliseconds, a walk in Python over its 100,000 strings, 0.15 s."""
    try:
        orjson.dumps(obj)
    except orjson.JSONEncodeError as exc:  # also "not serialisable": not this check's business
        return "recursion" in str(exc).lower()
    return False


# libyaml's parser where PyYAML has it: ~10x the pure-Python one (a 64 KiB document: 0.12 s against 1.1 s here),
# and it refuses nesting past 1,000 without recursing. What libyaml refuses is read again by PyYAML's own loader
# (the one Ray, the trainers and the engines parse these with): its answer, or its error with the line the
# problem is on (libyaml points at where it stopped reading). `vramgate check` reads manifest files with the
# Python loader only (cli/inputs.py).
_FAST: Any = getattr(yaml, "CSafeLoader", None)


class _Bounded:
    """A safe loader's bounds: the composed document is measured before it is built (depth, and values with
    aliases expanded), and building it spends from the review's budget."""

    what = "YAML"

    def construct_document(self, node: yaml.Node) -> Any:
        _measure(node, self.what)
        return super().construct_document(node)  # type: ignore[misc]

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        self._built = getattr(self, "_built", 0) + 1
        if not self._built & 1023:
            spend(self.what)
        return super().construct_object(node, deep)  # type: ignore[misc]


class _PythonLoader(_Bounded, yaml.SafeLoader):
    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        # Composing is where the pure-Python loader spends its time (and finds most errors): spend here too.
        self._composed = getattr(self, "_composed", 0) + 1
        if not self._composed & 255:
            spend(self.what)
        return super().compose_node(parent, index)


_LOADERS: tuple[Any, ...] = (_PythonLoader,) if _FAST is None else (type("_FastLoader", (_Bounded, _FAST), {}),
                                                                     _PythonLoader)


def _measure(root: yaml.Node, what: str) -> None:
    """Raise TooLarge when the node graph, aliases expanded, nests deeper than MAX_YAML_DEPTH or holds more than
    MAX_YAML_NODES values.

    Iterative, and each node (an alias is the same node object) is measured once, bottom-up: a billion laughs
    costs its few hundred nodes to measure, not a billion, and an alias cannot hide depth either.
    """
    measured: dict[int, tuple[int, int]] = {}  # id(node) -> (values, height), aliases expanded
    stack: list[tuple[yaml.Node, int, bool]] = [(root, 1, False)]
    while stack:
        node, depth, done = stack.pop()
        if depth > MAX_YAML_DEPTH:
            raise TooLarge(f"{what} nested more than {MAX_YAML_DEPTH} deep")
        key = id(node)
        if key in measured and not done:
            continue
        children = _children(node)
        if not done:
            measured[key] = (1, 1)  # in progress: a node that holds itself (`&a [*a]`) counts once
            stack.append((node, depth, True))
            stack.extend((c, depth + 1, False) for c in children)
            continue
        sizes = [measured.get(id(c), (1, 1)) for c in children]
        values = 1 + sum(v for v, _ in sizes)
        height = 1 + max((h for _, h in sizes), default=0)
        if height > MAX_YAML_DEPTH:
            raise TooLarge(f"{what} nested more than {MAX_YAML_DEPTH} deep")
        if values > MAX_YAML_NODES:
            raise TooLarge(f"{what} that expands to more than {MAX_YAML_NODES:,} values (aliases counted)")
        measured[key] = (values, height)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def load_yaml(text: str, what: str, *, limit: int = MAX_YAML_BYTES) -> Any:
    """One YAML document, bounded: TooLarge past ``limit`` characters, MAX_YAML_DEPTH or MAX_YAML_NODES;
    yaml.YAMLError when it is not YAML."""
    check_size(text, limit, what)
    for i, kind in enumerate(_LOADERS):
        loader = kind(text)
        loader.what = what
        try:
            return loader.get_single_data()
        except yaml.YAMLError as exc:
            if "nesting depth" in str(exc):  # libyaml's own limit (1,000), reached before ours is measured
                raise TooLarge(f"{what} nested more than {MAX_YAML_DEPTH} deep") from None
            if i == len(_LOADERS) - 1:
                raise
        except RecursionError:  # the pure-Python composer recurses per level
            raise TooLarge(f"{what} nested more than {MAX_YAML_DEPTH} deep") from None
        finally:
            loader.dispose()
    raise AssertionError("unreachable")


class ParsedCache:
    """Parsed documents by their text: a ConfigMap's config is parsed once per content, not once per review.

    Keyed by content, which changes exactly when the ConfigMap's resourceVersion does for that key (and serves
    `vramgate check` too). Holds ``entries`` documents and ``chars`` characters of text at most. The parsed
    objects are shared: callers read them, never change them.
    """

    def __init__(self, entries: int = 64, chars: int = 8 * 1024 * 1024) -> None:
        self.entries, self.chars = entries, chars
        self._lock = threading.Lock()
        self._docs: OrderedDict[str, Any] = OrderedDict()
        self._size = 0
        self.parses = 0

    def load(self, text: str, what: str) -> Any:
        """``load_yaml(text, what)``, remembered; TooLarge and YAMLError are remembered too (as what they raise).

        A TooLarge remembered from another caller is raised again with this caller's ``what``: the warning reads the
        same whoever parsed the text first (the route, warming the cache off the event loop, or the engine)."""
        check_size(text, MAX_CONFIG_BYTES, what)  # before hashing it: a megabyte is refused at once, every time
        with self._lock:
            found = self._docs.get(text, _MISSING)
            if found is not _MISSING:
                self._docs.move_to_end(text)
        if found is _MISSING:
            found = self._parse(text, what)
        if isinstance(found, _Failed):
            if isinstance(found.error, TooLarge):
                raise TooLarge(found.error.what.replace(found.what, what, 1))
            raise found.error.with_traceback(None)
        return found

    def _parse(self, text: str, what: str) -> Any:
        self.parses += 1
        try:
            with budget(None):  # parsed once per content (at most MAX_CONFIG_BYTES): outside the review's budget,
                doc: Any = load_yaml(text, what, limit=MAX_CONFIG_BYTES)  # or one near it would never be read
        except (TooLarge, yaml.YAMLError) as exc:
            doc = _Failed(what, exc)
        with self._lock:
            if text not in self._docs:
                self._docs[text] = doc
                self._size += len(text)
            while self._docs and (len(self._docs) > self.entries or self._size > self.chars):
                old, _ = self._docs.popitem(last=False)
                self._size -= len(old)
        return doc


_MISSING = object()


@dataclass(frozen=True)
class _Failed:
    """A text that did not parse, remembered: the error, and the ``what`` it was raised with."""

    what: str
    error: TooLarge | yaml.YAMLError


# The config files engines read from ConfigMaps (engines/base.py:yaml_mapping): once per content, not per review.
CONFIG_FILES = ParsedCache()
