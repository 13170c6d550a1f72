"""One real HTTPS service for the admission tests; each test gets it back with default config and inventory."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.harness import serve_app
from webhook.cluster.snapshot import FixedInventory, Snapshot
from webhook.config import Config
from webhook.serve.server import build_app
from webhook.serve.state import AppState

from .helpers import Service, cluster


class SwappableInventory(FixedInventory):
    """An inventory whose snapshot the test sets."""

    @property
    def current(self) -> Snapshot:
        return self._snapshot

    @current.setter
    def current(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot


@pytest.fixture(scope="session")
def _service() -> Iterator[Service]:
    state = AppState(Config(), SwappableInventory(cluster()))
    with serve_app(build_app(state)) as running, running.client() as client:
        yield Service(state, client, running.url)


@pytest.fixture
def svc(_service: Service) -> Iterator[Service]:
    """The service with default config and examples/cluster.yaml as the inventory."""
    _service.state.config = Config()
    _service.state.inventory.current = cluster()  # type: ignore[attr-defined]
    _service.state.shutting_down = False
    yield _service
    _service.state.config = Config()


def use(svc: Service, *, config: Config | None = None, snapshot: Snapshot | None = None) -> None:
    if config is not None:
        svc.state.config = config
    if snapshot is not None:
        svc.state.inventory.current = snapshot  # type: ignore[attr-defined]
