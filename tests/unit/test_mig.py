"""MIG under the device plugin's mixed strategy (issue 38): nvidia.com/mig-<profile> resources, per-profile inventory,
placement on the profile's memory, the extender agreeing, and `vramgate check` on tests/fixtures/mig/."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from webhook.cli.main import main
from webhook.cluster.inventory import node_gpus
from webhook.cluster.mig import name_memory_mib, node_profiles, profile_of
from webhook.cluster.snapshot import snapshot_from_nodes
from webhook.config import Config
from webhook.decide.demand import read_demand
from webhook.decide.placement import Code, Need, cluster_verdict, fit
from webhook.kinds import pod_view
from webhook.models.catalog import builtin_catalog
from webhook.serve.extender import Extender

from .helpers import container, gpu_node, pod

CFG = Config()
FIX = Path(__file__).resolve().parents[1] / "fixtures" / "mig"
NODES = FIX / "nodes-mig-mixed.yaml"


@pytest.mark.parametrize(("resource", "profile", "mib"), [
    ("nvidia.com/mig-1g.10gb", "1g.10gb", 10240),
    ("nvidia.com/mig-1g.12gb", "1g.12gb", 12288),
    ("nvidia.com/mig-2g.24gb", "2g.24gb", 24576),
    ("nvidia.com/mig-3g.71gb", "3g.71gb", 72704),
    ("nvidia.com/mig-1g.10gb+me", "1g.10gb+me", 10240),
    ("nvidia.com/mig-1g.23gb+me.all", "1g.23gb+me.all", 23552),
    ("nvidia.com/mig-1g.24gb-me", "1g.24gb-me", 24576),
    ("nvidia.com/mig-1c.2g.20gb", "1c.2g.20gb", 20480),
    ("nvidia.com/mig-1g.4.5gb", "1g.4.5gb", 4608),  # a decimal size, should a GPU ever name one so
])
def test_profile_names(resource: str, profile: str, mib: int) -> None:
    assert profile_of(resource) == profile
    assert name_memory_mib(profile) == mib


@pytest.mark.parametrize("resource", ["nvidia.com/gpu", "nvidia.com/mig.strategy", "nvidia.com/mig-1g",
                                      "nvidia.com/mig-1g.10gb.count", "nvidia.com/mig-big", "amd.com/gpu"])
def test_not_profiles(resource: str) -> None:
    assert profile_of(resource) is None


def _nodes() -> list[dict[str, Any]]:
    return yaml.safe_load(NODES.read_text())["items"]


def test_mixed_node_offers_each_profile_at_its_labelled_memory() -> None:
    a100 = node_gpus(_nodes()[0], CFG)
    assert [(p.name, p.memory_mib, p.memory_source, p.capacity, p.allocatable, p.labelled_count)
            for p in a100.mig_profiles] == [
        ("1g.10gb", 9728, "gfd", 2, 2, 2), ("2g.20gb", 19968, "gfd", 1, 1, 1), ("3g.40gb", 40192, "gfd", 1, 1, 1)]
    assert a100.mig_profile("3g.40gb").product == "NVIDIA-A100-80GB-PCIe-MIG-3g.40gb"  # type: ignore[union-attr]
    # No nvidia.com/gpu left (every GPU partitioned) is not a missing device plugin: the slices are its devices.
    assert a100.capacity == 0 and not a100.plugin_missing and a100.health == "healthy" and a100.is_gpu_node


def test_profile_memory_from_the_name_when_gfd_has_not_labelled_it() -> None:
    h100 = node_gpus(_nodes()[1], CFG)
    assert [(p.name, p.memory_mib, p.memory_source, p.capacity) for p in h100.mig_profiles] == [
        ("1g.10gb", 10240, "name", 2), ("1g.10gb+me", 10240, "name", 1), ("4g.40gb", 40960, "name", 1)]


def test_time_shared_slices_divide_the_memory_and_allocatable_is_capped() -> None:
    labels = {"nvidia.com/mig-1g.10gb.memory": "9728", "nvidia.com/mig-1g.10gb.replicas": "2"}
    (p,) = node_profiles(labels, {"nvidia.com/mig-1g.10gb": "4"}, {"nvidia.com/mig-1g.10gb": "9"})
    assert (p.memory_mib, p.capacity, p.allocatable) == (4864, 4, 4)


def test_demand_counts_mig_slices_by_profile() -> None:
    c = container(gpus=None, args=["--model", "meta-llama/Meta-Llama-3.1-8B-Instruct"])
    c["resources"] = {"limits": {"nvidia.com/mig-3g.40gb": 1}}
    view = pod_view(pod(c))
    assert view is not None
    d = read_demand(view, CFG, builtin_catalog())
    assert d is not None and d.gpus == 1 and d.mig == (("3g.40gb", 1),) and d.gpu_containers == ("main",)
    assert Need.of(d).mig == (("3g.40gb", 1),)


def _verdict(name: str) -> Any:
    docs = [d for d in yaml.safe_load_all((FIX / "workloads.yaml").read_text()) if d]
    (doc,) = [d for d in docs if d["metadata"]["name"] == name]
    view = pod_view(doc)
    assert view is not None
    demand = read_demand(view, CFG, builtin_catalog())
    assert demand is not None
    return demand, cluster_verdict(demand, [node_gpus(n, CFG) for n in _nodes()])


def test_70b_on_a_1g_10gb_slice_is_rejected_naming_the_profile() -> None:
    _, v = _verdict("llama-70b-on-1g-10gb")
    assert not v.admit and v.code is Code.VRAM_TOO_SMALL
    assert "nvidia.com/mig-1g.10gb is a 10 GiB MIG slice" in v.message


def test_8b_awq_on_a_3g_40gb_slice_is_admitted() -> None:
    demand, v = _verdict("llama-8b-awq-on-3g-40gb")
    assert v.admit and v.code is Code.FITS and v.best_node == "a100-mig-0"
    assert demand.estimate.request.precision == "int4" and demand.mig == (("3g.40gb", 1),)


def test_rejection_suggests_a_larger_profile_the_cluster_has() -> None:
    _, v = _verdict("llama-8b-on-1g-10gb")
    assert not v.admit and "Try: nvidia.com/mig-2g.20gb (19.5 GiB) on node a100-mig-0" in v.message


def test_a_profile_no_node_offers_is_rejected_listing_the_clusters() -> None:
    _, v = _verdict("qwen-on-7g-80gb")
    assert not v.admit and v.code is Code.TOO_FEW_GPUS
    assert "no node offers that MIG profile" in v.message and "nvidia.com/mig-3g.40gb" in v.message


def test_a_full_gpu_node_does_not_hold_a_mig_pod_and_vice_versa() -> None:
    whole = node_gpus(gpu_node("a100", gpus=8), CFG)
    mig = node_gpus(_nodes()[0], CFG)
    slice_need = Need(1, 8000, 0.9, mig=(("1g.10gb", 1),))
    assert fit(slice_need, whole).code is Code.TOO_FEW_GPUS
    assert "nvidia.com/mig-1g.10gb" in fit(slice_need, whole).reason
    assert fit(slice_need, mig).fits
    assert fit(Need(2, 8000, 0.9, mig=(("1g.10gb", 2),)), mig).fits
    assert fit(Need(3, 8000, 0.9, mig=(("1g.10gb", 3),)), mig).code is Code.TOO_FEW_GPUS
    too_big = fit(Need(1, 9000, 0.9, mig=(("1g.10gb", 1),)), mig)
    assert too_big.code is Code.VRAM_TOO_SMALL and "MIG-1g.10gb" in too_big.reason
    assert fit(Need(1, 8000, 0.9), mig).code is Code.TOO_FEW_GPUS  # nvidia.com/gpu: none left whole


def test_the_extender_filter_agrees() -> None:
    snap = snapshot_from_nodes(_nodes(), CFG, {}, revision=1)
    ext = Extender(CFG, builtin_catalog(), lambda: snap)

    def passed(profile: str, model: str) -> list[str]:
        c = container(gpus=None, args=["--model", model, "--max-model-len", "4096"])
        c["resources"] = {"limits": {f"nvidia.com/mig-{profile}": 1}}
        body = pod(c, name=f"p-{profile}")
        del body["apiVersion"], body["kind"]
        out = orjson.loads(ext.filter(orjson.dumps({"Pod": body, "NodeNames": ["a100-mig-0", "h100-mig-0"]})))
        assert out["Error"] == ""
        return sorted(out["NodeNames"] or [])

    assert passed("3g.40gb", "meta-llama/Meta-Llama-3.1-8B-Instruct") == ["a100-mig-0"]
    assert passed("4g.40gb", "meta-llama/Meta-Llama-3.1-8B-Instruct") == ["h100-mig-0"]
    assert passed("1g.10gb", "meta-llama/Meta-Llama-3.1-8B-Instruct") == []
    assert passed("1g.10gb", "Qwen/Qwen2.5-0.5B-Instruct") == ["a100-mig-0", "h100-mig-0"]


def test_vramgate_check_on_the_fixtures(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["check", "-f", str(FIX / "workloads.yaml"), "--nodes", str(NODES)])
    out = capsys.readouterr().out
    verdicts = {line.split()[1].rstrip(":"): line.split()[0] for line in out.splitlines()
                if line.startswith(("ADMIT ", "REJECT "))}
    assert verdicts == {"deployment/llama-70b-on-1g-10gb": "REJECT", "deployment/llama-8b-awq-on-3g-40gb": "ADMIT",
                        "pod/llama-8b-on-1g-10gb": "REJECT", "pod/qwen-on-7g-80gb": "REJECT"}, out
    assert rc == 1
    assert "nvidia.com/mig-1g.10gb is a 10 GiB MIG slice" in out


def test_a_small_model_on_a_large_slice_is_offered_the_smallest_slice_that_holds_it() -> None:
    """Issue #41: a 3B model asking mig-3g.40gb on an A100 80GB is offered 1g.10gb, with what it frees; a model
    only the asked profile holds gets no such warning."""
    from webhook.decide.verdict import judge

    snap = snapshot_from_nodes(_nodes(), CFG, {}, revision=1)

    def warnings(profile: str, model: str) -> tuple[bool, tuple[str, ...]]:
        c = container(gpus=None, args=["--model", model, "--max-model-len", "4096"])
        c["resources"] = {"limits": {f"nvidia.com/mig-{profile}": 1}}
        j = judge(pod(c, name=f"p-{profile}"), snap, CFG, builtin_catalog())
        return j.allowed, j.warnings

    allowed, said = warnings("3g.40gb", "meta-llama/Llama-3.2-3B-Instruct")
    offer = [w for w in said if w.startswith("a smaller slice holds it")]
    assert allowed and len(offer) == 1, said
    assert "nvidia.com/mig-1g.10gb (9.5 GiB, 1/7 of a GPU) on node a100-mig-0" in offer[0], offer
    assert "nvidia.com/mig-3g.40gb takes 3/7 of a GPU" in offer[0] and "free 2/7 of a GPU (0.29 GPU-hours" in offer[0]
    # An 8B in bf16 (~17 GiB at 4k tokens) needs 2g.20gb at least: offered that, not 1g.10gb.
    allowed, said = warnings("3g.40gb", "meta-llama/Meta-Llama-3.1-8B-Instruct")
    offer = [w for w in said if w.startswith("a smaller slice holds it")]
    assert allowed and len(offer) == 1 and "nvidia.com/mig-2g.20gb" in offer[0], said
    # Asked the smallest that holds it: nothing to say.
    allowed, said = warnings("1g.10gb", "meta-llama/Llama-3.2-3B-Instruct")
    assert allowed and not any(w.startswith("a smaller slice") for w in said), said


def test_a_whole_gpu_for_a_model_a_slice_holds_is_told_the_slice() -> None:
    """Issue #41: a one-GPU pod whose model a MIG slice in the cluster holds is told which, and what it frees."""
    from webhook.decide.verdict import judge

    # Without a whole GPU anywhere the pod is rejected, and the rejection names the slice that holds it.
    only_slices = snapshot_from_nodes(_nodes(), CFG, {}, revision=1)
    c = container(gpus=1, args=["--model", "meta-llama/Llama-3.2-3B-Instruct", "--max-model-len", "4096"])
    j = judge(pod(c, name="whole"), only_slices, CFG, builtin_catalog())
    assert not j.allowed and "A MIG slice holds it: nvidia.com/mig-1g.10gb (9.5 GiB, 1/7 of a GPU)" in j.message
    # With whole GPUs too, it is admitted and told.
    snap = snapshot_from_nodes([*_nodes(), gpu_node("a100-whole", gpus=8)], CFG, {}, revision=1)
    j = judge(pod(c, name="whole"), snap, CFG, builtin_catalog())
    offer = [w for w in j.warnings if w.startswith("a MIG slice holds it")]
    assert len(offer) == 1, j.warnings
    assert "nvidia.com/mig-1g.10gb (9.5 GiB, 1/7 of a GPU) on node a100-mig-0" in offer[0]
    assert "would free 6/7 of a GPU per replica (0.86 GPU-hours an hour)" in offer[0]
    # A 70B no slice holds: nothing said (it may be rejected or admitted on whole GPUs, as before).
    big = container(gpus=1, args=["--model", "meta-llama/Meta-Llama-3.1-70B-Instruct", "--max-model-len", "4096"])
    j = judge(pod(big, name="big"), snap, CFG, builtin_catalog())
    assert not any(w.startswith("a MIG slice holds it") for w in j.warnings)
