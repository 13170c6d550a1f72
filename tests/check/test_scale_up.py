"""`vramgate check` and /validate on a cluster that can scale up (issue #42, "Fits after scale-up").

Two L4 nodes are up; a 70B fp8 model needs ~71 GiB per GPU. With a Karpenter NodePool that can add H100s it is
admitted with a warning naming the pool and the instance type; without one it is rejected; with the pool at its
``nvidia.com/gpu`` limit it is rejected, saying the pool is full. Text and ``-o json`` say the same.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.cli.main import main
from webhook.cluster.snapshot import snapshot_from_nodes
from webhook.config import Config
from webhook.decide.verdict import judge
from webhook.kube.manifests import load_inventory
from webhook.models.catalog import builtin_catalog

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "scaleup"
WORKLOAD = yaml.safe_load("""
apiVersion: apps/v1
kind: Deployment
metadata: {name: llama-70b, namespace: ml}
spec:
  selector: {matchLabels: {app: llama-70b}}
  template:
    metadata: {labels: {app: llama-70b}}
    spec:
      containers:
      - name: vllm
        image: vllm/vllm-openai:v0.10.1
        args: ["--model", "meta-llama/Llama-3.1-70B-Instruct", "--max-model-len", "8192", "--quantization", "fp8"]
        resources: {limits: {nvidia.com/gpu: "1"}}
""")


def check(capsys: pytest.CaptureFixture[str], tmp_path: Path, inventory: str, *extra: str) -> tuple[int, str]:
    manifest = tmp_path / "w.yaml"
    manifest.write_text(yaml.safe_dump(WORKLOAD))
    code = main(["check", "-f", str(manifest), "--nodes", str(FIX / inventory), *extra])
    return code, capsys.readouterr().out


def both(capsys: pytest.CaptureFixture[str], tmp_path: Path, inventory: str) -> tuple[int, str, dict[str, Any]]:
    code, text = check(capsys, tmp_path, inventory)
    jcode, out = check(capsys, tmp_path, inventory, "-o", "json")
    (result,) = json.loads(out)["results"]
    assert jcode == code and (result["verdict"] == "admit") == (code == 0)  # the two forms agree
    return code, text, result


def test_an_h100_nodepool_admits_what_no_l4_node_holds(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, text, result = both(capsys, tmp_path, "pool-h100.yaml")
    assert code == 0 and text.startswith("ADMIT")
    said = "no node holds it now (needs 70.6 GiB VRAM per GPU on 1 GPU of one node); NodePool gpu-h100 can add " \
           "p5.48xlarge (8× NVIDIA-H100-80GB-HBM3, 79.6 GiB each)"
    assert said in text
    assert any(said in w for w in result["warnings"])
    assert "gpu-l4" not in text  # the L4 pool's GPUs hold it no better than its nodes


def test_without_a_pool_that_adds_a_larger_gpu_it_is_rejected(capsys: pytest.CaptureFixture[str],
                                                               tmp_path: Path) -> None:
    code, text, result = both(capsys, tmp_path, "pool-l4-only.yaml")
    assert code == 1 and text.startswith("REJECT") and result["code"] == "VRAMTooSmall"
    assert "the largest GPU in the cluster has 22.5 GiB" in text and "NodePool" not in text


def test_a_pool_at_its_gpu_limit_does_not_count_and_the_rejection_says_it_is_full(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, text, result = both(capsys, tmp_path, "pool-h100-full.yaml")
    assert code == 1 and result["code"] == "VRAMTooSmall"
    assert ("NodePool gpu-h100 could add p5.48xlarge (8× NVIDIA-H100-80GB-HBM3, 79.6 GiB each), but it is full "
            "(8 of its nvidia.com/gpu limit 8 in use): raise its spec.limits") in text
    assert "full" in result["message"]


def test_admission_gives_the_verdict_check_gives() -> None:
    config = Config()
    for inventory, allowed in (("pool-h100.yaml", True), ("pool-l4-only.yaml", False), ("pool-h100-full.yaml", False)):
        nodes, extra = load_inventory(FIX / inventory)
        j = judge(WORKLOAD, snapshot_from_nodes(nodes, config, dra=extra), config, builtin_catalog())
        assert j.allowed is allowed, inventory
        assert any("NodePool gpu-h100 can add" in w for w in j.warnings) is allowed


def test_a_workload_a_node_holds_never_reads_the_pools(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    small = yaml.safe_load(yaml.safe_dump(WORKLOAD).replace("Llama-3.1-70B-Instruct", "Llama-3.1-8B-Instruct"))
    config = Config()
    nodes, extra = load_inventory(FIX / "pool-h100.yaml")
    snap = snapshot_from_nodes(nodes, config, dra=extra)
    j = judge(small, snap, config, builtin_catalog())
    assert j.allowed and not any("NodePool" in w for w in j.warnings)
    assert "scale_up" not in snap.__dict__  # the pools' offers were never worked out


def test_a_pool_whose_taint_the_pod_does_not_tolerate_does_not_count() -> None:
    config = Config()
    nodes, extra = load_inventory(FIX / "pool-h100.yaml")
    for obj in extra:  # gpu-h100 also keeps its nodes for one team
        if obj["metadata"]["name"] == "gpu-h100":
            obj["spec"]["template"]["spec"]["taints"].append({"key": "team", "value": "llm", "effect": "NoSchedule"})
    snap = snapshot_from_nodes(nodes, config, dra=extra)
    j = judge(WORKLOAD, snap, config, builtin_catalog())
    assert not j.allowed
    assert "NodePool gpu-h100 could add p5.48xlarge" in j.message
    assert "the pod does not tolerate its taint team=llm:NoSchedule" in j.message
    # Its nvidia.com/gpu taint is the one the mutation tolerates; with team=llm tolerated too it counts.
    tolerant = yaml.safe_load(yaml.safe_dump(WORKLOAD))
    tolerant["spec"]["template"]["spec"]["tolerations"] = [{"key": "team", "operator": "Equal", "value": "llm"}]
    assert judge(tolerant, snap, config, builtin_catalog()).allowed


@pytest.mark.parametrize(("selector", "affinity", "allowed"), [
    ({"karpenter.sh/nodepool": "gpu-l4"}, None, False),  # pinned to the L4 pool: the H100 pool never serves it
    ({"karpenter.sh/nodepool": "gpu-h100"}, None, True),
    ({"topology.kubernetes.io/zone": "us-east-1a"}, None, True),  # a key the pool leaves open never excludes it
    (None, [{"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["p4d"]}], False),
    (None, [{"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "Gt", "values": ["4"]}], True),
])
def test_the_pods_own_selector_must_be_one_the_pool_can_meet(selector: dict[str, str] | None,
                                                              affinity: list[dict[str, Any]] | None,
                                                              allowed: bool) -> None:
    config = Config()
    nodes, extra = load_inventory(FIX / "pool-h100.yaml")
    w = yaml.safe_load(yaml.safe_dump(WORKLOAD))
    spec = w["spec"]["template"]["spec"]
    if selector:
        spec["nodeSelector"] = selector
    if affinity:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": affinity}]}}}
    j = judge(w, snapshot_from_nodes(nodes, config, dra=extra), config, builtin_catalog())
    assert j.allowed is allowed, j.message


def test_a_malformed_nodepool_in_the_nodes_file_is_a_clear_error(capsys: pytest.CaptureFixture[str],
                                                                   tmp_path: Path) -> None:
    bad = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "bad"}, "spec": {"template": {
        "spec": {"requirements": [{"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "Gt",
                                   "values": ["many"]}]}}}}
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text((FIX / "pool-l4-only.yaml").read_text() + "---\n" + yaml.safe_dump(bad))
    manifest = tmp_path / "w.yaml"
    manifest.write_text(yaml.safe_dump(WORKLOAD))
    assert main(["check", "-f", str(manifest), "--nodes", str(inventory)]) == 2
    err = capsys.readouterr().err
    assert "NodePool bad: requirement karpenter.k8s.aws/instance-gpu-count Gt: needs one integer value" in err
    assert "Traceback" not in err
