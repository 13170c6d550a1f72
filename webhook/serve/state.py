"""What every route of one service instance shares: config, catalog, inventory, metrics, lifecycle."""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Literal

from ..cluster.snapshot import FixedInventory, InventorySource
from ..config import Config
from ..kube.autofit_events import AutofitEvents
from ..kube.configmaps import ConfigMapReader
from ..kube.hub_store import HubModelStore
from ..metrics import Metrics
from ..models.catalog import Catalog, builtin_catalog
from .answers import AnswerCache
from .extender.decide import Extender
from .hub import HubResolver
from .placeable import PlaceableWorkloads

Role = Literal["all", "webhook", "extender", "controller"]


def plays(instance: str, role: Role) -> bool:
    """Whether an instance started with ``--role instance`` plays ``role``."""
    return instance in ("all", role)


RECENT_REJECTIONS = 20


@dataclass(frozen=True)
class Rejection:
    """One denied review: when, which webhook, and the object's kind, namespace, name and reason code."""

    at: float
    webhook: str
    kind: str
    namespace: str
    name: str
    reason: str


def new_ring() -> deque[Rejection]:
    return deque(maxlen=RECENT_REJECTIONS)


@dataclass
class AppState:
    """Per-instance state; the inventory's snapshot is the only thing that changes while serving."""

    config: Config
    inventory: InventorySource
    role: Role = "all"
    catalog: Catalog = field(default_factory=builtin_catalog)
    metrics: Metrics = field(default_factory=Metrics)
    shutting_down: bool = False
    # The last denied reviews (names and reason codes only), for the status page.
    rejections: deque[Rejection] = field(default_factory=new_ring)
    placeable: PlaceableWorkloads = field(init=False)
    # Admission answers to objects seen before, valid while snapshot, config and catalog stay the same objects.
    answers: AnswerCache = field(default_factory=AnswerCache, repr=False)
    # The scheduler extender's decisions (and its cache of pod needs), over this instance's inventory.
    extender: Extender = field(init=False, repr=False)
    # ConfigMaps admission reads for env (None: a fixed inventory, no cluster to read from).
    configmaps: ConfigMapReader | None = field(default=None, repr=False)
    # Where hub-resolved models are kept between pods (a ConfigMap; None: memory only).
    hub_store: HubModelStore | None = field(default=None, repr=False)
    # Writes autofit's Events on the workloads it changed (None: a fixed inventory, no cluster to write to).
    autofit_events: AutofitEvents | None = field(default=None, repr=False)
    # Unknown models asked of the hub in the background (None: hub.enabled is off).
    hub: HubResolver | None = field(default=None, init=False, repr=False)
    # Entries the hub resolved: kept across models-file reloads (use_catalog adds them to each new catalog).
    hub_models: list[dict[str, Any]] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        self.placeable = PlaceableWorkloads(lambda: self.config.admission, lambda: self.inventory.snapshot())
        previous = getattr(self.metrics, "placeable_collector", None)
        if previous is not None:  # a Metrics shared with an earlier instance: this state's figures replace it
            self.metrics.registry.unregister(previous)
        self.metrics.registry.register(self.placeable)
        self.metrics.placeable_collector = self.placeable
        if self.config.models:
            self.catalog = self.catalog.with_entries(self.config.models)
        self.extender = Extender(self.config, self.catalog, lambda: self.inventory.snapshot(), self.metrics)
        self._base_catalog = self.catalog
        self._catalog_lock = threading.RLock()
        if self.config.hub.enabled:
            self.hub = HubResolver(self.config.hub, self.add_model, self.hub_store, self.metrics)
        if isinstance(self.inventory, FixedInventory):
            # No watch will ever publish a fixed inventory's gauges: set them once here.
            self.metrics.observe_fixed_inventory(self.inventory.snapshot())

    @property
    def ready(self) -> bool:
        return not self.shutting_down and self.inventory.snapshot().synced

    def serves(self, role: Role) -> bool:
        return plays(self.role, role)

    def use_catalog(self, catalog: Catalog) -> None:
        """Judge with ``catalog`` (and what the hub resolved) from now on: admission and the extender alike.

        A new catalog object also retires every remembered admission answer (answers.py keys on it)."""
        with self._catalog_lock:  # the models-file watcher and the hub's worker thread both call this
            self._base_catalog = catalog
            effective = catalog.with_entries(self.hub_models) if self.hub_models else catalog
            self.catalog = effective
            self.extender.use_catalog(effective)

    def add_model(self, entry: dict[str, Any]) -> None:
        """A catalog entry the hub resolved: judged with from now on (the hub's worker thread calls this)."""
        with self._catalog_lock:
            self.hub_models = [*self.hub_models, entry]
            self.use_catalog(self._base_catalog)
