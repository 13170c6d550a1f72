"""NVIDIA Grove (grove.io): cliques as roles, a scaling group's cliques as one multi-node model instance."""

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.cli.main import main
from webhook.kinds import WorkloadError, roles

HERE = Path(__file__).resolve().parents[1] / "fixtures" / "kinds" / "grove"
NODES = Path(__file__).resolve().parents[1] / "fixtures" / "distributed" / "nodes"


def one(name: str) -> dict[str, Any]:
    (doc,) = [d for d in yaml.safe_load_all((HERE / name).read_text()) if d]
    return doc


def test_scaling_groups_are_one_instance_and_multiply_replicas() -> None:
    rs = roles(one("multi-node-disaggregated.yaml"))
    assert rs is not None and rs.grouped
    got = {r.name: (r.group_size, r.replicas) for r in rs.roles}
    # prefill: 2 replicas of (1 leader + 4 workers); decode: 1 replica of (1 leader + 2 workers).
    assert got == {"pleader": (5, 2), "pworker": (5, 8), "dleader": (3, 1), "dworker": (3, 2)}
    env = rs.roles[1].view.spec["containers"][0]["env"]
    assert {"name": "GROVE_PCSG_TEMPLATE_NUM_PODS", "value": "5"} in env
    assert "env" not in one("multi-node-disaggregated.yaml")["spec"]["template"]["cliques"][1]["spec"]["podSpec"][
        "containers"][0]  # the object is not changed


def _vllm(args: list[str], gpus: int) -> dict[str, Any]:
    return {"name": "main", "image": "vllm/vllm-openai:v0.11.0", "command": ["vllm", "serve", *args],
            "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}


def test_a_gpu_podcliqueset_is_judged_on_its_group(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pcs = one("multi-node-disaggregated.yaml")
    cliques = pcs["spec"]["template"]["cliques"]
    tp_pp = ["meta-llama/Llama-3.1-70B-Instruct", "--tensor-parallel-size", "8", "--pipeline-parallel-size", "2"]
    cliques[0]["spec"]["podSpec"]["containers"] = [_vllm(tp_pp, 8)]
    cliques[1]["spec"]["podSpec"]["containers"] = [_vllm(tp_pp, 8)]
    cliques[1]["spec"]["replicas"] = 1
    cliques[2]["spec"]["podSpec"]["containers"] = [_vllm(["Qwen/Qwen3-8B"], 1)]
    cliques[2]["spec"]["replicas"] = 2
    del cliques[3]
    pcs["spec"]["template"]["podCliqueScalingGroups"] = [{"name": "prefill", "cliqueNames": ["pleader", "pworker"]}]
    path = tmp_path / "pcs.yaml"
    path.write_text(yaml.safe_dump(pcs))
    code = main(["check", "-f", str(path), "--nodes", str(NODES / "h100x8.yaml")])
    out = capsys.readouterr().out
    assert code == 0, out
    # 70B over TP 8 × PP 2 on two 8-GPU pods: a share per GPU; the standalone clique a whole 8B on one GPU.
    assert out.count("ADMIT") == 3 and "REJECT" not in out, out
    assert "no VRAM estimate" not in out, out
    rs = roles(pcs)
    assert rs is not None and [r.group_size for r in rs.roles] == [2, 2, 1]


def test_clique_objects_and_scaling_groups() -> None:
    pcs = one("mnnvl-gpu-default.yaml")
    clique = {"apiVersion": "grove.io/v1alpha1", "kind": "PodClique", "metadata": {"name": "c", "labels": {}},
              "spec": copy.deepcopy(pcs["spec"]["template"]["cliques"][0]["spec"])}
    rs = roles(clique)
    assert rs is not None and [(r.name, r.group_size, r.replicas) for r in rs.roles] == [("gpu-worker", 1, 1)]
    clique["metadata"]["labels"]["grove.io/podcliquescalinggroup"] = "pcs-0-prefill"
    rs = roles(clique)
    assert rs is not None and rs.roles == () and "member of scaling group pcs-0-prefill" in rs.warnings[0]
    sg = {"apiVersion": "grove.io/v1alpha1", "kind": "PodCliqueScalingGroup", "metadata": {"name": "g"},
          "spec": {"replicas": 1, "cliqueNames": ["a"]}}
    rs = roles(sg)
    assert rs is not None and rs.roles == () and "holds no pods" in rs.warnings[0]


def test_malformed_podcliquesets_are_said_so() -> None:
    pcs = one("multi-node-disaggregated.yaml")
    pcs["spec"]["template"]["podCliqueScalingGroups"][0]["cliqueNames"] = ["nope"]
    with pytest.raises(WorkloadError, match="names no clique: nope"):
        roles(pcs)
    with pytest.raises(WorkloadError, match="cliques is missing"):
        roles({"apiVersion": "grove.io/v1alpha1", "kind": "PodCliqueSet", "spec": {}})
