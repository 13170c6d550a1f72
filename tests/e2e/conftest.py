"""pytest fixtures for the end-to-end suite: a real control plane on loopback.

Fixtures
  cluster     (session)  a started :class:`harness.ControlPlane`
  namespace   (function) a fresh namespace (its default ServiceAccount exists), deleted after
  gpu_nodes   (function) ``gpu_nodes(name, **kw)`` = ``cluster.create_gpu_node``; deleted after
  gate        (function) the module's ``vramgate``, running and ready
  vramgate    (module)   ``vramgate serve --role all`` as a subprocess, registered from the chart:
                         webhook configurations, PriorityClasses, and the scheduler's extender
                         (see vramgate_fixture.py); unregistered and stopped after the module

Binaries come from ``bash tests/e2e/build.sh``; a missing one fails the suite. Component
logs go to tests/e2e/_artifacts/<component>.log; their tails are attached to failures.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import harness
from tests.e2e.harness import BUILD_CMD, ApiError, ControlPlane, HarnessError, missing_binaries
from tests.e2e.vramgate_fixture import NAMESPACE, Vramgate

_E2E_DIR = Path(__file__).resolve().parent
_CLUSTER: list[ControlPlane] = []


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _E2E_DIR in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.e2e)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    rep = yield
    if rep.failed and _CLUSTER and call.when in ("setup", "call"):
        rep.sections.append(("control-plane logs (tails)", _CLUSTER[0].log_tails(lines=25)))
    return rep


@pytest.fixture(scope="session")
def cluster() -> Iterator[ControlPlane]:
    missing = missing_binaries()
    if missing:
        pytest.fail(
            f"e2e binaries {', '.join(missing)} missing in {harness.bin_dir()}; build them with: {BUILD_CMD}",
            pytrace=False,
        )
    cp = ControlPlane()
    try:
        cp.start()
    except HarnessError as e:
        pytest.fail(f"control plane did not come up (logs in {cp.logs_dir}):\n{e}", pytrace=False)
    _CLUSTER.append(cp)
    print(
        f"\ncontrol plane {cp.version} up in {cp.startup_seconds:.1f}s at {cp.server} "
        f"(kubeconfig {cp.kubeconfig}, logs {cp.logs_dir})"
    )
    try:
        yield cp
    finally:
        _CLUSTER.clear()
        cp.stop()


@pytest.fixture
def namespace(cluster: ControlPlane, request: pytest.FixtureRequest) -> Iterator[str]:
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    cluster.request(
        "POST",
        "/api/v1/namespaces",
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name, "labels": {"vramgate-e2e/test": request.node.name[:63].strip("-_.[]")}},
        },
    )
    cluster.wait_for(
        f"default ServiceAccount in {name}",
        lambda: cluster.request("GET", f"/api/v1/namespaces/{name}/serviceaccounts/default"),
    )
    yield name
    cluster.request("DELETE", f"/api/v1/namespaces/{name}", ok=(200, 202, 404))


@pytest.fixture
def gpu_nodes(cluster: ControlPlane) -> Iterator[Callable[..., dict[str, Any]]]:
    created: list[str] = []

    def make(name: str, *args: Any, **kw: Any) -> dict[str, Any]:
        created.append(name)
        return cluster.create_gpu_node(name, *args, **kw)

    yield make
    for n in created:
        cluster.delete_node(n)


@contextmanager
def registered(cluster: ControlPlane, gate: Vramgate, *, extender: bool = True) -> Iterator[Vramgate]:
    """``gate`` started and wired in as the chart wires it (webhooks, PriorityClasses, the scheduler's extender
    when ``extender``); torn down webhooks first, so the cluster never calls a webhook that is gone (the validating
    one fails closed)."""
    try:
        cluster.fresh_namespace(NAMESPACE)
    except (ApiError, TimeoutError) as exc:
        pytest.fail(f"cannot create namespace {NAMESPACE}: {exc}", pytrace=False)
    gate.apply(gate.priority_classes())
    try:
        gate.start()
    except HarnessError as exc:
        gate.stop()
        pytest.fail(str(exc), pytrace=False)
    try:
        gate.register()
        if extender:
            cluster.start_scheduler([gate.extender()])
        yield gate
    finally:
        gate.unregister()
        if extender:
            cluster.start_scheduler(None)
        gate.stop()
        for pc in gate.priority_classes():
            cluster.kubectl("delete", "priorityclass", pc["metadata"]["name"], "--ignore-not-found", "--wait=false")
        cluster.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}", ok=(200, 202, 404))


@pytest.fixture(scope="module")
def vramgate(cluster: ControlPlane) -> Iterator[Vramgate]:
    """vramgate in cluster mode, wired in as the chart wires it (``registered``)."""
    with registered(cluster, Vramgate(cluster)) as gate:
        yield gate


@pytest.fixture
def gate(vramgate: Vramgate) -> Vramgate:
    """The module's vramgate, running and ready (a test that stopped it and failed is repaired here)."""
    if not vramgate.alive():
        vramgate.start()
    vramgate.wait_ready()
    return vramgate
