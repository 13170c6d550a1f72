"""The admission answer cache: hits on the same object, no stale answer after an inventory, config or catalog change."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from webhook.cluster.snapshot import Snapshot
from webhook.config import Admission, Config
from webhook.serve.admission import decide
from webhook.serve.admission import decision as decision_module
from webhook.serve.answers import AnswerCache, Cached
from webhook.serve.state import AppState

from .conftest import SwappableInventory
from .helpers import Service, cluster, defaulted_pod, gpu_container, review, workload

BIG = {"vramgate.io/vram": "70Gi"}  # one GPU of 70 GiB: only the healthy 80 GiB nodes hold it


def _state(snapshot: Snapshot | None = None, config: Config | None = None) -> AppState:
    return AppState(config or Config(), SwappableInventory(snapshot or cluster()))


def _swap(state: AppState, snapshot: Snapshot) -> None:
    state.inventory.current = snapshot  # type: ignore[attr-defined]


def _pod(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return defaulted_pod({"containers": [gpu_container()]}, annotations=annotations or BIG,
                         owner=("ReplicaSet", "big-7d9f8"), generate_name="big-7d9f8-")


def _fresh(webhook: str, body: dict[str, Any], snapshot: Snapshot, config: Config | None = None) -> Any:
    """The answer a new instance (an empty cache) gives."""
    return decide(_state(snapshot, config), body["request"], webhook)  # type: ignore[arg-type]


@pytest.mark.parametrize("webhook", ["validate", "mutate"])
def test_same_object_hits_with_the_same_answer(webhook: str) -> None:
    state, pod = _state(), _pod()
    first = decide(state, review(pod)["request"], webhook)  # type: ignore[arg-type]
    second = decide(state, review(pod)["request"], webhook)  # type: ignore[arg-type]  # a new uid, the same pod
    assert (state.answers.hits, state.answers.misses, len(state.answers)) == (1, 1, 1)
    assert second == first == _fresh(webhook, review(pod), cluster())
    assert first.allowed and first.reason == "fits"
    if webhook == "mutate":
        assert first.patch


def test_a_different_object_misses() -> None:
    state = _state()
    decide(state, review(_pod())["request"], "mutate")
    other = decide(state, review(_pod({"vramgate.io/vram": "20Gi"}))["request"], "mutate")
    assert state.answers.hits == 0 and len(state.answers) == 2
    assert other == _fresh("mutate", review(_pod({"vramgate.io/vram": "20Gi"})), cluster())


def _without(snapshot: Snapshot, *names: str) -> Snapshot:
    return replace(snapshot, nodes={k: v for k, v in snapshot.nodes.items() if k not in names})


def _unhealthy(snapshot: Snapshot, *names: str) -> Snapshot:
    nodes = {k: replace(v, health="unhealthy", health_reason="test") if k in names else v
             for k, v in snapshot.nodes.items()}
    return replace(snapshot, nodes=nodes)


BIG_NODES = ("gpu-a100-80-0", "gpu-a100-80-1", "gpu-h100-0")


@pytest.mark.parametrize("webhook", ["validate", "mutate"])
def test_nodes_removed_are_never_answered_from_the_cache(webhook: str) -> None:
    state, body = _state(), review(_pod())
    assert decide(state, body["request"], webhook).reason == "fits"  # type: ignore[arg-type]
    smaller = _without(cluster(), *BIG_NODES)
    _swap(state, smaller)
    after = decide(state, body["request"], webhook)  # type: ignore[arg-type]
    assert after == _fresh(webhook, body, smaller)
    assert after.reason == "VRAMTooSmall" and not after.patch
    assert state.answers.hits == 0
    # and back: the nodes added again (a new snapshot) are judged again, not served the denial
    _swap(state, cluster())
    assert decide(state, body["request"], webhook).reason == "fits"  # type: ignore[arg-type]
    assert state.answers.hits == 0


@pytest.mark.parametrize("webhook", ["validate", "mutate"])
def test_a_health_change_is_judged_again(webhook: str) -> None:
    state, body = _state(), review(_pod())
    decide(state, body["request"], webhook)  # type: ignore[arg-type]
    sick = _unhealthy(cluster(), *BIG_NODES)
    _swap(state, sick)
    assert decide(state, body["request"], webhook) == _fresh(webhook, body, sick)  # type: ignore[arg-type]
    assert state.answers.hits == 0 and len(state.answers) == 1  # the old snapshot's answers are gone


def test_the_same_snapshot_object_keeps_the_answers() -> None:
    state, body = _state(), review(_pod())
    decide(state, body["request"], "validate")
    _swap(state, state.inventory.snapshot())
    decide(state, body["request"], "validate")
    assert state.answers.hits == 1


def test_a_config_change_is_never_answered_from_the_cache() -> None:
    state = _state()
    body = review(_pod({"vramgate.io/vram": "200Gi"}))
    assert not decide(state, body["request"], "validate").allowed
    state.config = Config(admission=Admission(default_enforcement="warn"))
    warned = decide(state, body["request"], "validate")
    assert warned.allowed and warned.warnings and state.answers.hits == 0
    assert warned == _fresh("validate", body, cluster(), state.config)


def test_a_catalog_change_is_never_answered_from_the_cache() -> None:
    state = _state()
    body = review(_pod({"vramgate.io/model": "my-private-model"}))
    assert decide(state, body["request"], "validate").reason == "declaration"
    # what the models-file watcher does: a new catalog object
    state.catalog = state.catalog.with_entries([{"name": "my-private-model", "params": 7e9, "layers": 32,
                                                 "hidden_size": 4096, "heads": 32, "vocab_size": 32000,
                                                 "context": 4096}])
    assert decide(state, body["request"], "validate").reason != "declaration"
    assert state.answers.hits == 0


def test_validate_hits_still_record_the_placeable_workload() -> None:
    state = _state()
    body = review(workload("Deployment", gpu_container(), name="big", annotations=BIG))
    decide(state, body["request"], "validate")
    state.placeable._needs.clear()
    decide(state, body["request"], "validate")
    assert state.answers.hits == 1
    assert [(ns, wl) for ns, wl, _ in state.placeable.tracked()] == [("ml", "deployment/big")]


def test_errors_are_not_remembered(monkeypatch: pytest.MonkeyPatch) -> None:
    state, pod = _state(), _pod()
    calls = []

    def boom(*args: Any, **kw: Any) -> Any:
        calls.append(1)
        raise RuntimeError("boom")

    monkeypatch.setattr(decision_module, "judge", boom)
    for _ in range(2):
        assert decide(state, review(pod)["request"], "mutate").error
    assert len(calls) == 2 and len(state.answers) == 0


def test_the_cache_is_bounded() -> None:
    cache = AnswerCache(max_entries=3, max_object_bytes=200)
    snap, config, state = cluster(), Config(), _state()
    keys = [cache.key("mutate", "ml", "enforce", {"n": i}) for i in range(5)]
    for i, key in enumerate(keys):
        assert key is not None
        cache.put(key, Cached(decision_module.Answer(True, str(i))), snap, config, state.catalog)
    assert len(cache) == 3
    assert cache.get(keys[0], snap, config, state.catalog) is None  # the oldest went first
    hit = cache.get(keys[4], snap, config, state.catalog)
    assert hit is not None and hit.answer.reason == "4"
    assert cache.key("mutate", "ml", "enforce", {"big": "x" * 300}) is None  # too big to remember


def test_over_the_wire_a_hit_answers_the_same_bytes_but_its_uid(svc: Service) -> None:
    pod = _pod()
    first, second = review(pod, uid="u-1"), review(pod, uid="u-2")
    a = svc.post("/mutate", first).content
    hits = svc.state.answers.hits
    b = svc.post("/mutate", second).content
    assert svc.state.answers.hits == hits + 1
    assert b == a.replace(b'"u-1"', b'"u-2"')
