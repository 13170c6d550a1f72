"""What every route of one service instance shares: config, catalog, inventory, metrics, lifecycle."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Literal

from ..cluster.snapshot import FixedInventory, InventorySource
from ..config import Config
from ..kube.configmaps import ConfigMapReader
from ..metrics import Metrics
from ..models.catalog import Catalog, builtin_catalog
from .answers import AnswerCache
from .extender.decide import Extender
from .placeable import PlaceableWorkloads

Role = Literal["all", "webhook", "extender", "controller"]
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
        if isinstance(self.inventory, FixedInventory):
            # No watch will ever publish a fixed inventory's gauges: set them once here.
            self.metrics.observe_fixed_inventory(self.inventory.snapshot())

    @property
    def ready(self) -> bool:
        return not self.shutting_down and self.inventory.snapshot().synced

    def serves(self, role: Role) -> bool:
        return self.role in ("all", role)

    def use_catalog(self, catalog: Catalog) -> None:
        """Judge with ``catalog`` from now on (a reloaded models file): admission and the extender alike."""
        self.catalog = catalog
        self.extender.use_catalog(catalog)
