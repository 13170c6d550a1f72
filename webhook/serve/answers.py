"""Answers already given, reused when the same object is reviewed again against the same cluster.

A ReplicaSet scaling up sends the mutating webhook the same pod object (no name yet, only
``generateName``) once per replica; each would otherwise be estimated, judged and diffed again.
An answer depends only on the object, the webhook, the namespace and its enforcement mode, and on
the inventory snapshot, config and catalog in use. Those three are immutable and swapped whole
when anything changes, so the cache remembers which ones its answers were computed against and
forgets every answer the moment any of them is a different object: a node added, removed or
turning unhealthy makes a new snapshot, hence no stale verdict.

The key holds the object's JSON bytes themselves (not a digest of them): a hit is an exact match,
never a hash collision. Memory is bounded by the number of entries and by skipping large objects.
Used from the event loop only (the admission routes are ``async``), so no lock.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import orjson

from ..cluster.snapshot import Snapshot
from ..config import Config
from ..decide.placement import Need
from ..models.catalog import Catalog

# 256 answers of objects up to 32 KiB: at most ~8 MiB of keys. Bigger objects are judged every time.
MAX_ENTRIES = 256
MAX_OBJECT_BYTES = 32 * 1024

Key = tuple[str, str, str, bytes]


@dataclass(frozen=True)
class Answer:
    """What one webhook call answers, plus a short reason code for metrics and logs."""

    allowed: bool
    reason: str
    message: str = ""
    warnings: tuple[str, ...] = ()
    patch: list[dict[str, Any]] = field(default_factory=list)
    error: bool = False
    # Autofit on a rejected workload: "applied" or "refused" (the metric's label), and what it changed.
    autofit: str | None = None
    autofit_change: str = ""


@dataclass(frozen=True)
class Cached:
    """One remembered answer, and the placeable-workload record it made."""

    answer: Answer
    # (namespace, workload ref, need) that /validate records for an admitted GPU workload; replayed on a hit.
    remember: tuple[str, str, Need] | None = None
    # Models it named that the catalog does not know: the hub is asked (and the answer says so) on each hit.
    unknown_models: tuple[str, ...] = ()


class AnswerCache:
    """A bounded LRU of answers, valid for one (snapshot, config, catalog) generation."""

    def __init__(self, max_entries: int = MAX_ENTRIES, max_object_bytes: int = MAX_OBJECT_BYTES) -> None:
        self.max_entries = max_entries
        self.max_object_bytes = max_object_bytes
        self._entries: OrderedDict[Key, Cached] = OrderedDict()
        self._generation: tuple[Snapshot, Config, Catalog] | None = None
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def key(self, webhook: str, namespace: str, enforcement: str, obj: dict[str, Any]) -> Key | None:
        """The key of one review, or None when the object is too big (or not serialisable) to remember."""
        try:
            raw = orjson.dumps(obj)
        except (TypeError, orjson.JSONEncodeError):
            return None
        if len(raw) > self.max_object_bytes:
            return None
        return (webhook, namespace, enforcement, raw)

    def _same_generation(self, snapshot: Snapshot, config: Config, catalog: Catalog) -> bool:
        gen = self._generation
        return gen is not None and gen[0] is snapshot and gen[1] is config and gen[2] is catalog

    def get(self, key: Key, snapshot: Snapshot, config: Config, catalog: Catalog) -> Cached | None:
        """The answer remembered for ``key``, if it was computed against these very snapshot, config and catalog."""
        if not self._same_generation(snapshot, config, catalog):
            # The cluster, config or catalog changed: nothing remembered still holds.
            self._entries.clear()
            self._generation = (snapshot, config, catalog)
            self.misses += 1
            return None
        found = self._entries.get(key)
        if found is None:
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return found

    def put(self, key: Key, entry: Cached, snapshot: Snapshot, config: Config, catalog: Catalog) -> None:
        """Remember an answer computed against ``snapshot``, ``config`` and ``catalog``."""
        if not self._same_generation(snapshot, config, catalog):
            self._entries.clear()
            self._generation = (snapshot, config, catalog)
        self._entries[key] = entry
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
