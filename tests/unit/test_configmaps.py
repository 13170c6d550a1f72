"""The ConfigMaps a workload's env names: found in any pod spec of the object, read once, remembered, never
asked for again after a 403 (the e2e suite reads them through a real API server)."""

from __future__ import annotations

import time
from typing import Any

from webhook.kube.apiserver import ApiError
from webhook.kube.configmaps import ConfigMapReader, configmap_refs


class Api:
    """A stand-in for RawApi that answers GETs from a dict and counts them."""

    def __init__(self, objects: dict[str, dict[str, Any]], status: int = 404) -> None:
        self.objects, self.status, self.calls = objects, status, 0

    def get(self, path: str, timeout: float | None = None) -> Any:
        self.calls += 1
        name = path.rsplit("/", 1)[-1]
        if name in self.objects:
            return self.objects[name]
        raise ApiError(self.status, "not found" if self.status == 404 else "forbidden", "GET", path)


def test_refs_from_env_and_envfrom_anywhere_under_spec() -> None:
    obj = {"kind": "LeaderWorkerSet", "spec": {"leaderWorkerTemplate": {"workerTemplate": {"spec": {"containers": [
        {"name": "a", "env": [{"name": "M", "valueFrom": {"configMapKeyRef": {"name": "model", "key": "id"}}}],
         "envFrom": [{"configMapRef": {"name": "flags"}}, {"secretRef": {"name": "hf"}}]}]}}}}}
    assert configmap_refs(obj) == ["model", "flags"]  # never the Secret
    assert configmap_refs({"kind": "Pod"}) == [] and configmap_refs("garbage") == []


def test_read_once_then_remembered_missing_ones_too() -> None:
    api = Api({"model": {"metadata": {"name": "model", "namespace": "ml"}, "data": {"id": "m"}}})
    reader = ConfigMapReader(lambda: api, ttl=60)  # type: ignore[arg-type,return-value]
    found = reader.read("ml", ["model", "gone"], time.monotonic() + 5)
    assert [o["metadata"]["name"] for o in found] == ["model"] and found[0]["kind"] == "ConfigMap"
    reader.read("ml", ["model", "gone"], time.monotonic() + 5)
    assert api.calls == 2  # both answers (one a 404) remembered


def test_a_403_stops_the_asking_and_an_exhausted_budget_asks_nothing() -> None:
    api = Api({}, status=403)
    reader = ConfigMapReader(lambda: api, ttl=60)  # type: ignore[arg-type,return-value]
    assert reader.read("ml", ["a", "b"], time.monotonic() + 5) == []
    assert reader.forbidden and api.calls == 1
    fresh = Api({"a": {"metadata": {"name": "a"}}})
    late = ConfigMapReader(lambda: fresh, ttl=60)  # type: ignore[arg-type,return-value]
    assert late.read("ml", ["a"], time.monotonic() - 1) == [] and fresh.calls == 0
