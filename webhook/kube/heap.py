"""Keep the cyclic garbage collector off the request path: freeze what lasts, and time what it does.

A full collection walks every tracked object. With a live inventory of 5,000 nodes that is ~40 ms of
one core holding the GIL (measured with ``bench/cluster/fleet.py``'s nodes: 33–46 ms per
``gc.collect(2)``, 0.002 ms once frozen), and an admission review or an extender call that arrives
meanwhile waits for it (one of the stalls behind the create p99 that grew with the fleet; the larger
ones were the audit's, ``docs/scaling.md``). Objects that live as long as the inventory (nodes, their labels, the
pod records) are moved out of the collector's generations with ``gc.freeze()`` once they are
loaded; reference counting still frees them when an update replaces them (nothing in the inventory
forms a cycle, which is all that freezing would keep alive).
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable
from typing import Any

# The young-generation threshold: each review allocates a few hundred dicts that reference counting
# frees, and at the default (700) a young collection ran every couple of reviews.
THRESHOLDS = (20_000, 20, 20)


def settle() -> None:
    """Collect what is garbage now, then freeze every survivor out of the collector's generations."""
    gc.collect()
    gc.freeze()


def tune() -> None:
    """At start-up: settle what was loaded (modules, catalog, config) and raise the young threshold."""
    settle()
    gc.set_threshold(*THRESHOLDS)


class Settler:
    """Settles the heap again when the inventory has changed by a share of what was settled.

    A fleet that grows by watch events (nodes added one by one, a controller labelling every node)
    leaves its new objects in the old generation, where each full collection walks them again; once
    the changes since the last settle exceed ``max(floor, ratio × objects then)`` they are frozen too.
    One settle walks only what is not frozen yet.
    """

    def __init__(self, floor: int = 1_000, ratio: float = 0.25, action: Callable[[], None] = settle) -> None:
        self.floor, self.ratio = floor, ratio
        self._action = action
        self._lock = threading.Lock()
        self._base = 0
        self._changes = 0
        self.settles = 0

    def note(self, changes: int, size: int) -> bool:
        """Record ``changes`` applied objects with ``size`` objects now held; settle when due. Whether it settled."""
        with self._lock:
            self._changes += changes
            if self._changes < max(self.floor, self.ratio * self._base):
                return False
            self._changes, self._base = 0, size
            self.settles += 1
        self._action()
        return True

    def listed(self, size: int) -> None:
        """A full list has just been applied: settle now (the bulk of the heap arrives in lists)."""
        with self._lock:
            self._changes, self._base = 0, size
            self.settles += 1
        self._action()


class PauseTimer:
    """Times each collection through ``gc.callbacks`` and hands (generation, seconds) to ``observe``."""

    def __init__(self, observe: Callable[[int, float], None]) -> None:
        self._observe = observe
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        elif self._started:
            self._observe(int(info.get("generation", 0)), time.perf_counter() - self._started)
            self._started = 0.0

    def install(self) -> None:
        if self not in gc.callbacks:
            gc.callbacks.append(self)

    def remove(self) -> None:
        if self in gc.callbacks:
            gc.callbacks.remove(self)
