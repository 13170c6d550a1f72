"""The extender's decisions in-process: modes from config, sync state, the fast path against a naive one."""

from __future__ import annotations

import random
from typing import Any

import orjson

from webhook.cluster.snapshot import Snapshot, snapshot_from_nodes
from webhook.config import Config
from webhook.config import Extender as ExtenderConfig
from webhook.decide.placement import Need, fit, score
from webhook.models.catalog import builtin_catalog
from webhook.serve.extender import Extender

from ..unit.helpers import cpu_node, gpu_node
from .cluster import CFG, FITS, fixed_snapshot, gpu_pod, names


def decide(snapshot: Snapshot, config: Config = CFG) -> Extender:
    return Extender(config, builtin_catalog(), lambda: snapshot)


def call(ext: Extender, verb: str, body: dict[str, Any]) -> Any:
    return orjson.loads(getattr(ext, verb)(orjson.dumps(body)))


def test_config_placement_spread() -> None:
    spread = Config(extender=ExtenderConfig(placement="spread"))
    by_spread = {s["Host"]: s["Score"] for s in call(decide(fixed_snapshot(), spread), "prioritize",
                                                      {"Pod": gpu_pod(), "NodeNames": names()})}
    by_binpack = {s["Host"]: s["Score"] for s in call(decide(fixed_snapshot()), "prioritize",
                                                       {"Pod": gpu_pod(), "NodeNames": names()})}
    assert max(FITS, key=by_spread.__getitem__) == "a100"
    assert max(FITS, key=by_binpack.__getitem__) != "a100"
    # The pod's own annotation beats the config.
    by_pod = {s["Host"]: s["Score"] for s in call(decide(fixed_snapshot(), spread), "prioritize",
                                                   {"Pod": gpu_pod(placement="binpack"), "NodeNames": names()})}
    assert by_pod == by_binpack


def test_unsynced_inventory_is_an_error_in_node_names_mode_only() -> None:
    ext = decide(Snapshot())
    out = call(ext, "filter", {"Pod": gpu_pod(), "NodeNames": ["a100"]})
    assert "not synced" in out["Error"]
    # NodeList mode can still judge capability from the Node objects (free GPUs unknown: not checked).
    out = call(ext, "filter", {"Pod": gpu_pod(), "Nodes": {"items": [gpu_node("x"), cpu_node("c")]}})
    assert out["Error"] == "" and [n["metadata"]["name"] for n in out["Nodes"]["items"]] == ["x"]
    assert call(ext, "prioritize", {"Pod": gpu_pod(), "NodeNames": ["a100"]}) == [{"Host": "a100", "Score": 0}]


def test_a_bare_snapshot_without_classes_gives_the_same_answers() -> None:
    full = fixed_snapshot()
    bare = Snapshot(nodes=full.nodes, free=full.free, synced=True)
    body = {"Pod": gpu_pod(), "NodeNames": [*names(), "ghost"]}
    for verb in ("filter", "prioritize"):
        assert call(decide(full), verb, body) == call(decide(bare), verb, body)


def test_demand_is_cached_per_pod_version() -> None:
    ext = decide(fixed_snapshot())
    p = gpu_pod(uid="u-1")
    first = ext.pod_need(p)
    assert first is not None and ext.pod_need(p) is first
    p["metadata"]["resourceVersion"] = "2"
    p["metadata"]["annotations"]["vramgate.io/vram"] = "10Gi"
    second = ext.pod_need(p)
    assert second is not None and second.need.per_gpu_mib == 5 * 1024


def test_fast_path_matches_a_naive_per_node_fit() -> None:
    rng = random.Random(7)
    products = [("A100", 81920, 8), ("A10G", 24576, 4), ("T4", 15360, 1), ("L40S", 46068, 4), ("H200", 143771, 8)]
    node_objs: list[dict[str, Any]] = []
    used: dict[str, int] = {}
    for i in range(600):
        product, mem, gpus = rng.choice(products)
        name = f"n{i}"
        if rng.random() < 0.05:
            node_objs.append(cpu_node(name))
            continue
        node_objs.append(gpu_node(name, gpus=gpus, mem=mem, product=product, driver=rng.choice([470, 535, 550]),
                                  allocatable=gpus - (1 if rng.random() < 0.1 else 0)))
        used[name] = rng.randint(0, gpus)
    snap = snapshot_from_nodes(node_objs, CFG, used)
    ext = decide(snap)
    request = [f"n{i}" for i in rng.sample(range(650), 500)]  # some unknown
    for pod in (gpu_pod(1, "20Gi"), gpu_pod(2, "60Gi", cuda="12.4"), gpu_pod(4, "100Gi", cuda=None),
                gpu_pod(1, None, placement="spread")):
        need = Need.of(_demand(pod))
        mode = "spread" if pod["metadata"]["annotations"].get("vramgate.io/placement") == "spread" else "binpack"
        out = call(ext, "filter", {"Pod": pod, "NodeNames": request})
        scores = {s["Host"]: s["Score"] for s in call(ext, "prioritize", {"Pod": pod, "NodeNames": request})}
        expect_pass, expect_failed, expect_unres, expect_scores = [], {}, {}, {}
        for name in request:
            node = snap.nodes.get(name)
            if node is None:
                expect_unres[name] = "NotInInventory"
                expect_scores[name] = 0
                continue
            verdict = fit(need, node, snap.free_gpus(name))
            if verdict.fits:
                expect_pass.append(name)
                expect_scores[name] = score(need, node, snap.free_gpus(name), mode)
            else:
                (expect_failed if verdict.resolvable else expect_unres)[name] = f"{verdict.code}: {verdict.reason}"
                expect_scores[name] = 0
        assert out["NodeNames"] == expect_pass
        assert out["FailedNodes"] == expect_failed
        assert {k: v.split(":")[0] if k not in snap.nodes else v
                for k, v in out["FailedAndUnresolvableNodes"].items()} == expect_unres
        assert scores == expect_scores


def _demand(pod: dict[str, Any]) -> Any:
    from webhook.decide.demand import read_demand
    from webhook.kinds import pod_view

    view = pod_view({**pod, "kind": "Pod"})
    assert view is not None
    return read_demand(view, CFG, builtin_catalog())


def test_names_that_need_json_escaping_round_trip() -> None:
    odd = ['we"ird', "back\\slash", "tab\tname", "ünïcode", "a100"]
    ext = decide(fixed_snapshot())
    scores = call(ext, "prioritize", {"Pod": gpu_pod(), "NodeNames": odd})
    assert [s["Host"] for s in scores] == odd and scores[-1]["Score"] > 0
    out = call(ext, "filter", {"Pod": gpu_pod(), "NodeNames": odd})
    assert out["NodeNames"] == ["a100"] and set(out["FailedAndUnresolvableNodes"]) == set(odd[:-1])


def test_verdicts_are_memoised_per_class_and_follow_the_live_inventory(monkeypatch: Any) -> None:
    """A class is judged once per need while the class table lasts; a pod taking GPUs changes the answer at once."""
    from webhook.kube.nodecache import InventoryState
    from webhook.serve.extender import decide as module

    from .cluster import bound_pod, event, with_rv

    state = InventoryState(CFG)
    state.relist("Node", [with_rv(gpu_node("x", gpus=2, product="NVIDIA-A100-SXM4-80GB", mem=81920), 5),
                          with_rv(gpu_node("y", gpus=2, product="NVIDIA-A100-SXM4-80GB", mem=81920), 6)], "10")
    state.relist("Pod", [], "10")
    state.relist("Namespace", [], "10")
    current = [state.snapshot]
    ext = Extender(CFG, builtin_catalog(), lambda: current[0]())
    judged: list[int] = []
    real_fit = module.fit

    def counting_fit(*args: Any) -> Any:
        judged.append(1)
        return real_fit(*args)

    monkeypatch.setattr(module, "fit", counting_fit)
    body = {"Pod": gpu_pod(uid="u1"), "NodeNames": ["x", "y"]}
    assert call(ext, "filter", body)["NodeNames"] == ["x", "y"]
    first = len(judged)
    assert first == 1  # x and y are one class
    assert call(ext, "filter", body)["NodeNames"] == ["x", "y"]
    assert call(ext, "prioritize", body)[0]["Score"] > 0
    assert len(judged) == first + 1  # prioritize judges once for its score; the second filter not at all
    # x's GPUs are taken: a new class (same capability, 0 free), judged afresh.
    state.apply("Pod", event("ADDED", bound_pod("p", "x", 2, rv=20)))
    out = call(ext, "filter", body)
    assert out["NodeNames"] == ["y"] and out["FailedNodes"]["x"].startswith("GPUsBusy")
    assert {s["Host"]: s["Score"] for s in call(ext, "prioritize", body)}["x"] == 0
    # Another class table, where class 0 is a T4: the memos start afresh (class ids mean nothing across tables).
    small = snapshot_from_nodes([gpu_node("x", gpus=2, product="Tesla-T4", mem=15360)], CFG, revision=2)
    assert small.classes == {"x": 0} and state.snapshot().classes["y"] == 0
    current[0] = lambda: small
    assert call(ext, "filter", {**body, "NodeNames": ["x"]})["FailedAndUnresolvableNodes"]["x"].startswith(
        "VRAMTooSmall")


def test_pods_of_one_template_share_one_reading(monkeypatch: Any) -> None:
    """Pods that differ only in name and uid (one ReplicaSet's) are read once; any other difference reads again."""
    from webhook.serve.extender import decide as module

    reads: list[str] = []
    real = module.read_demand

    def counting(view: Any, *args: Any, **kw: Any) -> Any:
        reads.append(view.name)
        return real(view, *args, **kw)

    monkeypatch.setattr(module, "read_demand", counting)
    ext = decide(fixed_snapshot())
    first = call(ext, "filter", {"Pod": gpu_pod(name="web-a", uid="u-a"), "NodeNames": names()})
    second = call(ext, "filter", {"Pod": gpu_pod(name="web-b", uid="u-b"), "NodeNames": names()})
    assert first == second and reads == ["web-a"]
    # Another VRAM annotation, or another GPU count: another template, read.
    other = call(ext, "filter", {"Pod": gpu_pod(vram="10Gi", name="web-c", uid="u-c"), "NodeNames": names()})
    assert reads == ["web-a", "web-c"] and other["NodeNames"] != first["NodeNames"]
    call(ext, "filter", {"Pod": gpu_pod(gpus=1, name="web-d", uid="u-d"), "NodeNames": names()})
    assert reads == ["web-a", "web-c", "web-d"]
