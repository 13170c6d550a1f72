"""The official client's connection from a kubeconfig, and its errors' HTTP status (live reads: kube/nodecache.py)."""

from __future__ import annotations

from typing import Any


def api_status(exc: BaseException) -> int | None:
    """The HTTP status of a kubernetes client ApiException (None for any other error)."""
    status = getattr(exc, "status", None)
    return status if isinstance(status, int) else None


def api_client(kubeconfig: str | None = None) -> Any:
    """An ApiClient from a kubeconfig path, else in-cluster config, else the default kubeconfig."""
    from kubernetes import client, config

    if kubeconfig:
        return config.new_client_from_config(config_file=kubeconfig)
    try:
        config.load_incluster_config()
        return client.ApiClient()
    except config.ConfigException:
        return config.new_client_from_config()
