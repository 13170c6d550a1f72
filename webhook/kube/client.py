"""One-shot reads from a cluster with the official client (for the CLI); the service uses a watch."""

from __future__ import annotations

import json
from typing import Any

from ..cluster.usage import used_per_node


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


def list_nodes_and_usage(kubeconfig: str | None = None) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """All Nodes as plain dicts, and GPUs held per node by non-terminal pods."""
    from kubernetes import client

    api = api_client(kubeconfig)
    core = client.CoreV1Api(api)
    nodes: Any = core.list_node(_preload_content=False)
    pods: Any = core.list_pod_for_all_namespaces(
        field_selector="status.phase!=Succeeded,status.phase!=Failed", _preload_content=False
    )


    node_items = json.loads(nodes.data).get("items", [])
    pod_items = json.loads(pods.data).get("items", [])
    return node_items, used_per_node(pod_items)


def list_dra(kubeconfig: str | None = None) -> list[dict[str, Any]]:
    """ResourceSlices and DeviceClasses (``resource.k8s.io/v1``), each with its kind; none where not served."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    res = client.ResourceV1Api(api_client(kubeconfig))
    out: list[dict[str, Any]] = []
    for kind, call in (("ResourceSlice", res.list_resource_slice), ("DeviceClass", res.list_device_class)):
        try:
            resp: Any = call(_preload_content=False)
        except ApiException as exc:
            if exc.status in (403, 404):
                continue
            raise
        out.extend({**item, "kind": kind} for item in json.loads(resp.data).get("items", []))
    return out
