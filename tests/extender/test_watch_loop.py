"""KubeInventory's I/O loop against a scripted API: paging, 410 re-lists, resumes after drops, back-off."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import orjson

from webhook.kube.heap import Settler
from webhook.kube.nodecache import Gone, KubeInventory
from webhook.metrics import Metrics
from webhook.serve.app import create_app
from webhook.serve.state import AppState

from ..harness import serve_app
from ..unit.helpers import gpu_node
from .cluster import CFG, FakeApi, bookmark, bound_pod, event, gone, gpu_pod, namespace, page, with_rv


def wait_for(cond: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.005)


def base_api() -> FakeApi:
    api = FakeApi()
    api.lists["Node"] = [page([with_rv(gpu_node("a"), 10), with_rv(gpu_node("b", gpus=4), 11)], 100)]
    api.lists["Pod"] = [page([bound_pod("p1", "a", 2, rv=20)], 100)]
    api.lists["Namespace"] = [page([namespace("ml", "warn", rv=5)], 100)]
    return api


@contextmanager
def running(api: FakeApi, metrics: Metrics | None = None) -> Iterator[KubeInventory]:
    inv = KubeInventory(CFG, metrics=metrics, api=api, backoff_base_s=0.001, backoff_cap_s=0.01)
    asyncio.run(inv.start())
    try:
        yield inv
    finally:
        started = time.monotonic()
        asyncio.run(inv.stop())
        assert time.monotonic() - started < 5


def test_lists_pages_and_syncs_after_all_three_kinds() -> None:
    api = base_api()
    api.lists["Node"] = [page([with_rv(gpu_node("a"), 10)], 100, cont="tok"), page([with_rv(gpu_node("b"), 11)], 100)]
    release = threading.Event()
    api.lists["Namespace"] = [page([], 100)]
    original = api.list_page

    def slow_namespaces(kind, *, limit, cont):  # type: ignore[no-untyped-def]
        if kind == "Namespace":
            release.wait()
        return original(kind, limit=limit, cont=cont)

    api.list_page = slow_namespaces  # type: ignore[method-assign]
    with running(api) as inv:
        wait_for(lambda: "a" in inv.snapshot().nodes and inv.snapshot().free.get("a") == 6)
        assert set(inv.snapshot().nodes) == {"a", "b"} and not inv.snapshot().synced
        release.set()
        assert inv.wait_synced(5)
    assert ("list", "Node", "tok") in api.calls


def test_watch_events_publish_and_the_metrics_follow() -> None:
    api = base_api()
    api.watches["Pod"] = [[[event("DELETED", bound_pod("p1", "a", 2, rv=101))],
                           [event("ADDED", bound_pod("p2", "b", 4, rv=102))]]]
    metrics = Metrics()
    with running(api, metrics) as inv:
        wait_for(lambda: inv.snapshot().free == {"a": 8, "b": 0})
        assert inv.snapshot().enforcement == {"ml": "warn"}
        assert inv.staleness() < 5
        text = metrics.render().decode()
    assert "vramgate_inventory_nodes 2.0" in text
    assert "vramgate_inventory_staleness_seconds" in text


def test_the_heap_is_settled_after_each_list_and_after_enough_watch_changes() -> None:
    api = base_api()
    api.watches["Pod"] = [[[event("DELETED", bound_pod("p1", "a", 2, rv=101))],
                           [event("ADDED", bound_pod("p2", "b", 4, rv=102)),
                            event("ADDED", bound_pod("p3", "b", 0, rv=103))]]]
    settled: list[int] = []
    settler = Settler(floor=3, ratio=0.0, action=lambda: settled.append(1))
    inv = KubeInventory(CFG, api=api, backoff_base_s=0.001, backoff_cap_s=0.01, settler=settler)
    asyncio.run(inv.start())
    try:
        wait_for(lambda: inv.snapshot().free == {"a": 8, "b": 0} and len(settled) == 4)
    finally:
        asyncio.run(inv.stop())
    assert settler.settles == 4  # three lists, then three watch events reach the floor once


def test_410_gone_in_the_stream_relists_and_counts() -> None:
    api = base_api()
    api.lists["Node"] = [page([with_rv(gpu_node("a"), 10), with_rv(gpu_node("b"), 11)], 100),
                         page([with_rv(gpu_node("a"), 10), with_rv(gpu_node("c"), 160)], 170)]
    api.watches["Node"] = [[[event("ADDED", with_rv(gpu_node("x"), 101))], [gone()]]]
    metrics = Metrics()
    with running(api, metrics) as inv:
        wait_for(lambda: set(inv.snapshot().nodes) == {"a", "c"})
        wait_for(lambda: api.watch_rvs("Node")[-1:] == ["170"])
    assert api.count("list", "Node") == 2
    assert api.watch_rvs("Node")[:2] == ["100", "170"]
    assert metrics.inventory_relists.labels(resource="Node", cause="gone")._value.get() == 1


def test_410_on_the_watch_request_relists() -> None:
    api = base_api()
    api.watches["Namespace"] = [[Gone("too old resource version")]]
    api.lists["Namespace"] = [page([namespace("ml", "warn", rv=5)], 100), page([namespace("ml", rv=150)], 150)]
    with running(api) as inv:
        wait_for(lambda: api.count("list", "Namespace") == 2 and inv.snapshot().enforcement == {})


def test_dropped_connection_resumes_from_the_last_resource_version_without_relisting() -> None:
    api = base_api()
    api.watches["Pod"] = [
        [[event("ADDED", bound_pod("p2", "b", 1, rv=105))], ConnectionResetError("peer reset")],
        [[bookmark("Pod", 130)], TimeoutError("read timed out")],
        [[event("ADDED", bound_pod("p3", "b", 1, rv=131))]],
    ]
    metrics = Metrics()
    with running(api, metrics) as inv:
        wait_for(lambda: inv.snapshot().free.get("b") == 2)
        wait_for(lambda: len(api.watch_rvs("Pod")) >= 4)
    assert api.watch_rvs("Pod")[:4] == ["100", "105", "130", "131"]
    assert api.count("list", "Pod") == 1
    assert metrics.inventory_relists.labels(resource="Pod", cause="gone")._value.get() == 0


def test_api_errors_back_off_and_retry() -> None:
    api = base_api()
    api.lists["Node"] = [ConnectionRefusedError("no route"), ConnectionRefusedError("no route"),
                         page([with_rv(gpu_node("a"), 10)], 100)]
    with running(api) as inv:
        assert inv.wait_synced(5)
    assert api.count("list", "Node") == 3


def test_the_extender_sees_pod_events_over_a_real_socket() -> None:
    """A pod deleted in the cluster frees its node's GPUs for the very next filter."""
    api = base_api()
    api.lists["Pod"] = [page([bound_pod("big", "b", 4, rv=20)], 100)]
    go = threading.Event()

    def delete_later() -> list[dict[str, object]]:
        go.wait(10)
        return [event("DELETED", bound_pod("big", "b", 4, rv=101))]

    api.watches["Pod"] = [[delete_later]]
    inv = KubeInventory(CFG, api=api, backoff_base_s=0.001)
    state = AppState(CFG, inv, role="extender")
    asyncio.run(inv.start())
    try:
        assert inv.wait_synced(5)
        with serve_app(create_app(state)) as server, server.client() as c:
            assert c.get("/readyz").status_code == 200
            body = orjson.dumps({"Pod": gpu_pod(1, "20Gi"), "NodeNames": ["b"]})
            first = orjson.loads(c.post("/scheduler/filter", content=body).content)
            assert first["FailedNodes"] == {"b": "GPUsBusy: 0 of 4 GPUs free, pod needs 1"}
            go.set()
            wait_for(lambda: inv.snapshot().free["b"] == 4)
            second = orjson.loads(c.post("/scheduler/filter", content=body).content)
            assert second["NodeNames"] == ["b"] and second["FailedNodes"] == {}
    finally:
        asyncio.run(inv.stop())


def test_backoff_is_exponential_with_jitter_and_capped() -> None:
    import random

    from webhook.kube.nodecache import Backoff

    b = Backoff(base=1, cap=8, rng=random.Random(3))
    delays = [b.next() for _ in range(6)]
    for d, ceiling in zip(delays, [1, 2, 4, 8, 8, 8], strict=True):
        assert ceiling / 2 <= d <= ceiling
    assert len({round(d, 6) for d in delays[3:]}) == 3  # jittered, not a fixed cap
    b.reset()
    assert 0.5 <= b.next() <= 1


def test_the_retry_backoff_is_capped_at_a_few_seconds() -> None:
    """After an API server restart the watch retries within seconds (the cap was 30 s: 11–19 s blind)."""
    import inspect
    import random

    from webhook.kube.nodecache import Backoff

    cap = inspect.signature(KubeInventory.__init__).parameters["backoff_cap_s"].default
    assert cap <= 3.0
    b = Backoff(base=0.5, cap=cap, rng=random.Random(7))
    assert max(b.next() for _ in range(40)) <= cap


def _slow_backoff(api: FakeApi) -> KubeInventory:
    return KubeInventory(CFG, api=api, backoff_base_s=8.0, backoff_cap_s=8.0)


def test_a_returning_api_server_is_relisted_at_once_not_after_the_backoff() -> None:
    """The probe ends the wait: down (probe fails), then up again, and the list is retried within a probe or two."""
    api = base_api()
    api.up = False
    api.lists["Node"] = [ConnectionRefusedError("api server down"), api.lists["Node"][0]]
    inv = _slow_backoff(api)
    asyncio.run(inv.start())
    try:
        wait_for(lambda: api.count("ready", "") >= 2)  # the Node thread is waiting, and has seen the API down
        assert api.count("list", "Node") == 1
        back = time.monotonic()
        api.up = True
        wait_for(lambda: inv.snapshot().synced, timeout=4.0)  # the back-off alone would wait 4-8 s
        assert time.monotonic() - back < 2 * KubeInventory.PROBE_INTERVAL_S + 0.5
    finally:
        asyncio.run(inv.stop())


def test_an_api_server_that_answers_but_fails_keeps_the_backoff() -> None:
    """Up all along (a 500 on the list, say): the probe never cuts the wait, so a failing list is not hammered."""
    api = base_api()
    api.lists["Node"] = [RuntimeError("500 internal error"), api.lists["Node"][0]]
    inv = _slow_backoff(api)
    asyncio.run(inv.start())
    try:
        wait_for(lambda: api.count("ready", "") >= 4)  # a second of probing, each answered "up"
        assert api.count("list", "Node") == 1 and not inv.snapshot().synced
    finally:
        asyncio.run(inv.stop())
