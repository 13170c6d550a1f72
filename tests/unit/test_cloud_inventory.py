"""GPU memory from managed-cloud labels and instance types, the config's labels, and unknown VRAM never rejecting."""

from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.cli.main import main
from webhook.cluster.cloud import (
    GPUTable,
    InstanceType,
    builtin_table,
    cloud_gpu,
    parse_table,
    why_unknown,
)
from webhook.cluster.inventory import NodeGPUs, node_gpus, vram_missing
from webhook.config import Config, Labels
from webhook.decide.demand import read_demand
from webhook.decide.placement import Code, Need, cluster_verdict, fit, fits_ever, score
from webhook.kinds import pod_view
from webhook.models.catalog import builtin_catalog

from .helpers import container, gpu_node, pod

CANON = Path("/work/shared/canon")
ROOT = Path(__file__).resolve().parents[2]
CFG = Config()
TABLE = builtin_table()


def node(name: str = "n", labels: dict[str, str] | None = None, gpus: int = 1) -> dict[str, Any]:
    """A Node with only the given labels (no GFD) and ``gpus`` nvidia.com/gpu."""
    cap = {"cpu": "8", "nvidia.com/gpu": str(gpus)} if gpus else {"cpu": "8"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": dict(labels or {})},
            "status": {"capacity": cap, "allocatable": dict(cap), "conditions": [{"type": "Ready", "status": "True"}]}}


def read(labels: dict[str, str], gpus: int = 1, config: Config = CFG, name: str = "n") -> NodeGPUs:
    return node_gpus(node(name, labels, gpus), config)


# ---- the table --------------------------------------------------------------------------------


def test_table_rows_have_sources_and_only_marked_figures_are_unverified() -> None:
    assert len(TABLE.instance_types) > 100
    for row in TABLE.instance_types.values():
        assert row.source.startswith("https://") and row.gpus >= 1 and row.mib > 0
    for product in TABLE.products.values():
        assert product.source and product.mib > 1024
    # The products whose figure is not a published driver/GFD output: T4G (the T4's ECC-on figure), and three
    # 2025-26 parts with no published nvidia-smi yet (GB300 from NVIDIA's nvml-mock profile; H20 141GB and H200 NVL
    # taken as H200's 141 GB figure).
    assert {p.key for p in TABLE.products.values() if not p.verified} == {"T4G", "GB300", "H20-141GB", "H200-NVL"}
    # Every AWS row comes from EC2's own figures (Karpenter's generated table); only inferred rows are unverified.
    assert all(r.verified for r in TABLE.instance_types.values() if "karpenter.sh" in r.source)
    assert not TABLE.instance_types["g2-standard-8"].verified and TABLE.instance_types["a3-ultragpu-8g"].verified


def test_parse_table_rejects_rows_that_name_no_product_or_repeat() -> None:
    base = {"products": {"X": {"name": "X", "mib": 1000, "source": "s"}}}
    with pytest.raises(ValueError, match="no known product"):
        parse_table({**base, "instance_types": [{"type": "t", "product": "Y", "gpus": 1, "source": "s"}]})
    with pytest.raises(ValueError, match="twice"):
        parse_table({**base, "instance_types": [{"type": "T", "product": "X", "gpus": 1, "source": "s"},
                                                {"type": "t", "product": "X", "gpus": 2, "source": "s"}]})
    with pytest.raises(ValueError, match="unknown product"):
        parse_table({**base, "aliases": {"a": "Z"}})
    with pytest.raises(ValueError, match="positive mib"):
        parse_table({"products": {"X": {"mib": 0, "source": "s"}}})
    assert isinstance(parse_table(base), GPUTable)


@pytest.mark.parametrize("row", list(TABLE.instance_types.values()), ids=lambda r: r.name)
def test_every_instance_type_row(row: InstanceType) -> None:
    n = read({"node.kubernetes.io/instance-type": row.name}, gpus=row.gpus)
    assert (n.vram_mib, n.labelled_count, n.product) == (row.mib, row.gpus, row.product.name)
    assert n.vram_source == f"instance-type {row.name}" and n.is_gpu_node and n.labelled


@pytest.mark.parametrize("kind, mib, gpus", [
    ("p4d.24xlarge", 40960, 8), ("p5.48xlarge", 81559, 8), ("g6e.12xlarge", 46068, 4),
    ("Standard_NV6ads_A10_v5", 4096, 1), ("standard_nd96isr_h100_v5", 81559, 8), ("BM.GPU.A100-v2.8", 81920, 8),
])
def test_instance_type_from_the_deprecated_beta_label_and_any_case(kind: str, mib: int, gpus: int) -> None:
    n = read({"beta.kubernetes.io/instance-type": kind}, gpus=gpus)
    assert (n.vram_mib, n.labelled_count) == (mib, gpus)


def test_an_instance_type_not_in_the_table_is_no_gpu_node() -> None:
    cpu = read({"node.kubernetes.io/instance-type": "m5.large"}, gpus=0)
    assert not cpu.is_gpu_node and cpu.vram_source == "unknown"


# ---- label families ---------------------------------------------------------------------------

GKE = {
    "nvidia-tesla-t4": 15360, "nvidia-tesla-p4": 7680, "nvidia-tesla-p100": 16384, "nvidia-tesla-v100": 16384,
    "nvidia-l4": 23034, "nvidia-tesla-a100": 40960, "nvidia-a100-80gb": 81920, "nvidia-h100-80gb": 81559,
    "nvidia-h100-mega-80gb": 81559, "nvidia-h200-141gb": 143771, "nvidia-b200": 183359, "nvidia-gb200": 189471,
    "nvidia-rtx-pro-6000": 97887, "nvidia-gb300": 284672,
}


@pytest.mark.parametrize("value, mib", GKE.items())
def test_gke_accelerator(value: str, mib: int) -> None:
    n = read({"cloud.google.com/gke-accelerator": value, "cloud.google.com/gke-accelerator-count": "2"}, gpus=2)
    assert (n.vram_mib, n.labelled_count, n.vram_source) == (mib, 2, f"gke-accelerator {value}")
    assert n.product and n.is_gpu_node


def test_gke_count_from_the_machine_type_and_mig_partitions() -> None:
    a3 = read({"cloud.google.com/gke-accelerator": "nvidia-h100-80gb",
               "node.kubernetes.io/instance-type": "a3-highgpu-8g"}, gpus=8)
    assert (a3.vram_mib, a3.labelled_count, a3.product) == (81559, 8, "NVIDIA-H100-80GB-HBM3")
    mig = read({"cloud.google.com/gke-accelerator": "nvidia-tesla-a100",
                "cloud.google.com/gke-gpu-partition-size": "1g.5gb"}, gpus=7)
    assert mig.vram_mib == 5 * 1024 and "MIG 1g.5gb" in mig.product and mig.vram_source.endswith("partition 1g.5gb")


def test_karpenter_memory_is_per_gpu_and_taken_as_labelled() -> None:
    # As Karpenter labels a p4d.24xlarge (karpenter.sh/docs/reference/instance-types/#p4d-family).
    p4d = read({"karpenter.k8s.aws/instance-gpu-name": "a100", "karpenter.k8s.aws/instance-gpu-manufacturer": "nvidia",
                "karpenter.k8s.aws/instance-gpu-count": "8", "karpenter.k8s.aws/instance-gpu-memory": "40960",
                "node.kubernetes.io/instance-type": "p4d.24xlarge"}, gpus=8)
    assert (p4d.vram_mib, p4d.labelled_count, p4d.vram_source, p4d.product) == (
        40960, 8, "karpenter", "NVIDIA-A100-SXM4-40GB")
    g6 = read({"karpenter.k8s.aws/instance-gpu-name": "l4", "karpenter.k8s.aws/instance-gpu-memory": "22888",
               "karpenter.k8s.aws/instance-gpu-count": "1"})
    assert (g6.vram_mib, g6.product) == (22888, "NVIDIA-L4")  # EC2's figure, a little under the driver's 23034


def test_karpenter_name_alone_fractional_count_and_other_makers() -> None:
    t4 = read({"karpenter.k8s.aws/instance-gpu-name": "t4"})
    assert (t4.vram_mib, t4.vram_source) == (15360, "karpenter instance-gpu-name t4")
    # a100 is 40 or 80 GB: without the memory label the instance type decides.
    p4de = read({"karpenter.k8s.aws/instance-gpu-name": "a100", "node.kubernetes.io/instance-type": "p4de.24xlarge"},
                gpus=8)
    assert (p4de.vram_mib, p4de.vram_source) == (81920, "instance-type p4de.24xlarge")
    g6f = read({"karpenter.k8s.aws/instance-gpu-name": "l4", "karpenter.k8s.aws/instance-gpu-count": "0",
                "karpenter.k8s.aws/instance-gpu-memory": "2861"})
    assert (g6f.vram_mib, g6f.labelled_count) == (2861, 0)
    amd = read({"karpenter.k8s.aws/instance-gpu-name": "radeon-pro-v520",
                "karpenter.k8s.aws/instance-gpu-manufacturer": "amd", "karpenter.k8s.aws/instance-gpu-memory": "8192",
                "node.kubernetes.io/instance-type": "g4ad.xlarge"}, gpus=0)
    assert not amd.is_gpu_node


def test_eks_accelerator_label() -> None:
    n = read({"k8s.amazonaws.com/accelerator": "nvidia-tesla-t4"})
    assert (n.vram_mib, n.vram_source) == (15360, "eks-accelerator nvidia-tesla-t4")


def test_aks_accelerator_with_and_without_a_known_vm_size() -> None:
    size = "Standard_NC24ads_A100_v4"
    a100 = read({"kubernetes.azure.com/accelerator": "nvidia", "node.kubernetes.io/instance-type": size})
    assert (a100.vram_mib, a100.labelled_count, a100.vram_source) == (81920, 1, f"instance-type {size}")
    odd = read({"kubernetes.azure.com/accelerator": "nvidia", "node.kubernetes.io/instance-type": "Standard_NX9_v9"},
               name="aks-odd")
    assert odd.is_gpu_node and odd.vram_mib == 0 and odd.vram_source == "unknown"
    assert vram_missing(odd) == ("node aks-odd: VRAM unknown (no nvidia.com/gpu.memory, "
                                 "instance type Standard_NX9_v9 not in vramgate's GPU table)")


def test_unknown_accelerator_values_are_named() -> None:
    n = read({"cloud.google.com/gke-accelerator": "nvidia-future-9000"}, name="g")
    assert n.is_gpu_node and n.vram_mib == 0 and n.product == "nvidia-future-9000"
    assert "cloud.google.com/gke-accelerator=nvidia-future-9000 not in vramgate's GPU table" in vram_missing(n)
    assert why_unknown({}) == "no nvidia.com/gpu.memory, no cloud accelerator label"


def test_cloud_gpu_answers_none_without_cloud_gpu_labels() -> None:
    assert cloud_gpu({"kubernetes.io/hostname": "x", "node.kubernetes.io/instance-type": "n2-standard-8"}) is None


# ---- precedence: GFD, then cloud, then config -------------------------------------------------

GKE_L4 = {"cloud.google.com/gke-accelerator": "nvidia-l4", "node.kubernetes.io/instance-type": "g2-standard-8"}
OWN = Config(labels=Labels(memory_labels=["example.com/gpu-mem"], product_labels=["example.com/gpu"],
                           product_memory={"RTX-4090": "24GB", "NVIDIA-A40": "46068"}))


def test_gfd_beats_cloud_beats_config() -> None:
    gfd = read({**GKE_L4, "nvidia.com/gpu.memory": "81920", "example.com/gpu-mem": "10Gi"}, config=OWN)
    assert (gfd.vram_mib, gfd.vram_source) == (81920, "gfd")
    cloud = read({**GKE_L4, "example.com/gpu-mem": "10Gi"}, config=OWN)
    assert (cloud.vram_mib, cloud.vram_source) == (23034, "gke-accelerator nvidia-l4")
    own = read({"example.com/gpu-mem": "10Gi"}, config=OWN)
    assert (own.vram_mib, own.vram_source) == (10240, "config example.com/gpu-mem")
    assert read({"example.com/gpu-mem": "10Gi"}).vram_mib == 0  # not configured: not read


def test_gfd_product_is_kept_and_cloud_fills_what_gfd_lacks() -> None:
    n = read({**GKE_L4, "nvidia.com/gpu.product": "NVIDIA-L4-custom"})
    assert (n.product, n.vram_mib, n.labelled_count) == ("NVIDIA-L4-custom", 23034, 1)


def test_config_product_memory_over_own_and_gfd_product_labels() -> None:
    own = read({"example.com/gpu": "rtx-4090"}, config=OWN)
    assert (own.vram_mib, own.product, own.vram_source) == (24576, "rtx-4090", "config example.com/gpu=rtx-4090")
    a40 = read({"nvidia.com/gpu.product": "NVIDIA-A40"}, config=OWN)
    assert (a40.vram_mib, a40.vram_source) == (46068, "config nvidia.com/gpu.product=NVIDIA-A40")
    unmapped = read({"example.com/gpu": "mystery"}, config=OWN)
    assert unmapped.is_gpu_node and unmapped.vram_mib == 0 and unmapped.vram_source == "unknown"


def test_config_rejects_a_product_memory_that_is_no_size() -> None:
    with pytest.raises(ValueError, match="product_memory"):
        Labels(product_memory={"x": "lots"})


def test_time_slicing_divides_cloud_memory_too() -> None:
    assert read({**GKE_L4, "nvidia.com/gpu.replicas": "2"}, gpus=2).vram_mib == 23034 // 2


# ---- the GKE L4 pool from issue 14 ------------------------------------------------------------


def canon_nodes() -> list[dict[str, Any]]:
    return list(yaml.safe_load((CANON / "nodes-gke-l4.yaml").read_text())["items"])


def test_canon_gke_l4_node_is_an_l4_with_22_5_gib() -> None:
    n = node_gpus(canon_nodes()[0], CFG)
    assert n.product == "NVIDIA-L4" and f"{n.vram_mib / 1024:.1f}" == "22.5"
    assert n.vram_source == "gke-accelerator nvidia-l4" and n.health == "healthy"


def test_check_admits_the_qwen_deployment_on_the_gke_l4_pool(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["check", "-f", str(CANON / "vllm-qwen7b-gke-l4.yaml"), "--nodes", str(CANON / "nodes-gke-l4.yaml")])
    out = capsys.readouterr().out
    assert code == 0 and out.startswith("ADMIT   deployment/qwen7b") and "not checked" not in out


def test_check_still_rejects_what_an_l4_cannot_hold(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_text(yaml.safe_dump(pod(container(), annotations={"vramgate.io/model-params": "70B"}, name="big")))
    code = main(["check", "-f", str(big), "--nodes", str(CANON / "nodes-gke-l4.yaml")])
    out = capsys.readouterr().out
    assert code == 1 and "the largest GPU in the cluster has 22.5 GiB (gke-l4-pool-0, NVIDIA-L4" in out


def test_nodes_shows_the_source(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["nodes", "--nodes", str(CANON / "nodes-gke-l4.yaml")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[4] == "SOURCE"
    assert lines[1].split()[3:6] == ["22.5Gi", "gke-accelerator", "nvidia-l4"]


# ---- unknown VRAM never rejects ---------------------------------------------------------------


def demand_of(params: str, gpus: int = 1):  # type: ignore[no-untyped-def]
    view = pod_view(pod(container(gpus=gpus), annotations={"vramgate.io/model-params": params}, name="llm"))
    assert view is not None
    d = read_demand(view, CFG, builtin_catalog())
    assert d is not None
    return d


UNKNOWN = {"kubernetes.azure.com/accelerator": "nvidia"}


def test_only_unknown_nodes_admit_with_a_warning_naming_what_is_missing() -> None:
    v = cluster_verdict(demand_of("70B"), [read(UNKNOWN, gpus=8, name="aks-0")])
    assert v.admit and v.code is Code.VRAM_UNKNOWN and v.best_node == "aks-0"
    assert "not checked" in v.message
    assert "node aks-0: VRAM unknown (no nvidia.com/gpu.memory, no cloud accelerator label)" in v.message
    assert "labels.memory_labels" in v.message


def test_known_too_small_plus_unknown_big_enough_admits_with_a_warning() -> None:
    small = node_gpus(gpu_node("t4", gpus=8, mem=15360, product="Tesla-T4"), CFG)
    v = cluster_verdict(demand_of("70B"), [small, read(UNKNOWN, gpus=8, name="aks-0")])
    assert v.admit and v.code is Code.VRAM_UNKNOWN and "no node of known VRAM can hold it" in v.message


def test_rejected_only_when_every_node_with_enough_gpus_is_known_and_too_small() -> None:
    small = node_gpus(gpu_node("t4", gpus=8, mem=15360, product="Tesla-T4"), CFG)
    few = read(UNKNOWN, gpus=1, name="aks-1")  # unknown VRAM, but too few GPUs for 8
    v = cluster_verdict(demand_of("405B", gpus=8), [small, few])
    assert not v.admit and v.code is Code.VRAM_TOO_SMALL and "Tesla-T4" in v.message


def test_unknown_nodes_with_too_few_gpus_reject_for_gpus_not_vram() -> None:
    v = cluster_verdict(demand_of("7B", gpus=4), [read(UNKNOWN, gpus=2, name="aks-2")])
    assert not v.admit and v.code is Code.TOO_FEW_GPUS and "VRAM unknown each" in v.message


def test_a_known_fit_needs_no_warning_even_beside_unknown_nodes() -> None:
    big = node_gpus(gpu_node("h100", gpus=8, mem=81559), CFG)
    v = cluster_verdict(demand_of("7B"), [read(UNKNOWN, gpus=8, name="aks-0"), big])
    assert v.admit and v.message == "fits" and v.best_node == "h100"


def test_extender_keeps_unknown_nodes_and_scores_them_last() -> None:
    unknown = read(UNKNOWN, gpus=8, name="aks-0")
    loose = node_gpus(gpu_node("h200", gpus=8, mem=143771), CFG)
    need = Need(1, 20 * 1024, 0.9)
    assert fit(need, unknown, free=8).fits and fits_ever(need, unknown)
    assert score(need, unknown, 8) == 0 < score(need, loose, 8)
    assert score(need, unknown, 8, "spread") == 0
    assert score(Need(1, None), unknown, 8) > 0  # no VRAM need: scored like any node


def test_the_documented_config_example_is_valid_and_does_what_it_says() -> None:
    text = (ROOT / "docs" / "install.md").read_text()
    section = text[text.index("**Your own labels.**"):text.index("**Unknown VRAM never rejects.**")]
    block = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    config = Config(**yaml.safe_load(block))
    n = read({"example.com/gpu-type": "RTX-4090"}, config=config)
    assert (n.vram_mib, n.vram_source) == (24576, "config example.com/gpu-type=RTX-4090")


def test_provisioner_requirements_name_only_gpus_that_hold_the_floor() -> None:
    from webhook.cluster.cloud import provisioner_requirements

    karpenter, gke = provisioner_requirements(40_000)
    assert karpenter == [{"key": "karpenter.k8s.aws/instance-gpu-name", "operator": "In",
                          "values": ["b200", "b300", "h100", "h200", "l40s"]},
                         {"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "Gt", "values": ["0"]}]
    assert "nvidia-tesla-a100" in gke[0]["values"] and "nvidia-l4" not in gke[0]["values"]
    assert gke[1] == {"key": "cloud.google.com/gke-gpu-partition-size", "operator": "DoesNotExist"}
    # An L4 (23034 MiB per GFD) holds 20 000 MiB; a T4 (15360) does not. Ambiguous a100/v100 are never named.
    (karpenter, _) = provisioner_requirements(20_000)
    assert "l4" in karpenter[0]["values"] and "t4" not in karpenter[0]["values"]
    assert not {"a100", "v100"} & set(karpenter[0]["values"])
    # Larger than any GPU in the table: no term (an empty In list is invalid).
    assert provisioner_requirements(10**7) == []


def test_provisioner_terms_can_be_turned_off_and_never_stack() -> None:
    from webhook.config import Admission
    from webhook.decide.mutation import vram_terms

    on = vram_terms(None, 40_000, Config())
    assert len(on) == 4
    assert vram_terms(on, 40_000, Config()) == on  # re-applied to its own output: the same terms
    off = Config(admission=Admission(provisioner_affinity=False))
    assert len(vram_terms(None, 40_000, off)) == 2
    assert vram_terms(on, 40_000, off) == vram_terms(None, 40_000, off)
