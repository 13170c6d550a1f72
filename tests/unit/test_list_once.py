"""`list_once`: the CLI's live inventory is one list through the service's pages and state machine.

Paging follows continue tokens; an optional kind the API server does not serve (404) is listed as none; a
continue token that expired (410) restarts that kind's list; the Snapshot equals what the service's
KubeInventory publishes once synced over the same objects, with the configured GPU resource name.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.extender.cluster import FakeApi, namespace, page
from webhook.config import Config, Labels
from webhook.kube.nodecache import (
    CLI_OPTIONAL_KINDS,
    DRA_KINDS,
    KINDS,
    POOL_KIND,
    PRIORITY_KIND,
    Gone,
    KubeApi,
    KubeInventory,
    Unavailable,
    inventory_kinds,
    list_once,
)

from .helpers import container, gpu_node, pod

SHARED = "nvidia.com/gpu.shared"
CFG = Config(labels=Labels(gpu_resource=SHARED))


def shared_node(name: str, gpus: int, rv: int) -> dict[str, Any]:
    """A node whose device plugin advertises time-sliced GPUs under the renamed resource."""
    node = gpu_node(name, gpus=gpus, capacity=False)
    node["status"]["capacity"][SHARED] = node["status"]["allocatable"][SHARED] = str(gpus)
    node["metadata"]["resourceVersion"] = str(rv)
    return node


def bound(name: str, node: str, resources: dict[str, int], rv: int) -> dict[str, Any]:
    c = container(gpus=None)
    c["resources"] = {"limits": {k: str(v) for k, v in resources.items()}}
    p = pod(c, name=name, nodeName=node)
    p["metadata"].update(uid=f"uid-{name}", resourceVersion=str(rv))
    p["status"] = {"phase": "Running"}
    return p


def priority_class(name: str, value: int, rv: int) -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "value": value,
            "metadata": {"name": name, "resourceVersion": str(rv)}}


def nodepool(name: str, rv: int) -> dict[str, Any]:
    """A Karpenter NodePool whose template declares one H100 per node (list items carry no kind)."""
    labels = {"nvidia.com/gpu.memory": "81559", "nvidia.com/gpu.count": "1", "nvidia.com/gpu.product": "H100"}
    return {"apiVersion": "karpenter.sh/v1", "metadata": {"name": name, "resourceVersion": str(rv)},
            "spec": {"template": {"metadata": {"labels": labels}, "spec": {"requirements": []}}}}


def scripted() -> FakeApi:
    """Nodes and Pods over two pages each; DeviceClass, ResourceClaimTemplate, ResourceClaim not served (404)."""
    api = FakeApi()
    api.lists["Node"] = [page([shared_node("a", 4, 11)], 20, cont="node-2"), page([shared_node("b", 2, 12)], 20)]
    api.lists["Pod"] = [
        page([bound("one", "a", {SHARED: 1}, 13)], 21, cont="pod-2"),
        page([bound("two", "a", {SHARED: 2}, 14), bound("plain", "b", {"nvidia.com/gpu": 1}, 15)], 21),
    ]
    api.lists["Namespace"] = [page([namespace("ml", "warn", rv=16), namespace("free", rv=17)], 22)]
    api.lists[PRIORITY_KIND] = [page([priority_class("high", 1000, 18)], 23)]
    api.lists["ResourceSlice"] = [page([], 24)]
    api.lists[POOL_KIND] = [page([nodepool("h100", 19)], 25)]
    for kind in ("DeviceClass", "ResourceClaimTemplate", "ResourceClaim"):
        api.lists[kind] = [Unavailable(f"{kind}: 404 Not Found")]
    for kind in (*DRA_KINDS, PRIORITY_KIND, POOL_KIND):
        api.watches[kind] = []
    return api


def test_list_once_pages_through_every_kind_and_counts_the_configured_resource() -> None:
    api = scripted()
    snap = list_once(CFG, api, page_size=1)
    assert [c for c in api.calls if c[1] in ("Node", "Pod")] == [
        ("list", "Node", None), ("list", "Node", "node-2"), ("list", "Pod", None), ("list", "Pod", "pod-2")]
    assert {c[1] for c in api.calls} == set(inventory_kinds(CFG))  # each kind listed, none watched
    assert all(c[0] == "list" for c in api.calls)
    assert snap.synced
    assert set(snap.nodes) == {"a", "b"} and snap.nodes["a"].allocatable == 4
    # GPUs in use as config.labels.gpu_resource names them: the nvidia.com/gpu pod holds none of b's.
    assert dict(snap.free) == {"a": 1, "b": 2}
    assert dict(snap.enforcement) == {"ml": "warn"}
    assert snap.priority_classes == {"high": (1000, "PreemptLowerPriority")}
    assert snap.versions == {"a": "11", "b": "12"}
    assert [p.name for p in snap.provisioners.pools] == ["h100"]
    assert [n.node.vram_mib for o in snap.scale_up for n in o.nodes] == [81559]


def test_list_once_is_what_the_service_publishes_once_synced() -> None:
    cli = list_once(CFG, scripted())
    inv = KubeInventory(CFG, api=scripted(), dra=True, priorities=True, pools=True)
    assert inv.kinds == inventory_kinds(CFG)

    async def synced() -> Any:
        await inv.start()
        try:
            assert await asyncio.to_thread(inv.wait_synced, 5)
            return inv.snapshot()
        finally:
            await inv.stop()

    service = asyncio.run(synced())
    assert cli.nodes == service.nodes and dict(cli.free) == dict(service.free)
    assert cli.enforcement == service.enforcement and cli.priority_classes == service.priority_classes
    assert cli.dra == service.dra and cli.versions == service.versions
    assert cli.provisioners == service.provisioners and cli.provisioners


def test_an_expired_continue_token_restarts_that_list_and_other_errors_surface() -> None:
    api = scripted()
    api.lists["Pod"] = [page([bound("one", "a", {SHARED: 1}, 13)], 21, cont="pod-2"), Gone("continue expired"),
                        page([bound("one", "a", {SHARED: 1}, 13)], 25)]
    snap = list_once(CFG, api, kinds=KINDS)
    assert [c[2] for c in api.calls if c[1] == "Pod"] == [None, "pod-2", None]
    assert dict(snap.free) == {"a": 3, "b": 2}

    api = scripted()
    api.lists["Pod"] = [Gone("continue expired")]
    with pytest.raises(Gone):
        list_once(CFG, api, kinds=KINDS, gone_retries=1)
    assert sum(1 for c in api.calls if c[1] == "Pod") == 2

    api = scripted()
    api.lists["Pod"] = [RuntimeError("connection refused")]
    with pytest.raises(RuntimeError):
        list_once(CFG, api)


def test_the_default_kinds_follow_the_service() -> None:
    assert inventory_kinds(CFG) == (*KINDS, *DRA_KINDS, PRIORITY_KIND, POOL_KIND)
    no_dra = Config(labels=Labels(dra_drivers=[]))
    assert inventory_kinds(no_dra) == (*KINDS, PRIORITY_KIND, POOL_KIND)
    assert inventory_kinds(CFG, dra=False, priorities=False, pools=False) == KINDS


class _Refuses:
    """An official client API class whose every list answers ``status``."""

    def __init__(self, status: int) -> None:
        self.status = status

    def __getattr__(self, name: str) -> Any:
        from kubernetes.client.exceptions import ApiException

        def call(**_: Any) -> Any:
            raise ApiException(status=self.status, reason="Refused")

        return call


def test_kube_api_makes_404_and_403_on_optional_kinds_unavailable() -> None:
    from kubernetes.client import ApiClient
    from kubernetes.client.exceptions import ApiException

    service = KubeApi(client=ApiClient())
    cli = KubeApi(client=ApiClient(), optional=CLI_OPTIONAL_KINDS)
    for api in (service, cli):
        api._resource = _Refuses(404)  # type: ignore[assignment]
        api._scheduling = _Refuses(403)  # type: ignore[assignment]
        api._custom = _Refuses(404)  # type: ignore[assignment]  # no Karpenter CRD
        api._core = _Refuses(403)  # type: ignore[assignment]
        with pytest.raises(Unavailable):
            api.list_page("ResourceSlice", limit=1, cont=None)
        with pytest.raises(Unavailable):
            api.list_page(PRIORITY_KIND, limit=1, cont=None)
        with pytest.raises(Unavailable):
            api.list_page(POOL_KIND, limit=1, cont=None)
        with pytest.raises(ApiException):
            api.list_page("Node", limit=1, cont=None)  # Nodes are never optional
    with pytest.raises(ApiException):
        service.list_page("Namespace", limit=1, cont=None)  # the service needs its namespaces
    with pytest.raises(Unavailable):
        cli.list_page("Namespace", limit=1, cont=None)  # the CLI: every namespace enforces


def test_audit_reads_its_inventory_through_list_once_and_reports_the_api_servers_words(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from kubernetes.client.exceptions import ApiException

    from webhook.cli import audit
    from webhook.kube import nodecache
    from webhook.kube.apiserver import ApiError, RawApi

    seen: list[Any] = []

    def refuse(config: Config, kubeconfig: str | None = None, *, client: Any = None) -> Any:
        seen.append(client)
        exc = ApiException(status=403, reason="Forbidden")
        exc.body = '{"kind": "Status", "message": "nodes is forbidden: User \\"x\\" cannot list resource \\"nodes\\""}'
        raise exc

    monkeypatch.setattr(nodecache, "live_snapshot", refuse)
    marker = object()
    with pytest.raises(ApiError) as got:
        audit._live_snapshot(RawApi(marker), CFG)
    assert seen == [marker]  # the connection (and --context) audit found, not a second one
    assert got.value.status == 403 and got.value.message.startswith("nodes is forbidden")
