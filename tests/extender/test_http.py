"""The extender over a real TLS socket: both wire modes, every reason class, scores, bad input."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from webhook.cluster.snapshot import FixedInventory, StaticInventory
from webhook.config import Config, Extender
from webhook.serve.app import create_app
from webhook.serve.state import AppState

from ..harness import Running, serve_app
from .cluster import CFG, EXPECTED_CODES, FITS, fixed_snapshot, gpu_pod, names, nodes


@pytest.fixture(scope="module")
def server() -> Iterator[Running]:
    config = Config(extender=Extender(max_body_bytes=256 * 1024))
    state = AppState(config, FixedInventory(fixed_snapshot()), role="extender")
    with serve_app(create_app(state)) as running:
        yield running


def post(server: Running, verb: str, body: Any) -> Any:
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    with server.client() as c:
        r = c.post(f"/scheduler/{verb}", content=raw, headers={"Content-Type": "application/json"})
    assert r.status_code == 200, r.text
    return orjson.loads(r.content)


def codes(failed: dict[str, str]) -> dict[str, str]:
    return {node: reason.split(":", 1)[0] for node, reason in failed.items()}


def test_filter_node_names_every_reason(server: Running) -> None:
    out = post(server, "filter", {"Pod": gpu_pod(), "NodeNames": [*names(), "ghost"]})
    assert out["NodeNames"] == FITS
    assert out["Nodes"] is None and out["Error"] == ""
    # GPUs busy now: preemption or waiting can help, so the scheduler may preempt for it.
    assert out["FailedNodes"] == {"busy": "GPUsBusy: 1 of 8 GPUs free, pod needs 2"}
    unresolvable = codes(out["FailedAndUnresolvableNodes"])
    assert unresolvable == {**{k: v for k, v in EXPECTED_CODES.items() if k != "busy"}, "ghost": "NotInInventory"}
    reasons = out["FailedAndUnresolvableNodes"]
    assert reasons["t4"] == "VRAMTooSmall: needs 30 GiB per GPU, Tesla-T4 has 15 GiB"
    assert reasons["single"] == "TooFewGPUs: 1 healthy GPUs, pod needs 2"
    assert reasons["old-driver"] == "DriverTooOld: driver 470 < 525 needed by CUDA 12.2"
    assert reasons["no-plugin"].startswith("NoDevicePlugin: ")
    assert reasons["faulty"].startswith("GPUFault: ") and "GpuMemWatch" in reasons["faulty"]
    assert reasons["cpu"] == "NoGPUs: no GPUs"
    # Every input node is accounted for exactly once.
    every = set(out["NodeNames"]) | set(out["FailedNodes"]) | set(out["FailedAndUnresolvableNodes"])
    assert every == {*names(), "ghost"}
    assert len(out["NodeNames"]) + len(out["FailedNodes"]) + len(out["FailedAndUnresolvableNodes"]) == len(every)


def test_filter_node_list_returns_the_node_objects_unmodified(server: Running) -> None:
    items = nodes()
    node_list = {"apiVersion": "v1", "kind": "NodeList", "metadata": {"resourceVersion": "77"}, "items": items}
    out = post(server, "filter", {"Pod": gpu_pod(), "Nodes": node_list})
    assert out["NodeNames"] is None and out["Error"] == ""
    kept = out["Nodes"]["items"]
    assert [n["metadata"]["name"] for n in kept] == FITS
    assert kept == [n for n in items if n["metadata"]["name"] in FITS]
    assert out["Nodes"]["kind"] == "NodeList"
    # Free GPUs still come from the live snapshot: "busy" is busy although its Node object says 8.
    assert out["FailedNodes"] == {"busy": "GPUsBusy: 1 of 8 GPUs free, pod needs 2"}
    assert codes(out["FailedAndUnresolvableNodes"]) == {k: v for k, v in EXPECTED_CODES.items() if k != "busy"}


def test_node_list_mode_judges_the_request_objects(server: Running) -> None:
    fresh = nodes()[0]
    fresh["status"]["conditions"] = [{"type": "SysLogsXIDError", "status": "True", "reason": "XID 79"}]
    newcomer = {**nodes()[0], "metadata": {**nodes()[0]["metadata"], "name": "newcomer"}}
    out = post(server, "filter", {"Pod": gpu_pod(), "Nodes": {"items": [fresh, newcomer]}})
    assert [n["metadata"]["name"] for n in out["Nodes"]["items"]] == ["newcomer"]
    assert codes(out["FailedAndUnresolvableNodes"]) == {"a100": "GPUFault"}


def test_pod_without_gpus_keeps_every_node(server: Running) -> None:
    plain = gpu_pod(gpus=0, vram=None, cuda=None)
    out = post(server, "filter", {"Pod": plain, "NodeNames": [*names(), "ghost"]})
    assert out["NodeNames"] == [*names(), "ghost"]
    assert out["FailedNodes"] == {} and out["FailedAndUnresolvableNodes"] == {} and out["Error"] == ""
    out = post(server, "filter", {"Pod": plain, "Nodes": {"items": nodes()}})
    assert out["Nodes"]["items"] == nodes()
    scores = post(server, "prioritize", {"Pod": plain, "NodeNames": names()})
    assert scores == [{"Host": n, "Score": 0} for n in names()]


def test_malformed_declaration_keeps_every_node_and_logs(server: Running, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="vramgate.extender"):
        out = post(server, "filter", {"Pod": gpu_pod(vram="lots", name="bad"), "NodeNames": names()})
    assert out["NodeNames"] == names() and out["Error"] == ""
    assert any("vramgate.io/vram" in r.getMessage() and "ml/bad" in r.getMessage() for r in caplog.records)


def test_prioritize_binpack_by_default(server: Running) -> None:
    scores = post(server, "prioritize", {"Pod": gpu_pod(), "NodeNames": [*names(), "ghost"]})
    by_host = {s["Host"]: s["Score"] for s in scores}
    assert [s["Host"] for s in scores] == [*names(), "ghost"]
    assert all(isinstance(s["Score"], int) and 0 <= s["Score"] <= 10 for s in scores)
    assert all(by_host[n] == 0 for n in [*EXPECTED_CODES, "ghost"])  # no fit, no score
    # Best fit: the 45 GiB L40S and the nearly full A100 node before the empty A100 node.
    assert by_host["l40"] > by_host["a100"] and by_host["a100-half"] > by_host["a100"]
    assert all(by_host[n] > 0 for n in FITS)


def test_prioritize_spread_by_annotation_in_both_modes(server: Running) -> None:
    spread = gpu_pod(placement="spread")
    by_names = post(server, "prioritize", {"Pod": spread, "NodeNames": names()})
    by_list = post(server, "prioritize", {"Pod": spread, "Nodes": {"items": nodes()}})
    assert by_names == by_list
    by_host = {s["Host"]: s["Score"] for s in by_names}
    assert by_host["a100"] > by_host["l40"] and by_host["a100"] > by_host["a100-half"]
    binpack = {s["Host"]: s["Score"] for s in post(server, "prioritize", {"Pod": gpu_pod(), "NodeNames": names()})}
    assert sorted(FITS, key=lambda n: -by_host[n])[0] != sorted(FITS, key=lambda n: -binpack[n])[0]


GARBAGE: list[tuple[bytes, str]] = [
    (b"{not json", "not JSON"),
    (b"[]", "must be a JSON object"),
    (b'{"NodeNames": ["a100"]}', "Pod"),
    (b'{"Pod": [], "NodeNames": []}', "Pod"),
    (b'{"Pod": {"kind": "Deployment", "spec": {}}, "NodeNames": []}', "not Pod"),
    (b'{"Pod": {"metadata": {}}, "NodeNames": []}', "no spec"),
    (b'{"Pod": {"spec": {}}}', "NodeNames"),
    (b'{"Pod": {"spec": {"containers": 5}}, "NodeNames": []}', "containers"),
    (b'{"Pod": {"metadata": "x", "spec": {"containers": []}}, "NodeNames": []}', "metadata"),
    (orjson.dumps({"Pod": gpu_pod(), "NodeNames": "a100"}), "NodeNames"),
    (orjson.dumps({"Pod": gpu_pod(), "NodeNames": ["a100", 7]}), "strings"),
    (orjson.dumps({"Pod": gpu_pod(), "NodeNames": ["a100", ["x"]]}), "strings"),
    (orjson.dumps({"Pod": gpu_pod(), "Nodes": {"items": [1]}}), "metadata.name"),
    (orjson.dumps({"Pod": gpu_pod(), "Nodes": {"items": {}}}), "items"),
    (orjson.dumps({"Pod": gpu_pod(), "Nodes": []}), "NodeList"),
]


@pytest.mark.parametrize("verb", ["filter", "prioritize"])
def test_garbage_gets_a_4xx_and_the_next_request_is_served(server: Running, verb: str) -> None:
    with server.client() as c:
        for body, why in GARBAGE:
            r = c.post(f"/scheduler/{verb}", content=body)
            assert r.status_code == 400, (body, r.status_code, r.text)
            assert why in r.text and r.text.count("\n") == 1, r.text
        r = c.post(f"/scheduler/{verb}", content=b"x" * (300 * 1024))
        assert r.status_code == 413 and "limit" in r.text
        r = c.get(f"/scheduler/{verb}")
        assert 400 <= r.status_code < 500
        r = c.post(f"/scheduler/{verb}", content=orjson.dumps({"Pod": gpu_pod(), "NodeNames": names()}))
        assert r.status_code == 200
        metrics = c.get("/metrics").text
    assert f'vramgate_bad_requests_total{{endpoint="/scheduler/{verb}",reason="json"}}' in metrics
    assert f'vramgate_bad_requests_total{{endpoint="/scheduler/{verb}",reason="too-large"}}' in metrics


def test_static_inventory_and_metrics() -> None:
    state = AppState(CFG, StaticInventory(nodes(), CFG), role="extender")
    with serve_app(create_app(state)) as running:
        out = post(running, "filter", {"Pod": gpu_pod(), "NodeNames": names()})
        # Nothing is in use in a static inventory: "busy" has 8 free.
        assert out["NodeNames"] == [*FITS, "busy"]
        assert out["FailedNodes"] == {}
        with running.client() as c:
            text = c.get("/metrics").text
    assert 'vramgate_extender_requests_total{verb="filter"} 1.0' in text
    assert 'vramgate_extender_filtered_nodes_total{reason="VRAMTooSmall"} 1.0' in text


def test_an_internal_error_is_answered_not_a_500(server: Running, monkeypatch: pytest.MonkeyPatch) -> None:
    from webhook.serve.extender import Extender as Decisions

    def boom(self: Decisions, body: bytes) -> bytes:
        raise RuntimeError("bug")

    monkeypatch.setattr(Decisions, "filter", boom)
    monkeypatch.setattr(Decisions, "prioritize", boom)
    body = {"Pod": gpu_pod(), "NodeNames": names()}
    out = post(server, "filter", body)
    assert out["Error"].startswith("vramgate: internal error") and out["NodeNames"] is None
    assert post(server, "prioritize", body) == []
