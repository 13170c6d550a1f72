"""The audit's pure parts: which objects are judged (owners resolved), pass/warn/fail, report shaping
(cap, summary, no churn), explain, and the offline CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.advise.explain import explain, render
from webhook.audit.audit import AuditResult, WorkloadRef, audit, capabilities, workloads
from webhook.audit.reports import OPEN_REPORT, TRUNCATED, desired_report, failing_in
from webhook.cli.main import main
from webhook.cluster.snapshot import snapshot_from_nodes
from webhook.config import Config
from webhook.models.catalog import builtin_catalog

from .helpers import container, deployment, gpu_node, pod

CFG = Config()
CAT = builtin_catalog()
SMALL = container(env={"MODEL_NAME": "llama-3-8b-instruct"})  # ~17 GiB
BIG = container(env={"MODEL_NAME": "llama-3-70b-instruct"}, gpus=2)  # ~70 GiB per GPU on 2


def snap(*nodes: dict[str, Any]) -> Any:
    return snapshot_from_nodes(list(nodes), CFG)


def owned(obj: dict[str, Any], kind: str, name: str, uid: str | None = None) -> dict[str, Any]:
    ref: dict[str, Any] = {"kind": kind, "name": name, "controller": True, "apiVersion": "apps/v1"}
    if uid:
        ref["uid"] = uid
    obj["metadata"]["ownerReferences"] = [ref]
    return obj


def test_owned_objects_are_judged_once_as_their_owner() -> None:
    d = deployment(SMALL, name="llama")
    d["metadata"]["uid"] = "d1"
    rs = owned(deployment(SMALL, name="llama-5d4", kind="ReplicaSet"), "Deployment", "llama", "d1")
    rs["metadata"]["uid"] = "rs1"
    p = owned(pod(SMALL, name="llama-5d4-x"), "ReplicaSet", "llama-5d4", "rs1")
    done = pod(SMALL, name="old")
    done["status"] = {"phase": "Succeeded"}
    orphan = owned(pod(SMALL, name="from-an-operator"), "Widget", "w", "w1")  # its owner is not listed
    got = workloads([d, rs, p, done, orphan, {"kind": "ConfigMap", "metadata": {"name": "c"}}])
    assert [(o["kind"], o["metadata"]["name"]) for o in got] == [("Deployment", "llama"), ("Pod", "from-an-operator")]
    # Manifests have no uids: owners are matched by kind, namespace and name.
    p2 = owned(pod(SMALL, name="llama-x"), "Deployment", "llama")
    assert [o["metadata"]["name"] for o in workloads([deployment(SMALL, name="llama"), p2])] == ["llama"]


def test_pass_fail_and_warn_when_the_only_big_node_is_down() -> None:
    objs = [deployment(SMALL, name="small"), deployment(BIG, name="big"), deployment(container(gpus=None), name="cpu")]
    healthy = snap(gpu_node("a100", mem=81920), gpu_node("t4", gpus=1, mem=16384, product="Tesla-T4"))
    results = {r.workload.name: r for r in audit(objs, healthy, CFG, CAT)}
    assert set(results) == {"small", "big"}  # the CPU deployment is not a GPU workload
    assert results["small"].result == "pass" and results["small"].best_node == "a100"
    assert results["big"].result == "pass" and results["big"].need.startswith("2 × ")

    gone = snap(gpu_node("t4", gpus=1, mem=16384, product="Tesla-T4"))
    results = {r.workload.name: r for r in audit(objs, gone, CFG, CAT)}
    assert results["big"].result == "fail" and results["big"].code == "VRAMTooSmall"
    assert results["big"].message.startswith("deployment/big: needs")  # admission's own message
    assert results["small"].result == "fail"

    faulty = snap(gpu_node("a100", mem=81920, allocatable=0), gpu_node("t4", gpus=1, mem=16384, product="Tesla-T4"))
    results = {r.workload.name: r for r in audit(objs, faulty, CFG, CAT)}
    assert results["small"].result == "warn" and results["small"].code == "GPUFault"
    assert "no GPU node can take it now" in results["small"].message
    # The only node that could take it is tainted for another team: at risk too.
    tainted = snap(gpu_node("a100", taints=[{"key": "team", "value": "x", "effect": "NoSchedule"}]),
                   gpu_node("t4", gpus=1, mem=16384))
    results = {r.workload.name: r for r in audit(objs, tainted, CFG, CAT)}
    assert results["small"].result == "warn" and results["small"].code == "Taint"


def test_enforcement_off_is_skipped_and_warn_namespaces_are_judged() -> None:
    objs = [deployment(BIG, name="big")]
    small = snap(gpu_node("t4", gpus=1, mem=16384))
    assert audit(objs, small, CFG, CAT, enforcement={"ml": "off"})[0].result == "skip"
    assert audit(objs, small, CFG, CAT, enforcement={"ml": "warn"})[0].result == "fail"


def test_capabilities_ignore_free_gpus_but_not_labels_or_health() -> None:
    a = snapshot_from_nodes([gpu_node("n")], CFG)
    b = snapshot_from_nodes([gpu_node("n")], CFG, used={"n": 3})
    assert capabilities(a) == capabilities(b)
    assert capabilities(a) != capabilities(snap(gpu_node("n", labels={"pool": "x"})))
    assert capabilities(a) != capabilities(snap(gpu_node("n", allocatable=0)))
    assert capabilities(a) != capabilities(snap(gpu_node("n", driver=470)))


def result(name: str, res: str = "fail", msg: str = "m", ns: str = "ml") -> AuditResult:
    return AuditResult(WorkloadRef("apps/v1", "Deployment", ns, name, f"uid-{name}"), res,  # type: ignore[arg-type]
                       "VRAMTooSmall" if res == "fail" else "fits", msg if res != "pass" else "", "1 × 20 GiB", "a100")


def test_report_lists_failures_first_counts_passes_and_caps() -> None:
    rows = [result(f"f{i}") for i in range(7)] + [result("w", "warn")] + [result(f"p{i}", "pass") for i in range(5)]
    body = desired_report("ml", rows, max_results=4, now=100)
    assert body is not None
    assert body["apiVersion"] == "wgpolicyk8s.io/v1alpha2" and body["kind"] == "PolicyReport"
    assert body["metadata"]["name"] == "vramgate" and body["metadata"]["namespace"] == "ml"
    assert body["summary"] == {"pass": 5, "fail": 7, "warn": 1, "error": 0, "skip": 0}
    assert len(body["results"]) == 4 and {r["result"] for r in body["results"]} == {"fail"}
    assert body["metadata"]["annotations"][TRUNCATED] == "4"  # 8 listable, 4 listed
    first = body["results"][0]
    assert first["policy"] == "vramgate" and first["rule"] == "VRAMTooSmall" and first["message"] == "m"
    assert first["resources"] == [{"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "ml", "name": "f0",
                                   "uid": "uid-f0"}]
    assert first["properties"] == {"need": "1 × 20 GiB", "bestNode": "a100"}
    assert first["timestamp"] == {"seconds": 100, "nanos": 0}
    assert all(isinstance(v, str) for r in body["results"] for v in r["properties"].values())
    uncapped = desired_report("ml", rows, max_results=100, now=100)
    assert uncapped is not None and [r["result"] for r in uncapped["results"]][-1] == "warn"
    assert "annotations" not in uncapped["metadata"]


def test_an_unchanged_report_is_not_rewritten_and_unchanged_results_keep_their_stamp() -> None:
    rows = [result("a"), result("b")]
    first = desired_report("ml", rows, now=100)
    assert first is not None
    # As the API server returns it: keys in its own order, metadata filled in.
    stored = json.loads(json.dumps(first, sort_keys=True))
    stored["metadata"] = {**stored["metadata"], "resourceVersion": "7", "uid": "u"}
    for entry in stored["results"]:
        entry["resources"] = [dict(reversed(list(r.items()))) for r in entry["resources"]]
    assert desired_report("ml", rows, now=200, previous=stored) is None  # nothing changed: no write
    # b's message changes: only b gets a new stamp.
    second = desired_report("ml", [result("a"), result("b", msg="other")], now=300, previous=stored)
    assert second is not None
    stamps = {r["resources"][0]["name"]: r["timestamp"]["seconds"] for r in second["results"]}
    assert stamps == {"a": 100, "b": 300}
    # A pass that turns to fail changes the summary and the results.
    third = desired_report("ml", [*rows, result("c", "pass")], now=400, previous=stored)
    assert third is not None and third["summary"]["pass"] == 1 and len(third["results"]) == 2
    assert failing_in(stored) == {("ml", "Deployment", "a"), ("ml", "Deployment", "b")}


def test_openreports_shape() -> None:
    body = desired_report("ml", [result("a")], api=OPEN_REPORT, now=1)
    assert body is not None and body["apiVersion"] == "openreports.io/v1alpha1" and body["kind"] == "Report"


def test_explain_groups_nodes_and_names_the_change() -> None:
    d = deployment(SMALL, name="llama")
    s = snap(gpu_node("a100", allocatable=0), gpu_node("t4", gpus=1, mem=16384, product="Tesla-T4"),
             gpu_node("l4", gpus=1, mem=24576, product="NVIDIA-L4",
                      taints=[{"key": "team", "value": "x", "effect": "NoSchedule"}]))
    e = explain(d, s, CFG, CAT, events=["FailedScheduling pod/llama-1: 0/3 nodes are available"])
    assert e.allowed
    role = e.roles[0]
    codes = {code: [n.node for n in nodes] for code, nodes in role.groups()}
    assert codes == {"Taint": ["l4"], "GPUFault": ["a100"], "VRAMTooSmall": ["t4"]}
    assert e.fix == "tolerate team=x:NoSchedule (then it fits on l4)"
    text = render(e)
    assert "model: env MODEL_NAME → catalog llama-3-8b-instruct" in text
    assert "FailedScheduling pod/llama-1" in text

    sel = deployment(SMALL, name="pinned")
    sel["spec"]["template"]["spec"]["nodeSelector"] = {"pool": "t4"}
    e = explain(sel, snap(gpu_node("a100"), gpu_node("t4", gpus=1, mem=16384, labels={"pool": "t4"})), CFG, CAT)
    assert "remove or widen its node selector" in e.fix

    big = deployment(BIG, name="big")
    e = explain(big, snap(gpu_node("t4", gpus=2, mem=16384)), CFG, CAT)
    assert not e.allowed and "GiB per GPU" in e.fix  # admission's first fix, re-estimated


def write(path: Path, *objs: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump_all(objs))
    return path


def test_cli_audit_offline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nodes = write(tmp_path / "nodes.yaml", gpu_node("t4", gpus=1, mem=16384, product="Tesla-T4"))
    (tmp_path / "m").mkdir()
    write(tmp_path / "m" / "a.yaml", deployment(BIG, name="big"))
    write(tmp_path / "m" / "b.yml", deployment(container(env={"MODEL_NAME": "qwen2.5-0.5b-instruct"}), name="tiny"))
    assert main(["audit", "--nodes", str(nodes), "-f", str(tmp_path / "m")]) == 1
    out = capsys.readouterr().out
    assert "deployment/big" in out and "FAIL" in out and "VRAMTooSmall" in out and "PASS" in out
    assert "1 pass, 0 warn, 1 fail, 0 skip" in out
    assert main(["audit", "--nodes", str(nodes), "-f", str(tmp_path / "m" / "b.yml"), "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["summary"]["pass"] == 1 and doc["workloads"][0]["name"] == "tiny"
    assert doc["workloads"][0]["bestNode"] == "t4"
    assert main(["audit", "--nodes", str(nodes)]) == 2
    assert "needs -f" in capsys.readouterr().err


def test_cli_explain_offline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nodes = write(tmp_path / "nodes.yaml", gpu_node("t4", gpus=1, mem=16384, product="Tesla-T4"))
    files = write(tmp_path / "w.yaml", deployment(BIG, name="big"))
    assert main(["explain", "deploy/big", "--nodes", str(nodes), "-f", str(files)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("deployment/big (namespace ml)") and "TooFewGPUs (1):" in out
    assert "change that would place it:" in out
    assert main(["explain", "deployment", "big", "--nodes", str(nodes), "-f", str(files), "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["admitted"] is False and list(doc["roles"][0]["nodes"]) == ["TooFewGPUs"]
    assert main(["explain", "deployment/nope", "--nodes", str(nodes), "-f", str(files)]) == 2
    assert main(["explain", "widget/x", "--nodes", str(nodes), "-f", str(files)]) == 2
    assert "unknown kind" in capsys.readouterr().err


def test_cli_live_without_credentials_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert main(["audit", "-A"]) == 2
    assert "cannot reach a cluster" in capsys.readouterr().err


def test_kubectl_plugin_entry_point(tmp_path: Path) -> None:
    import subprocess
    import sys

    exe = Path(sys.executable).parent / "kubectl-vramgate"
    nodes = write(tmp_path / "nodes.yaml", gpu_node("t4", gpus=1, mem=16384, product="Tesla-T4"))
    files = write(tmp_path / "w.yaml", deployment(BIG, name="big"))
    out = subprocess.run([str(exe), "explain", "deployment/big", "--nodes", str(nodes), "-f", str(files)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "TooFewGPUs" in out.stdout, out.stderr


def test_krew_manifest_names_the_plugin_binary() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "krew" / "vramgate.yaml").read_text()
    doc = yaml.safe_load(text.replace("{{addURIAndSha", "#").replace("{{ .TagName }}", "v0.1.0"))
    assert doc["kind"] == "Plugin" and doc["metadata"]["name"] == "vramgate"
    assert doc["spec"]["platforms"][0]["bin"] == "kubectl-vramgate"
    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert 'kubectl-vramgate = "webhook.cli.plugin:main"' in pyproject


def test_explain_does_not_blame_the_gpus_its_own_pods_hold() -> None:
    s = snapshot_from_nodes([gpu_node("l4", gpus=1, mem=24576, product="NVIDIA-L4")], CFG, used={"l4": 1})
    e = explain(deployment(SMALL, name="llama"), s, CFG, CAT, placed={"llama-5d4-x": "l4"})
    assert e.fix.startswith("none needed for its running pods (on l4)")
    assert "llama-5d4-x → l4" in render(e)
    e = explain(deployment(SMALL, name="llama"), s, CFG, CAT)
    assert e.fix.startswith("wait for or free 1 GPU(s) on l4")


def test_docs_examples_give_what_docs_audit_md_shows(capsys: pytest.CaptureFixture[str]) -> None:
    root = Path(__file__).resolve().parents[2]
    ex = root / "examples" / "audit"
    assert main(["audit", "--nodes", str(ex / "nodes-degraded.yaml"), "-f", str(ex), "-o", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    got = {w["name"]: (w["result"], w["reason"]) for w in doc["workloads"]}
    assert got == {"llama": ("warn", "GPUFault"), "qwen-72b": ("fail", "VRAMTooSmall")}
    assert main(["explain", "deploy/llama", "-n", "ml", "--nodes", str(ex / "nodes-degraded.yaml"), "-f", str(ex)]) == 0
    out = capsys.readouterr().out
    assert "change that would place it: tolerate team=vision:NoSchedule (then it fits on gpu-l4-0)" in out
    assert out.strip() in (root / "docs" / "audit.md").read_text()


def _best_node_reference(demand: Any, snapshot: Any) -> tuple[str, str | None, str]:
    """The per-node scan best_node replaced: every node judged on its own, the first best score wins."""
    from webhook.advise.explain import node_outcome
    from webhook.decide.placement import Code, Need, score

    size = {str(Code.VRAM_TOO_SMALL), str(Code.TOO_FEW_GPUS)}
    need, best, miss = Need.of(demand), None, None
    for n in snapshot.by_vram:
        o = node_outcome(demand, n, snapshot.free_gpus(n.name), "nvidia.com/gpu")
        if o.code in (str(Code.FITS), str(Code.GPUS_BUSY)):
            s = score(need, n, n.allocatable, demand.placement or "binpack")
            if best is None or s > best[0]:
                best = (s, n.name)
        elif miss is None or (miss[1] in size and o.code not in size):
            miss = (n.name, o.code, o.reason)
    if best is not None:
        return best[1], None, ""
    return miss if miss is not None else ("", None, "")


def test_best_node_judges_each_class_once_and_agrees_with_a_scan_of_every_node() -> None:
    from webhook.audit.audit import best_node
    from webhook.decide.verdict import judge

    from ..extender.cluster import bound_pod

    taint = [{"key": "team", "value": "a", "effect": "NoSchedule"}]
    nodes = []
    for i in range(300):
        kind = i % 6
        labels = {"zone": f"z{i % 3}"}
        if kind == 0:
            nodes.append(gpu_node(f"h{i:03d}", mem=81920, product="NVIDIA-H100-80GB-HBM3", labels=labels))
        elif kind == 1:
            nodes.append(gpu_node(f"a{i:03d}", mem=40960, labels=labels, taints=taint if i % 4 == 1 else None))
        elif kind == 2:
            nodes.append(gpu_node(f"l{i:03d}", gpus=4, mem=23034, product="NVIDIA-L4", labels=labels))
        elif kind == 3:
            nodes.append(gpu_node(f"t{i:03d}", gpus=1, mem=15360, product="Tesla-T4", labels=labels))
        elif kind == 4:
            nodes.append(gpu_node(f"d{i:03d}", mem=81920, allocatable=6, labels=labels,
                                  conditions=[{"type": "GPUHealthy", "status": "False"}]))
        else:
            nodes.append(gpu_node(f"o{i:03d}", mem=24576, driver=470, product="NVIDIA-A10G", labels=labels))
    busy = [bound_pod(f"b{i}", nodes[i]["metadata"]["name"], 8, rv=10 + i) for i in range(0, 300, 12)]
    used: dict[str, int] = {}
    for b in busy:
        used[b["spec"]["nodeName"]] = 8
    snapshot = snapshot_from_nodes(nodes, CFG, used=used)
    assert len(snapshot.class_members[0]) < 20  # the premise: a few classes for many nodes
    cases = [
        pod(SMALL), pod(BIG), pod(SMALL, nodeSelector={"zone": "z2"}), pod(SMALL, nodeSelector={"zone": "nowhere"}),
        pod(container(env={"MODEL_NAME": "llama-3-70b-instruct"}, gpus=8)),
        pod(SMALL, tolerations=[{"key": "team", "operator": "Exists"}]),
        pod(container(gpus=1, env={"MODEL_NAME": "llama-3-8b-instruct"}),
            annotations={"vramgate.io/placement": "spread"}),
        deployment(SMALL, name="tmpl"),
        pod(container(gpus=16, env={"MODEL_NAME": "llama-3-8b-instruct"})),
    ]
    for obj in cases:
        demand = judge(obj, snapshot, CFG, CAT, namespace="ml").demand
        assert demand is not None
        assert best_node(demand, snapshot) == _best_node_reference(demand, snapshot), obj
