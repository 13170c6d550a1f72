"""`vramgate check -o json` carries what /mutate applies, and it is what the running webhook applies (issue 41)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonpatch
import jsonschema
import pytest
import yaml

from webhook.cli.main import main
from webhook.config import Config
from webhook.decide.verdict import judge
from webhook.models.catalog import builtin_catalog

from .helpers import EXAMPLES, Service, cluster, gpu_container, k8s_valid, pod_of, workload

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "docs" / "check-output.schema.json").read_text())
NODES = str(EXAMPLES / "cluster.yaml")
VRAMGATE_TOLERATION = "nvidia.com/gpu"


def check_json(capsys: pytest.CaptureFixture[str], path: Path) -> list[dict[str, Any]]:
    main(["check", "-f", str(path), "--nodes", NODES, "-o", "json"])
    doc = json.loads(capsys.readouterr().out)
    jsonschema.validate(doc, SCHEMA, cls=jsonschema.Draft202012Validator)
    return list(doc["results"])


def write(tmp_path: Path, *objs: dict[str, Any]) -> Path:
    path = tmp_path / "manifests.yaml"
    path.write_text(yaml.safe_dump_all(objs, sort_keys=False), encoding="utf-8")
    return path


def vramgate_parts(pod: dict[str, Any]) -> dict[str, Any]:
    """What vramgate writes into a Pod, apart from what kube-apiserver defaults around it."""
    spec = pod["spec"]
    return {
        "annotations": {k: v for k, v in (pod["metadata"].get("annotations") or {}).items()
                        if k.startswith("vramgate.io/")},
        "affinity": spec.get("affinity"),
        "priorityClassName": spec.get("priorityClassName"),
        "tolerations": sorted(json.dumps(t, sort_keys=True) for t in spec.get("tolerations") or []
                              if t.get("key") == VRAMGATE_TOLERATION),
        "containers": [{"env": c.get("env"), "resources": c.get("resources")} for c in spec["containers"]],
    }


def test_a_deployments_pods_get_what_the_running_webhook_gives_them(
        svc: Service, capsys: pytest.CaptureFixture[str]) -> None:
    deployment = yaml.safe_load((EXAMPLES / "llama3-8b-deployment.yaml").read_text())
    [result] = check_json(capsys, EXAMPLES / "llama3-8b-deployment.yaml")
    assert result["verdict"] == "admit"
    mutation = result["mutation"]
    assert mutation["object"] == []  # /mutate leaves Deployments alone; their pods are what it patches
    assert {op["path"] for op in mutation["pods"]} >= {"/spec/affinity", "/spec/containers/0/env"}
    # The pod as its ReplicaSet creates it, patched as check says, against what the real /mutate makes of it
    # (kube-apiserver's defaults around it differ, so the comparison is of what vramgate writes).
    template = deployment["spec"]["template"]
    bare = {"apiVersion": "v1", "kind": "Pod", "metadata": {**copy.deepcopy(template["metadata"]), "namespace": "ml"},
            "spec": copy.deepcopy(template["spec"])}
    from_check = jsonpatch.apply_patch(bare, mutation["pods"])
    served, _ = svc.mutate(pod_of(deployment))
    assert vramgate_parts(from_check) == vramgate_parts(served)
    # Re-judged as the webhook judges the pod: admitted, with the same need.
    again = judge(from_check, cluster(), Config(), builtin_catalog())
    assert again.allowed and again.demand is not None
    assert again.demand.per_gpu_mib == result["estimate"]["per_gpu_mib"]


def test_a_pod_and_a_job_carry_the_webhooks_own_patch(
        svc: Service, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    env = {"MODEL_NAME": "llama-3-8b-instruct"}
    pod = workload("Pod", gpu_container(env=env), name="p")
    job = workload("Job", gpu_container(env=env), name="j")
    pod_result, job_result = check_json(capsys, write(tmp_path, pod, job))
    # A Pod: the object is the pod, and the patch is the running webhook's, operation for operation.
    assert pod_result["mutation"]["object"] == pod_result["mutation"]["pods"] != []
    _, resp = svc.mutate(pod)
    from tests.admission.helpers import patch_ops

    assert pod_result["mutation"]["object"] == patch_ops(resp)
    patched = jsonpatch.apply_patch(pod, pod_result["mutation"]["object"])
    k8s_valid(patched)
    # A batch Job: the Job gets its failure policy for device faults, its pods the placement.
    _, job_resp = svc.mutate(job)
    assert job_result["mutation"]["object"] == patch_ops(job_resp)
    assert any(op["path"].startswith("/spec/podFailurePolicy") for op in job_result["mutation"]["object"])
    assert any(op["path"] == "/spec/affinity" for op in job_result["mutation"]["pods"])
    k8s_valid(jsonpatch.apply_patch(job, job_result["mutation"]["object"]))


def test_a_rejected_workload_has_no_mutation(capsys: pytest.CaptureFixture[str]) -> None:
    [result] = check_json(capsys, EXAMPLES / "llama70b-one-gpu.yaml")
    assert result["verdict"] == "reject" and "mutation" not in result


def test_text_and_junit_do_not_pay_for_it(capsys: pytest.CaptureFixture[str]) -> None:
    main(["check", "-f", str(EXAMPLES / "llama3-8b-deployment.yaml"), "--nodes", NODES, "-o", "yaml"])
    assert "mutation" in yaml.safe_load(capsys.readouterr().out)["results"][0]
    main(["check", "-f", str(EXAMPLES / "llama3-8b-deployment.yaml"), "--nodes", NODES, "-o", "junit"])
    assert "vramgate.io~1" not in capsys.readouterr().out
