"""The official client's connection from a kubeconfig, and its errors' HTTP status (live reads: kube/nodecache.py)."""

from __future__ import annotations

from typing import Any


def api_status(exc: BaseException) -> int | None:
    """The HTTP status of a kubernetes client ApiException (None for any other error)."""
    status = getattr(exc, "status", None)
    return status if isinstance(status, int) else None


def api_client(kubeconfig: str | None = None, *, retries: Any = None) -> Any:
    """An ApiClient from a kubeconfig path, else in-cluster config, else the default kubeconfig.

    ``retries`` replaces urllib3's default (3 retries, so 4 attempts of the call's timeout each) for every call of
    this client: ``False`` for a caller with a deadline of its own (admission's ConfigMap reads).
    """
    from kubernetes import client, config

    if retries is None:
        if kubeconfig:
            return config.new_client_from_config(config_file=kubeconfig)
        try:
            config.load_incluster_config()
            return client.ApiClient()
        except config.ConfigException:
            return config.new_client_from_config()
    configuration = client.Configuration()
    configuration.retries = retries  # read when the client's connection pool is made, below
    if kubeconfig:
        return config.new_client_from_config(config_file=kubeconfig, client_configuration=configuration)
    try:
        config.load_incluster_config(client_configuration=configuration)
        return client.ApiClient(configuration)
    except config.ConfigException:
        return config.new_client_from_config(client_configuration=configuration)
