"""A stale inventory: rejections that rest on the cluster's GPUs become warnings; declaration errors stay."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from webhook.cluster.snapshot import FixedInventory
from webhook.config import Config
from webhook.serve.app import create_app
from webhook.serve.state import AppState

from ..harness import Running, serve_app
from .helpers import cluster, example, validate_object


class AgingInventory(FixedInventory):
    """A fixed snapshot whose age since the API server last spoke the test sets."""

    age: float | None = 0.0

    def staleness(self) -> float | None:
        return self.age


@pytest.fixture()
def service() -> Iterator[tuple[Running, AgingInventory]]:
    inventory = AgingInventory(cluster())
    with serve_app(create_app(AppState(Config(), inventory))) as running:
        yield running, inventory


validate = validate_object


def test_a_cluster_rejection_is_a_warning_once_the_inventory_is_stale(
        service: tuple[Running, AgingInventory]) -> None:
    running, inventory = service
    too_big = example("llama70b-one-gpu.yaml")
    fresh = validate(running, too_big)
    assert not fresh["allowed"]
    reason = fresh["status"]["message"]
    inventory.age = 299.0  # under admission.stale_inventory_seconds (300): still rejected, even from the cache
    assert not validate(running, too_big)["allowed"]
    inventory.age = 900.0
    stale = validate(running, too_big)
    assert stale["allowed"], stale
    text = " ".join(stale["warnings"])
    assert "has not heard from the API server for 900 s" in text and reason.split(";")[0][:60] in text, text
    inventory.age = 5.0  # heard again: rejected again (the answer given while stale was not remembered)
    assert not validate(running, too_big)["allowed"]


def test_a_declaration_error_is_rejected_however_stale(service: tuple[Running, AgingInventory]) -> None:
    running, inventory = service
    inventory.age = 900.0
    obj = example("llama3-8b-deployment.yaml")
    obj["spec"]["template"].setdefault("metadata", {}).setdefault("annotations", {})["vramgate.io/vram"] = "lots"
    out = validate(running, obj)
    assert not out["allowed"] and "vramgate.io/vram" in out["status"]["message"], out


def test_never_softened_when_turned_off(service: tuple[Running, AgingInventory]) -> None:
    _, inventory = service
    inventory.age = 10_000.0
    off = AppState(Config.model_validate({"admission": {"stale_inventory_seconds": 0}}), inventory)
    with serve_app(create_app(off)) as plain:
        assert not validate(plain, example("llama70b-one-gpu.yaml"))["allowed"]
