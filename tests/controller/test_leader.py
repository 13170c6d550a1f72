"""Leader election rounds on an in-memory Lease with the API server's optimistic concurrency."""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
from typing import Any

from webhook.kube.apiserver import ApiError
from webhook.kube.leader import LeaderElector, Timings, default_identity, micro_time

TIMINGS = Timings(lease_duration=15, renew_deadline=10, retry_period=2)


class MemoryLeaseStore:
    """One Lease with resourceVersion preconditions, as the API server keeps it."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.rv = 0
        self.fail: int | None = None  # status every call fails with (0 = unreachable)

    def _check(self) -> None:
        if self.fail is not None:
            raise ApiError(self.fail, "injected")

    def get(self) -> dict[str, Any] | None:
        self._check()
        return copy.deepcopy(self.lease)

    def create(self, lease: dict[str, Any]) -> dict[str, Any]:
        self._check()
        if self.lease is not None:
            raise ApiError(409, "already exists")
        return self._store(lease)

    def replace(self, lease: dict[str, Any]) -> dict[str, Any]:
        self._check()
        assert self.lease is not None
        if lease["metadata"].get("resourceVersion") != self.lease["metadata"]["resourceVersion"]:
            raise ApiError(409, "the object has been modified")
        return self._store(lease)

    def _store(self, lease: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        stored = copy.deepcopy(lease)
        stored["metadata"]["resourceVersion"] = str(self.rv)
        self.lease = stored
        return copy.deepcopy(stored)

    @property
    def spec(self) -> dict[str, Any]:
        assert self.lease is not None
        return dict(self.lease["spec"])


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def elector(store: MemoryLeaseStore, ident: str, clock: Clock, timings: Timings = TIMINGS) -> LeaderElector:
    start = dt.datetime(2024, 5, 1, tzinfo=dt.UTC)
    return LeaderElector(store, ident, timings, namespace="vramgate", name="vramgate-controller", clock=clock,
                         wall=lambda: start + dt.timedelta(seconds=clock.now))


def test_first_candidate_creates_the_lease() -> None:
    store, clock = MemoryLeaseStore(), Clock()
    a = elector(store, "a", clock)
    assert a.try_acquire_or_renew()
    spec = store.spec
    assert spec["holderIdentity"] == "a" and spec["leaseDurationSeconds"] == 15 and spec["leaseTransitions"] == 0
    assert spec["acquireTime"] == spec["renewTime"] == "2024-05-01T00:01:40.000000Z"
    assert store.lease is not None and store.lease["metadata"]["name"] == "vramgate-controller"


def test_held_lease_blocks_others_until_it_expires() -> None:
    store, clock = MemoryLeaseStore(), Clock()
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    assert a.try_acquire_or_renew()
    a._set_leading(True)
    assert not b.try_acquire_or_renew() and b.holder == "a"
    clock.now += 5
    assert a.try_acquire_or_renew()  # renewal keeps acquireTime, moves renewTime
    assert store.spec["acquireTime"] == "2024-05-01T00:01:40.000000Z"
    assert store.spec["renewTime"] == "2024-05-01T00:01:45.000000Z"
    clock.now += 14
    assert not b.try_acquire_or_renew()  # b sees the renewal only now: its own clock starts again
    clock.now += 14.9
    assert not b.try_acquire_or_renew()  # 14.9 s since b saw the lease change: not expired yet
    clock.now += 0.2
    assert b.try_acquire_or_renew()  # the holder went silent for a lease duration: b takes over
    spec = store.spec
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1
    assert spec["acquireTime"] == spec["renewTime"]
    assert not a.try_acquire_or_renew()  # a is back, but b holds a fresh lease


def test_is_leader_lapses_after_renew_deadline() -> None:
    store, clock = MemoryLeaseStore(), Clock()
    a = elector(store, "a", clock)
    changes: list[bool] = []
    a.on_change = changes.append
    assert a.try_acquire_or_renew()
    a._set_leading(True)
    assert a.is_leader
    store.fail = 0  # API server unreachable
    clock.now += 9
    assert not a.try_acquire_or_renew() and a.is_leader
    clock.now += 1.5
    assert not a.is_leader  # no renewal for more than renew_deadline: stop acting, before the lease expires
    assert changes == [True, False]


def test_conflict_loses_the_round() -> None:
    store, clock = MemoryLeaseStore(), Clock()
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    assert a.try_acquire_or_renew()
    clock.now += 20
    # b read the expired lease, then a renewed before b wrote: b's write carries a stale resourceVersion.
    stale = store.get()
    assert a.try_acquire_or_renew()
    orig_get = store.get
    store.get = lambda: copy.deepcopy(stale)  # type: ignore[method-assign]
    b.observed_version, b.observed_at = None, 0.0
    assert not b.try_acquire_or_renew()
    store.get = orig_get  # type: ignore[method-assign]
    assert store.spec["holderIdentity"] == "a"


def test_release_lets_the_next_take_over_at_once() -> None:
    store, clock = MemoryLeaseStore(), Clock()
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    assert a.release()
    assert store.spec["holderIdentity"] == "" and store.spec["leaseDurationSeconds"] == 1
    assert b.try_acquire_or_renew() and store.spec["holderIdentity"] == "b"
    assert store.spec["leaseTransitions"] == 1


def test_abdicated_candidate_stops_renewing() -> None:
    store, clock = MemoryLeaseStore(), Clock()
    a = elector(store, "a", clock)
    assert a.try_acquire_or_renew()
    a.abdicate()
    rv = store.rv
    assert not a.try_acquire_or_renew() and not a.is_leader and store.rv == rv


def test_identity_and_micro_time() -> None:
    ident = default_identity()
    assert "_" in ident and len(ident.rsplit("_", 1)[1]) == 8 and default_identity() != ident
    assert micro_time(dt.datetime(2024, 1, 2, 3, 4, 5, 6789, tzinfo=dt.UTC)) == "2024-01-02T03:04:05.006789Z"


def test_two_candidates_running_one_leads_and_the_other_takes_over() -> None:
    """The asyncio loop with real time (short timings): exactly one leads; a crash hands over within the lease."""
    fast = Timings(lease_duration=0.6, renew_deadline=0.4, retry_period=0.1)

    async def scenario() -> None:
        store = MemoryLeaseStore()
        a = LeaderElector(store, "a", fast, namespace="ns", name="l")
        b = LeaderElector(store, "b", fast, namespace="ns", name="l")
        ta, tb = asyncio.create_task(a.run()), asyncio.create_task(b.run())
        for _ in range(20):
            await asyncio.sleep(0.05)
            assert not (a.is_leader and b.is_leader)
        assert [a.is_leader, b.is_leader].count(True) == 1
        first, second, t_first = (a, b, ta) if a.is_leader else (b, a, tb)
        first.stop(release=False)  # crash: the lease stays until it expires
        await t_first
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        while not second.is_leader:
            await asyncio.sleep(0.02)
            assert loop.time() - t0 < fast.lease_duration + 2 * fast.retry_period * 1.2 + 0.2
        assert store.spec["holderIdentity"] == second.identity and store.spec["leaseTransitions"] == 1
        second.stop(release=True)
        await asyncio.gather(ta, tb)
        assert store.spec["holderIdentity"] == ""

    asyncio.run(scenario())
