"""What the hub resolved, kept in a ConfigMap of vramgate's namespace: a restarted pod need not ask again.

One key, ``models.yaml`` (``models: [...]``, the models file's schema). Saving merges with what is there
(several replicas resolve models independently) and writes with the read ``resourceVersion``, retrying
on a conflict. Nothing here raises: without the RBAC or the API server, the models stay in memory only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import yaml

from .apiserver import ApiError, RawApi

log = logging.getLogger("vramgate.hub")
DATA_KEY = "models.yaml"
_ATTEMPTS = 3


def _key(entry: dict[str, Any]) -> str:
    aliases = entry.get("aliases") or [entry.get("name")]
    return str(aliases[0]).lower()


def _entries(obj: Any) -> list[dict[str, Any]]:
    data = obj.get("data") if isinstance(obj, dict) else None
    raw = data.get(DATA_KEY) if isinstance(data, dict) else None
    try:
        parsed = yaml.safe_load(raw) if isinstance(raw, str) else None
    except yaml.YAMLError:
        return []
    models = parsed.get("models") if isinstance(parsed, dict) else None
    return [m for m in models if isinstance(m, dict)] if isinstance(models, list) else []


class HubModelStore:
    """The ConfigMap ``name`` in ``namespace``, read at start and merged into on each resolved model."""

    def __init__(self, api: Callable[[], RawApi], namespace: str, name: str) -> None:
        self._api_factory = api
        self._api: RawApi | None = None
        self.namespace, self.name = namespace, name
        self.path = f"/api/v1/namespaces/{namespace}/configmaps/{name}"

    def _client(self) -> RawApi:
        if self._api is None:
            self._api = self._api_factory()
        return self._api

    def load(self) -> list[dict[str, Any]]:
        """The entries kept so far ([] when there is no ConfigMap yet, or it cannot be read)."""
        try:
            return _entries(self._client().get(self.path))
        except ApiError as exc:
            if exc.status != 404:
                log.warning("cannot read ConfigMap %s/%s (%s); resolved models are kept in memory only",
                            self.namespace, self.name, exc)
            return []
        except Exception as exc:  # no kubeconfig, a broken client: the same, said once per call
            log.warning("cannot read ConfigMap %s/%s (%s)", self.namespace, self.name, exc)
            return []

    def save(self, entry: dict[str, Any]) -> bool:
        """Merge ``entry`` into the ConfigMap (created if missing); whether it was written."""
        for _ in range(_ATTEMPTS):
            try:
                return self._save_once(entry)
            except ApiError as exc:
                if exc.status == 409:
                    continue  # another replica wrote meanwhile: read again and merge
                log.warning("cannot write ConfigMap %s/%s (%s); %s is kept in memory only", self.namespace,
                            self.name, exc, _key(entry))
                return False
            except Exception as exc:
                log.warning("cannot write ConfigMap %s/%s (%s)", self.namespace, self.name, exc)
                return False
        return False

    def _save_once(self, entry: dict[str, Any]) -> bool:
        api = self._client()
        try:
            current: Any = api.get(self.path)
        except ApiError as exc:
            if exc.status != 404:
                raise
            current = None
        kept = {_key(e): e for e in _entries(current)}
        kept[_key(entry)] = entry
        text = yaml.safe_dump({"models": list(kept.values())}, sort_keys=False, width=120)
        meta: dict[str, Any] = {"name": self.name, "namespace": self.namespace,
                                "labels": {"app.kubernetes.io/managed-by": "vramgate"}}
        if current is None:
            body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {DATA_KEY: text}}
            api.request("POST", f"/api/v1/namespaces/{self.namespace}/configmaps", body)
            return True
        meta["resourceVersion"] = current.get("metadata", {}).get("resourceVersion")
        meta["labels"] = {**(current.get("metadata", {}).get("labels") or {}), **meta["labels"]}
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta,
                "data": {**(current.get("data") or {}), DATA_KEY: text}}
        api.request("PUT", self.path, body)
        return True
