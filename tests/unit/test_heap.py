"""The heap policy: settle (collect + freeze) after lists and after enough changes, and time each collection."""

from __future__ import annotations

import gc

from webhook.kube import heap
from webhook.metrics import Metrics


def test_settler_waits_for_a_share_of_what_was_settled() -> None:
    calls: list[int] = []
    s = heap.Settler(floor=10, ratio=0.25, action=lambda: calls.append(1))
    s.listed(100)  # a list settles at once
    assert len(calls) == 1
    assert not s.note(9, 100)  # 9 < max(10, 25)
    assert not s.note(15, 100)  # 24 < 25
    assert s.note(1, 200) and len(calls) == 2  # 25 changes: due; the base is now 200
    assert not s.note(49, 200) and s.note(1, 200) and len(calls) == 3  # 50 = 0.25 × 200
    assert s.settles == 3


def test_settler_floor_keeps_a_small_inventory_from_settling_on_every_event() -> None:
    calls: list[int] = []
    s = heap.Settler(floor=1_000, action=lambda: calls.append(1))
    for _ in range(999):
        s.note(1, 5)
    assert calls == []
    assert s.note(1, 5) and calls == [1]


def test_settle_freezes_the_survivors_and_a_full_collection_then_skips_them() -> None:
    before = gc.get_freeze_count()
    kept = [{"node": i, "labels": {"k": str(i)}} for i in range(20_000)]
    try:
        heap.settle()
        assert gc.get_freeze_count() >= before + len(kept)
        assert gc.is_tracked(kept[0])
    finally:
        if before == 0:
            gc.unfreeze()


def test_pause_timer_observes_each_collection_by_generation_until_removed() -> None:
    metrics = Metrics()
    timer = heap.PauseTimer(metrics.observe_gc_pause)
    timer.install()
    try:
        timer.install()  # idempotent: one callback
        assert gc.callbacks.count(timer) == 1
        gc.collect(2)
    finally:
        timer.remove()
    assert timer not in gc.callbacks
    text = metrics.render().decode()
    assert 'vramgate_gc_pause_seconds_count{generation="2"} 1.0' in text
    gc.collect(2)
    assert 'vramgate_gc_pause_seconds_count{generation="2"} 1.0' in metrics.render().decode()


def test_tune_raises_the_young_threshold() -> None:
    old = gc.get_threshold()
    before = gc.get_freeze_count()
    try:
        heap.tune()
        assert gc.get_threshold() == heap.THRESHOLDS
    finally:
        gc.set_threshold(*old)
        if before == 0:
            gc.unfreeze()


def test_serve_bounds_the_gil_hand_off() -> None:
    import sys

    from webhook.serve.server import SWITCH_INTERVAL_S, tune_runtime

    old, thresholds, before = sys.getswitchinterval(), gc.get_threshold(), gc.get_freeze_count()
    try:
        tune_runtime()
        assert sys.getswitchinterval() == SWITCH_INTERVAL_S < 0.005
        assert gc.get_threshold() == heap.THRESHOLDS
    finally:
        sys.setswitchinterval(old)
        gc.set_threshold(*thresholds)
        if before == 0:
            gc.unfreeze()
