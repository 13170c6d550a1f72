"""AdmissionReview v1 on the wire: echo, denial shape, operations, UPDATE diffing, dryRun, the seed examples."""

from __future__ import annotations

import copy

from .conftest import use
from .helpers import Service, cluster, example, gpu_container, review, workload


def test_llama3_deployment_admitted_on_sample_cluster(svc: Service) -> None:
    resp = svc.validate(example("llama3-8b-deployment.yaml"))
    assert resp["allowed"] is True
    assert "status" not in resp and "patch" not in resp


def test_seed_deployment_rejected_on_small_cluster_with_contract_message(svc: Service) -> None:
    use(svc, snapshot=cluster("cluster-small.yaml"))
    resp = svc.validate(example("seed-deployment.yaml"))
    assert resp["allowed"] is False
    assert resp["status"]["code"] == 403
    msg = resp["status"]["message"]
    # CONTRACT §6: <workload>: needs <X> GiB VRAM per GPU (<breakdown>); the largest GPU in the cluster has <Y> GiB
    # (<node>, <product>). Try: <fixes>
    assert msg.startswith("deployment/llm-15b: needs ")
    assert " GiB VRAM per GPU (weights 27.9 GiB (15B × fp16)" in msg
    assert "the largest GPU in the cluster has 4 GiB (gpu-" in msg
    assert ". Try: " in msg
    # The memory limit is below what staging fp16 weights needs: a warning rides along.
    assert any("memory limit 32Gi" in w for w in resp["warnings"])


def test_seed_deployment_admitted_on_sample_cluster(svc: Service) -> None:
    assert svc.validate(example("seed-deployment.yaml"))["allowed"] is True


def test_response_echoes_uid_and_envelope(svc: Service) -> None:
    body = review(example("llama3-8b-deployment.yaml"), uid="0df28fbd-5f5f-4d8b-a1b7-6c8f3d3c1a2e")
    r = svc.post("/validate", body)
    assert r.status_code == 200
    out = r.json()
    assert out == {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                   "response": {"uid": "0df28fbd-5f5f-4d8b-a1b7-6c8f3d3c1a2e", "allowed": True}}


def test_delete_and_connect_are_allowed(svc: Service) -> None:
    use(svc, snapshot=cluster("cluster-small.yaml"))
    seed = example("seed-deployment.yaml")
    for webhook in ("validate", "mutate"):
        resp = svc.ask(webhook, review(None, "DELETE", old=seed, kind="Deployment"))
        assert resp["allowed"] is True and "patch" not in resp
        resp = svc.ask(webhook, review({"kind": "PodExecOptions", "apiVersion": "v1", "command": ["sh"]},
                                       "CONNECT", kind="Pod", sub_resource="exec"))
        assert resp["allowed"] is True


def test_dry_run_gives_the_same_verdict(svc: Service) -> None:
    use(svc, snapshot=cluster("cluster-small.yaml"))
    seed = example("seed-deployment.yaml")
    wet = svc.validate(seed)
    dry = svc.validate(seed, dry_run=True)
    assert (wet["allowed"], wet["status"], wet["warnings"]) == (dry["allowed"], dry["status"], dry["warnings"])
    pod = workload("Pod", gpu_container(env={"MODEL_NAME": "llama-3-8b-instruct"}))
    use(svc, snapshot=cluster())
    assert svc.ask("mutate", review(pod))["patch"] == svc.ask("mutate", review(pod, dry_run=True))["patch"]


def test_update_is_judged_only_when_pod_spec_or_declaration_changes(svc: Service) -> None:
    use(svc, snapshot=cluster("cluster-small.yaml"))
    old = example("seed-deployment.yaml")
    scaled = copy.deepcopy(old)
    scaled["spec"]["replicas"] = 3
    scaled["metadata"]["labels"] = {"team": "ml"}
    assert svc.validate(scaled, operation="UPDATE", old=old)["allowed"] is True  # unchanged pod: not judged

    annotated = copy.deepcopy(old)
    annotated["spec"]["template"]["metadata"]["annotations"]["vramgate.io/context-length"] = "2048"
    assert svc.validate(annotated, operation="UPDATE", old=old)["allowed"] is False

    new_image = copy.deepcopy(old)
    new_image["spec"]["template"]["spec"]["containers"][0]["image"] = "vllm/vllm-openai:v0.6.4"
    assert svc.validate(new_image, operation="UPDATE", old=old)["allowed"] is False

    # An UPDATE from a fitting spec to a too-big one is rejected; the other way round is admitted.
    fits = copy.deepcopy(old)
    fits["spec"]["template"]["metadata"]["annotations"]["vramgate.io/model-params"] = "350M"
    fits["spec"]["template"]["metadata"]["annotations"]["vramgate.io/context-length"] = "512"
    fits["spec"]["template"]["spec"]["containers"][0]["env"][0]["value"] = "1"
    assert svc.validate(fits, operation="UPDATE", old=old)["allowed"] is True
    assert svc.validate(old, operation="UPDATE", old=fits)["allowed"] is False


def test_update_is_never_mutated(svc: Service) -> None:
    pod = workload("Pod", gpu_container(env={"MODEL_NAME": "llama-3-8b-instruct"}))
    changed = copy.deepcopy(pod)
    changed["spec"]["containers"][0]["image"] = "vllm/vllm-openai:v0.6.4"
    resp = svc.ask("mutate", review(changed, "UPDATE", old=pod))
    assert resp["allowed"] is True and "patch" not in resp


def test_subresources_are_allowed(svc: Service) -> None:
    use(svc, snapshot=cluster("cluster-small.yaml"))
    seed = example("seed-deployment.yaml")
    scale = {"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "llm-15b", "namespace": "ml"},
             "spec": {"replicas": 4}}
    assert svc.validate(scale, operation="UPDATE", old=scale, kind="Deployment", sub_resource="scale")["allowed"]
    assert svc.validate(seed, operation="UPDATE", old=seed, sub_resource="status")["allowed"]


def test_object_without_kind_takes_it_from_the_request(svc: Service) -> None:
    use(svc, snapshot=cluster("cluster-small.yaml"))
    seed = example("seed-deployment.yaml")
    del seed["kind"]
    resp = svc.ask("validate", review(seed, kind="Deployment"))
    assert resp["allowed"] is False and resp["status"]["message"].startswith("deployment/llm-15b: needs")


def test_objects_that_carry_no_pod_are_allowed(svc: Service) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ml"}, "data": {"a": "b"}}
    assert svc.validate(cm)["allowed"] is True
    assert "patch" not in svc.ask("mutate", review(cm))
