"""vramgate end to end (issue #7): ``vramgate serve --role all`` as a real process, registered from the
Helm chart's own webhook configurations, the real kube-scheduler calling its extender, and what a
user sees through kubectl and the API.

Each test makes its own GPU nodes and waits until vramgate's live inventory holds exactly those
(admission judges against the whole cluster: "the largest GPU in the cluster has …").

Models (``vramgate estimate``, bf16, context 8192, gpu-memory-utilization 0.9):

| model | GPUs | per GPU | fits |
|---|---|---|---|
| llama-3-8b-instruct | 1 | 17.7 GiB | L4 (22.5 GiB), H100; not T4 (15 GiB) |
| qwen2.5-14b-instruct | 1 | 31.1 GiB | H100 only (of T4/L4/H100) |
| llama-3-70b-instruct | 4 | 34.6 GiB | 80 GiB GPUs only |
| llama-3-70b-instruct | 1 | 136.9 GiB | nothing |
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.harness import GPU_RESOURCE, ApiError, ControlPlane
from tests.e2e.vramgate_fixture import Vramgate
from webhook.cluster.cloud import provisioner_requirements

pytestmark = pytest.mark.e2e

IMAGE = "vllm/vllm-openai:v0.6.3"
SMALL = "llama-3-8b-instruct"
MEDIUM = "qwen2.5-14b-instruct"
HUGE = "llama-3-70b-instruct"
L4 = {"gpus": 4, "mem_mib": 23034, "product": "NVIDIA-L4"}
T4 = {"gpus": 4, "mem_mib": 15360, "product": "Tesla-T4"}
H100 = {"gpus": 8, "mem_mib": 81920, "product": "NVIDIA-H100-80GB-HBM3"}

A_REQUIRED = "vramgate.io/vram-required-mib"
A_PER_GPU = "vramgate.io/vram-per-gpu-mib"
A_ESTIMATE = "vramgate.io/estimate"
MEMORY_LABEL = "vramgate.io/gpu-memory-mib"
GPU_TOLERATION = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}


# ---------------------------------------------------------------------------------------------------------------
# Fixtures and helpers


def template(model: str, gpus: int = 1, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"annotations": {"vramgate.io/model": model, **(annotations or {})}},
        "spec": {
            "containers": [
                {
                    "name": "server",
                    "image": IMAGE,
                    "resources": {"requests": {"cpu": "100m", "memory": "1Gi"}, "limits": {GPU_RESOURCE: str(gpus)}},
                }
            ]
        },
    }


def deployment(name: str, model: str, *, replicas: int = 1, gpus: int = 1) -> dict[str, Any]:
    tpl = template(model, gpus)
    tpl["metadata"]["labels"] = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}, "template": tpl},
    }


def pod(name: str, model: str | None, *, gpus: int = 1, node: str | None = None) -> dict[str, Any]:
    tpl = template(model or "", gpus)
    if model is None:
        tpl["metadata"]["annotations"] = {}
    if node:
        tpl["spec"]["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, **tpl["metadata"]}, "spec": tpl["spec"]}


def kubectl_apply(
    cluster: ControlPlane, tmp_path: Path, obj: dict[str, Any], namespace: str, *extra: str
) -> subprocess.CompletedProcess[str]:
    """``kubectl apply -f <file>.yaml`` as a user would run it; never raises."""
    path = tmp_path / f"{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(obj, sort_keys=False))
    return cluster.kubectl("apply", "-n", namespace, "-f", str(path), *extra, check=False)


def pods_of(cluster: ControlPlane, namespace: str, selector: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cluster.request(
        "GET", f"/api/v1/namespaces/{namespace}/pods", query={"labelSelector": selector}
    )["items"]
    return items


def wait_bound(
    cluster: ControlPlane, namespace: str, selector: str, n: int, timeout: float = 30
) -> list[dict[str, Any]]:
    """Wait until ``n`` pods match and every one has been bound; return them."""
    return cluster.wait_for(
        f"{n} bound pods {selector} in {namespace}",
        lambda: (
            len(ps := pods_of(cluster, namespace, selector)) == n and all(p["spec"].get("nodeName") for p in ps) and ps
        ),
        timeout,
    )


def node_terms(floor_mib: int) -> list[dict[str, Any]]:
    """The required node affinity docs/admission.md promises for a per-GPU floor of ``floor_mib``."""
    value = [str(floor_mib - 1)]
    unlabelled = [{"key": MEMORY_LABEL, "operator": "DoesNotExist"},
                  {"key": "nvidia.com/gpu.memory", "operator": "DoesNotExist"}]
    return [
        {"matchExpressions": [{"key": MEMORY_LABEL, "operator": "Gt", "values": value}]},
        {
            "matchExpressions": [
                {"key": MEMORY_LABEL, "operator": "DoesNotExist"},
                {"key": "nvidia.com/gpu.memory", "operator": "Gt", "values": value},
            ]
        },
        # A node Karpenter or GKE's autoscaler has yet to create: the GPU names that hold the floor.
        *({"matchExpressions": [*unlabelled, *req]} for req in provisioner_requirements(floor_mib)),
    ]


def assert_mutated(p: dict[str, Any], priority_class: str, priority: int) -> None:
    """What /mutate writes into an admitted GPU pod (CONTRACT §5, docs/admission.md)."""
    meta, spec = p["metadata"], p["spec"]
    ann = meta["annotations"]
    total, per_gpu = int(ann[A_REQUIRED]), int(ann[A_PER_GPU])
    assert 0 < per_gpu <= total, ann
    assert "GiB" in ann[A_ESTIMATE], ann
    # The affinity asks for the low end of the estimate's band (docs/estimation.md), at utilization 0.9.
    low = int(ann["vramgate.io/vram-per-gpu-min-mib"])
    assert 0 < low <= per_gpu, ann
    floor = math.ceil(low / 0.9)
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == node_terms(floor) or terms == node_terms(floor + 1), terms
    assert GPU_TOLERATION in spec["tolerations"]
    assert spec["priorityClassName"] == priority_class and spec["priority"] == priority
    env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
    gpus = int(spec["containers"][0]["resources"]["limits"][GPU_RESOURCE])
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert env["CUDA_VISIBLE_DEVICES"] == ",".join(map(str, range(gpus)))
    assert spec["containers"][0]["resources"]["limits"]["memory"].endswith("Mi")  # the host-memory floor


def describe(cluster: ControlPlane, kind: str, name: str, namespace: str) -> str:
    return cluster.kubectl("describe", kind, name, "-n", namespace).stdout


def failed_scheduling(cluster: ControlPlane, name: str, namespace: str, *needles: str, timeout: float = 30) -> str:
    """Wait until ``kubectl describe pod`` shows a FailedScheduling event carrying every needle."""
    return cluster.wait_for(
        f"FailedScheduling for {name} showing {needles}",
        lambda: (
            "FailedScheduling" in (d := describe(cluster, "pod", name, namespace))
            and all(n in d for n in needles)
            and d
        ),
        timeout,
    )


def apiserver_fail_open(cluster: ControlPlane, webhook: str) -> float:
    """kube-apiserver's count of calls to ``webhook`` that failed and were ignored (failurePolicy Ignore)."""
    text = cluster.kubectl("get", "--raw", "/metrics").stdout
    total = 0.0
    for line in text.splitlines():
        if line.startswith("apiserver_admission_webhook_fail_open_count{") and f'name="{webhook}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


# ---------------------------------------------------------------------------------------------------------------
# 1. Rejected at kubectl apply


def test_deployment_no_gpu_can_hold_is_rejected_at_apply(
    cluster: ControlPlane, gate: Vramgate, gpu_nodes: Callable[..., Any], namespace: str, tmp_path: Path
) -> None:
    gpu_nodes("s1-l4", **L4)
    gpu_nodes("s1-h100", **H100)
    gate.wait_inventory({"s1-l4", "s1-h100"})

    r = kubectl_apply(cluster, tmp_path, deployment("llama-70b", HUGE), namespace)

    assert r.returncode != 0, r.stdout
    assert r.stderr.startswith("Error from server"), r.stderr
    m = re.search(
        r'admission webhook "validate\.vramgate\.io" denied the request: deployment/llama-70b: '
        r"needs (?P<need>[\d.]+) GiB VRAM per GPU \(weights .+\); "
        r"the largest GPU in the cluster has 80 GiB \(s1-h100, NVIDIA-H100-80GB-HBM3, 72 GiB usable at "
        r"gpu-memory-utilization 0\.9\)\. Try: (?P<try>.+)",
        r.stderr,
    )
    assert m, r.stderr
    assert float(m["need"]) > 100
    assert m["try"].strip()
    got = cluster.kubectl("get", "deployment", "llama-70b", "-n", namespace, check=False)
    assert got.returncode != 0 and "NotFound" in got.stderr  # nothing was created
    assert gate.metric("vramgate_admission_requests_total", kind="Deployment", verdict="denied") >= 1


# ---------------------------------------------------------------------------------------------------------------
# 2. A fitting Deployment: its pods are mutated and bin-packed


def test_fitting_deployment_pods_are_mutated_and_binpacked(
    cluster: ControlPlane, gate: Vramgate, gpu_nodes: Callable[..., Any], namespace: str, tmp_path: Path
) -> None:
    gpu_nodes("s2-t4", **T4)  # too small for the model
    gpu_nodes("s2-l4", **{**L4, "gpus": 1})  # the tightest fit, but one GPU only
    gpu_nodes("s2-h100", **H100)
    gate.wait_inventory({"s2-t4", "s2-l4", "s2-h100"})
    before = {v: gate.metric("vramgate_extender_requests_total", verb=v) for v in ("filter", "prioritize")}

    r = kubectl_apply(cluster, tmp_path, deployment("chat", SMALL), namespace)
    assert r.returncode == 0, r.stderr
    assert "deployment.apps/chat created" in r.stdout
    assert "Warning" not in r.stderr

    # Both GPUs can hold it: the best fit (the 24 GiB L4, least VRAM left over) is chosen, never the T4.
    (first,) = wait_bound(cluster, namespace, "app=chat", 1)
    assert first["spec"]["nodeName"] == "s2-l4"
    # A second replica: the L4's only GPU is taken, so the next best, the H100.
    cluster.kubectl("scale", "deployment", "chat", "-n", namespace, "--replicas=2")
    pods = wait_bound(cluster, namespace, "app=chat", 2)
    assert {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods} == {
        first["metadata"]["name"]: "s2-l4",
        **{p["metadata"]["name"]: "s2-h100" for p in pods if p["metadata"]["name"] != first["metadata"]["name"]},
    }
    for p in pods:
        assert_mutated(p, "gpu-production-priority", 1000)
        assert int(p["metadata"]["annotations"][A_PER_GPU]) > 15360 * 0.9  # why the T4 is out
    after = {v: gate.metric("vramgate_extender_requests_total", verb=v) for v in ("filter", "prioritize")}
    # Both pods were filtered; the first was scored (with one feasible node left, the scheduler skips scoring).
    assert after["filter"] >= before["filter"] + 2 and after["prioritize"] >= before["prioritize"] + 1

    # Templates are validated, never rewritten: the Deployment is exactly what was applied (no GitOps drift).
    tpl = cluster.request("GET", f"/apis/apps/v1/namespaces/{namespace}/deployments/chat")["spec"]["template"]
    assert A_REQUIRED not in tpl["metadata"].get("annotations", {})
    assert "tolerations" not in tpl["spec"] and "affinity" not in tpl["spec"]
    assert "priorityClassName" not in tpl["spec"]


# ---------------------------------------------------------------------------------------------------------------
# 3. Only the large GPU; only where enough healthy GPUs are free


def test_pod_that_fits_only_the_large_gpu_lands_there(
    cluster: ControlPlane, gate: Vramgate, gpu_nodes: Callable[..., Any], namespace: str, tmp_path: Path
) -> None:
    gpu_nodes("s3-t4", **T4)
    gpu_nodes("s3-l4", **L4)
    gpu_nodes("s3-h100", **H100)
    gate.wait_inventory({"s3-t4", "s3-l4", "s3-h100"})

    r = kubectl_apply(cluster, tmp_path, pod("qwen", MEDIUM), namespace)
    assert r.returncode == 0, r.stderr
    assert cluster.wait_pod_bound("qwen", namespace) == "s3-h100"
    assert_mutated(cluster.get_pod("qwen", namespace), "gpu-production-priority", 1000)
    # The mutation set spec.priority as the Priority plugin resolves the class (from the watched PriorityClass),
    # so the plugin's re-run changed nothing and kube-apiserver did not call /mutate a second time.
    reviews = [line for line in gate.log_text().splitlines()
               if '"msg":"review"' in line and f'"object":"{namespace}/qwen"' in line]
    assert sum('"webhook":"mutate"' in line for line in reviews) == 1, reviews
    assert sum('"webhook":"validate"' in line for line in reviews) == 1, reviews


def test_multi_gpu_pod_lands_only_where_enough_healthy_gpus_are_free(
    cluster: ControlPlane, gate: Vramgate, gpu_nodes: Callable[..., Any], namespace: str, tmp_path: Path
) -> None:
    gpu_nodes("s3m-busy", **{**H100, "gpus": 4})  # 4 healthy, 3 taken below
    gpu_nodes("s3m-sick", **H100, allocatable_gpus=3)  # 5 of 8 GPUs unhealthy
    gpu_nodes("s3m-ok", **H100, allocatable_gpus=6)  # 2 of 8 unhealthy: degraded, 6 usable
    gpu_nodes("s3m-l4", **{**L4, "gpus": 8})  # enough GPUs, too little VRAM each
    gate.wait_inventory({"s3m-busy", "s3m-sick", "s3m-ok", "s3m-l4"})
    # Something already holds 3 GPUs of s3m-busy (bound directly, as a kubelet would have it).
    cluster.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod("holder", None, gpus=3, node="s3m-busy"))
    gate.wait_free("s3m-busy", 1)
    inv = gate.inventory_nodes()
    assert (inv["s3m-sick"]["health"], inv["s3m-ok"]["health"]) == ("unhealthy", "degraded")

    r = kubectl_apply(cluster, tmp_path, pod("tp4", HUGE, gpus=4), namespace)
    assert r.returncode == 0, r.stderr
    assert cluster.wait_pod_bound("tp4", namespace) == "s3m-ok"
    p = cluster.get_pod("tp4", namespace)
    assert_mutated(p, "gpu-production-priority", 1000)
    assert int(p["metadata"]["annotations"][A_PER_GPU]) * 4 <= int(p["metadata"]["annotations"][A_REQUIRED]) + 4
    gate.wait_free("s3m-ok", 2)


# ---------------------------------------------------------------------------------------------------------------
# 4. Unhealthy GPUs are avoided, and the extender says why


def test_unhealthy_gpu_nodes_are_avoided_with_the_extenders_reason(
    cluster: ControlPlane, gate: Vramgate, gpu_nodes: Callable[..., Any], namespace: str, tmp_path: Path
) -> None:
    ecc = {"type": "GpuMemWatch", "status": "True", "reason": "DBE", "message": "double-bit ECC error"}
    gpu_nodes("s4-xid", **H100, conditions=[ecc])  # every GPU allocatable, but a fault condition
    gpu_nodes("s4-gone", **H100, allocatable_gpus=2)  # 6 of 8 GPUs gone
    gate.wait_inventory({"s4-xid", "s4-gone"})

    r = kubectl_apply(cluster, tmp_path, pod("chat", SMALL), namespace)
    assert r.returncode == 0, r.stderr
    # kube-scheduler's own filters pass both nodes (free nvidia.com/gpu, no taints): the extender drops them.
    text = failed_scheduling(
        cluster,
        "chat",
        namespace,
        "GPUFault: GPU fault: condition GpuMemWatch=True (double-bit ECC error)",
        "GPUFault: 6 of 8 GPUs unhealthy",
    )
    assert "0/2 nodes are available" in text
    assert cluster.get_pod("chat", namespace)["spec"].get("nodeName") is None
    assert gate.metric("vramgate_extender_filtered_nodes_total", reason="GPUFault") >= 2

    # A healthy GPU node appears: the pending pod goes there, not to the two sick ones.
    gpu_nodes("s4-ok", **{**L4, "gpus": 1})
    assert cluster.wait_pod_bound("chat", namespace, timeout=40) == "s4-ok"


# ---------------------------------------------------------------------------------------------------------------
# 5. The controller (in --role all) writes the integer VRAM label the affinity uses


def test_controller_labels_vram_for_native_affinity(
    cluster: ControlPlane, gate: Vramgate, gpu_nodes: Callable[..., Any], namespace: str, tmp_path: Path
) -> None:
    # GFD's label in a human form: kube-scheduler's Gt cannot read "80Gi", vramgate can.
    gpu_nodes("s5-h100", **H100, labels={"nvidia.com/gpu.memory": "80Gi"})
    gpu_nodes("s5-l4", **L4)
    gate.wait_inventory({"s5-h100", "s5-l4"})

    def labels(node: str) -> dict[str, str]:
        return cluster.get_node(node)["metadata"]["labels"]

    cluster.wait_for(
        "the controller's labels",
        lambda: MEMORY_LABEL in labels("s5-h100") and MEMORY_LABEL in labels("s5-l4"),
        timeout=60,  # 20 s was enough alone, not on a 2-core machine at load 10
    )
    assert labels("s5-h100")[MEMORY_LABEL] == "81920" and labels("s5-l4")[MEMORY_LABEL] == "23034"
    assert labels("s5-h100")["vramgate.io/gpu-health"] == "healthy"
    assert labels("s5-h100")["nvidia.com/gpu.memory"] == "80Gi"  # GFD's label is left alone

    # Only the normalized label lets the required affinity match the H100.
    r = kubectl_apply(cluster, tmp_path, pod("qwen", MEDIUM), namespace)
    assert r.returncode == 0, r.stderr
    assert cluster.wait_pod_bound("qwen", namespace) == "s5-h100"


# ---------------------------------------------------------------------------------------------------------------
# 6. enforcement=warn


def test_warn_namespace_admits_with_kubectl_warnings(
    cluster: ControlPlane, gate: Vramgate, gpu_nodes: Callable[..., Any], namespace: str, tmp_path: Path
) -> None:
    gpu_nodes("s6-l4", **L4)
    gate.wait_inventory({"s6-l4"})
    cluster.kubectl("label", "namespace", namespace, "vramgate.io/enforcement=warn")
    dep = deployment("llama-70b", HUGE)
    # The label reaches vramgate through its namespace watch: a server-side dry run says when.
    cluster.wait_for(
        "vramgate to see enforcement=warn",
        lambda: kubectl_apply(cluster, tmp_path, dep, namespace, "--dry-run=server").returncode == 0,
        timeout=15,
    )

    r = kubectl_apply(cluster, tmp_path, dep, namespace)

    assert r.returncode == 0, r.stderr
    assert "deployment.apps/llama-70b created" in r.stdout
    warnings = [line for line in r.stderr.splitlines() if line.startswith("Warning: ")]
    assert warnings and warnings[0].startswith("Warning: deployment/llama-70b: needs "), r.stderr
    joined = " ".join(w.removeprefix("Warning: ").removeprefix("…").removesuffix("…") for w in warnings)
    assert "the largest GPU in the cluster has 22.5 GiB (s6-l4, NVIDIA-L4" in joined, r.stderr
    assert all(len(w) <= len("Warning: ") + 120 for w in warnings), warnings

    # Its pod is created (warned, mutated, no VRAM affinity no node could meet) and stays Pending with
    # the extender's reason.
    (p,) = cluster.wait_for("the pod", lambda: pods_of(cluster, namespace, "app=llama-70b"), timeout=20)
    name = p["metadata"]["name"]
    failed_scheduling(cluster, name, namespace, "VRAMTooSmall: needs", "NVIDIA-L4 has 22.5 GiB")
    p = cluster.get_pod(name, namespace)
    assert A_REQUIRED in p["metadata"]["annotations"]
    assert "affinity" not in p["spec"] and GPU_TOLERATION in p["spec"]["tolerations"]


# ---------------------------------------------------------------------------------------------------------------
# 7. vramgate down: the chart's failure policies, and recovery without a manual step


def test_vramgate_down_fails_closed_and_recovers_by_itself(
    cluster: ControlPlane, gate: Vramgate, gpu_nodes: Callable[..., Any], namespace: str, tmp_path: Path
) -> None:
    gpu_nodes("s7-l4", **L4)
    gate.wait_inventory({"s7-l4"})
    assert kubectl_apply(cluster, tmp_path, deployment("steady", SMALL), namespace).returncode == 0
    (old,) = wait_bound(cluster, namespace, "app=steady", 1)
    mutate_fail_open = apiserver_fail_open(cluster, "mutate.vramgate.io")

    assert gate.stop() == 0  # SIGTERM: drained and exited cleanly
    t_down = time.monotonic()
    try:
        # The validating webhook fails closed (failurePolicy Fail): a new Deployment is refused.
        r = kubectl_apply(cluster, tmp_path, deployment("late", SMALL), namespace)
        assert r.returncode != 0
        assert 'failed calling webhook "validate.vramgate.io"' in r.stderr, r.stderr
        assert "connection refused" in r.stderr, r.stderr
        # A pod: the mutating webhook fails open (Ignore) -- the apiserver goes on to validation, which refuses.
        with pytest.raises(ApiError) as err:
            cluster.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod("naked", SMALL))
        msg = str(err.value)
        assert 'failed calling webhook "validate.vramgate.io"' in msg and "mutate.vramgate.io" not in msg, msg
        assert apiserver_fail_open(cluster, "mutate.vramgate.io") > mutate_fail_open
        # A CPU-only pod never reaches vramgate (the chart's gpu-workloads-only matchConditions): the outage
        # does not touch it.
        cpu_only = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "cpu-only"},
                    "spec": {"containers": [{"name": "web", "image": IMAGE,
                                             "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}
        created = cluster.request("POST", f"/api/v1/namespaces/{namespace}/pods", cpu_only)
        assert created["metadata"]["name"] == "cpu-only"
        assert "vramgate.io/estimate" not in (created["metadata"].get("annotations") or {})
        # The ReplicaSet controller cannot replace a lost pod meanwhile; it says so and keeps retrying.
        cluster.request(
            "DELETE", f"/api/v1/namespaces/{namespace}/pods/{old['metadata']['name']}", {"gracePeriodSeconds": 0}
        )
        rs = old["metadata"]["ownerReferences"][0]["name"]
        cluster.wait_for(
            "FailedCreate on the ReplicaSet",
            lambda: 'failed calling webhook "validate.vramgate.io"' in describe(cluster, "rs", rs, namespace),
            timeout=15,
        )
    finally:
        gate.start()  # same port, same certificate: nothing else changes
    outage = time.monotonic() - t_down

    # Recovery: no kubectl step. The controller's retry creates the pod, mutated, and the extender places it.
    (new,) = wait_bound(cluster, namespace, "app=steady", 1, timeout=30 + 2 * outage)
    assert new["metadata"]["name"] != old["metadata"]["name"]
    assert new["spec"]["nodeName"] == "s7-l4"
    assert_mutated(new, "gpu-production-priority", 1000)
    r = kubectl_apply(cluster, tmp_path, deployment("late", SMALL), namespace)
    assert r.returncode == 0, r.stderr
    wait_bound(cluster, namespace, "app=late", 1)


def test_mutation_ignore_admits_unmutated_pods_while_down(
    cluster: ControlPlane, gate: Vramgate, gpu_nodes: Callable[..., Any], namespace: str, tmp_path: Path
) -> None:
    """The chart's default validating policy is Fail, which also covers Pods: while vramgate is down no
    pod gets in at all. Rendered with ``webhook.failurePolicy.validating=Ignore``, what mutation's
    ``Ignore`` means becomes visible: pods are admitted unmutated."""
    gpu_nodes("s7i-l4", **L4)
    gate.wait_inventory({"s7i-l4"})
    gate.register(
        gate.render(
            webhook={
                "clientConfig": "url",
                "url": gate.url,
                "failurePolicy": {"mutating": "Ignore", "validating": "Ignore"},
            }
        )
    )
    try:
        assert gate.stop() == 0
        try:
            r = kubectl_apply(cluster, tmp_path, pod("blind", SMALL), namespace)
            assert r.returncode == 0, r.stderr
            p = cluster.get_pod("blind", namespace)
            assert A_REQUIRED not in p["metadata"].get("annotations", {})  # unmutated
            assert "affinity" not in p["spec"] and "priorityClassName" not in p["spec"]
            assert GPU_TOLERATION not in p["spec"].get("tolerations", [])
            time.sleep(1)
            # The extender is not ignorable: the GPU pod is not placed blind while vramgate is away.
            assert cluster.get_pod("blind", namespace)["spec"].get("nodeName") is None
        finally:
            gate.start()
        # Back: the extender judges the unmutated pod from its own annotations and places it.
        assert cluster.wait_pod_bound("blind", namespace, timeout=30) == "s7i-l4"
    finally:
        gate.register()  # the chart's defaults again
    vwc = cluster.request("GET", "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/vramgate")
    # validate.vramgate.io Fails closed; validate-kinds.vramgate.io (webhook.extraKinds) and
    # validate-claims.vramgate.io (webhook.dra) Ignore by default.
    assert [(w["name"], w["failurePolicy"]) for w in vwc["webhooks"]] == [
        ("validate.vramgate.io", "Fail"), ("validate-kinds.vramgate.io", "Ignore"),
        ("validate-claims.vramgate.io", "Ignore")]


# ---------------------------------------------------------------------------------------------------------------
# 8. Certificate rotation under load


def test_cert_rotation_while_the_apiserver_keeps_calling(
    cluster: ControlPlane, gate: Vramgate, gpu_nodes: Callable[..., Any], namespace: str
) -> None:
    gpu_nodes("s8-l4", **L4)
    gate.wait_inventory({"s8-l4"})
    results: list[tuple[float, str, str]] = []  # (time, kind, "ok" | error)
    stop = threading.Event()

    def hammer() -> None:
        objs = [("pods", "/api/v1", pod("probe", SMALL)), ("deployments", "/apis/apps/v1", deployment("probe", SMALL))]
        i = 0
        while not stop.is_set():
            resource, prefix, body = objs[i % 2]
            i += 1
            try:
                out = cluster.request(
                    "POST", f"{prefix}/namespaces/{namespace}/{resource}", body, query={"dryRun": "All"}, timeout=10
                )
                ok = resource != "pods" or A_REQUIRED in out["metadata"].get("annotations", {})  # mutated
                results.append((time.monotonic(), resource, "ok" if ok else f"not mutated: {out['metadata']}"))
            except Exception as exc:  # every failure is a finding
                results.append((time.monotonic(), resource, repr(exc)))

    def count() -> int:
        return len(results)

    old_serial = gate.served_serial()
    assert old_serial == gate.file_serial()
    reloads = gate.log_text().count("TLS certificate reloaded")
    dry_reviews = gate.log_text().count('"dry_run":true')
    worker = threading.Thread(target=hammer, daemon=True)
    worker.start()
    try:
        cluster.wait_for("dry runs before the rotation", lambda: count() >= 20, timeout=30)
        new_serial = gate.rotate_cert()
        t_rotated = time.monotonic()
        cluster.wait_for(
            "the new certificate on new connections",
            lambda: gate.served_serial() == new_serial,
            timeout=10,
            interval=0.05,
        )
        n = count()
        cluster.wait_for("dry runs after the reload", lambda: count() >= n + 20, timeout=30)
    finally:
        stop.set()
        worker.join(15)
    assert new_serial != old_serial
    failures = [r for r in results if r[2] != "ok"]
    assert not failures, failures[:5]
    assert sum(1 for r in results if r[0] > t_rotated) >= 20
    assert {r[1] for r in results} == {"pods", "deployments"}
    assert gate.log_text().count("TLS certificate reloaded") == reloads + 1
    # Every dry run really went through vramgate (sideEffects: None lets kube-apiserver call it for dry runs).
    assert gate.log_text().count('"dry_run":true') - dry_reviews >= len(results)
    # vramgate answers each connection made with the old certificate once more, with Connection: close, so
    # kube-apiserver's calls after the rotation went out on new TLS connections (at least all but the few it held
    # open), each verifying the new certificate against the caBundle registered at the start; and so does this one.
    out = cluster.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod("after", SMALL), query={"dryRun": "All"})
    assert A_REQUIRED in out["metadata"]["annotations"]
    assert gate.served_serial() == new_serial


# ---------------------------------------------------------------------------------------------------------------
# 9. Jobs get a podFailurePolicy


def test_gpu_job_gets_pod_failure_policy(
    cluster: ControlPlane, gate: Vramgate, gpu_nodes: Callable[..., Any], namespace: str, tmp_path: Path
) -> None:
    gpu_nodes("s9-l4", **L4)
    gate.wait_inventory({"s9-l4"})
    tpl = template(SMALL)
    tpl["metadata"]["labels"] = {"app": "finetune"}
    tpl["spec"]["restartPolicy"] = "Never"
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "finetune"},
        "spec": {"backoffLimit": 3, "template": tpl},
    }

    r = kubectl_apply(cluster, tmp_path, job, namespace)

    assert r.returncode == 0, r.stderr
    spec = cluster.request("GET", f"/apis/batch/v1/namespaces/{namespace}/jobs/finetune")["spec"]
    assert spec["podFailurePolicy"] == {
        "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]
    }
    assert spec["backoffLimit"] == 3
    assert spec["podReplacementPolicy"] == "Failed"  # the only value the API allows beside a podFailurePolicy
    (p,) = wait_bound(cluster, namespace, "app=finetune", 1)
    assert p["spec"]["nodeName"] == "s9-l4"
    assert_mutated(p, "gpu-batch-priority", 500)  # Jobs are the batch tier

    # A Job that restarts in place (OnFailure) keeps no podFailurePolicy: the API allows it only with Never.
    tpl2 = json.loads(json.dumps(tpl))
    tpl2["metadata"]["labels"] = {"app": "onfailure"}
    tpl2["spec"]["restartPolicy"] = "OnFailure"
    job2 = {**job, "metadata": {"name": "onfailure"}, "spec": {"template": tpl2}}
    assert kubectl_apply(cluster, tmp_path, job2, namespace).returncode == 0
    spec2 = cluster.request("GET", f"/apis/batch/v1/namespaces/{namespace}/jobs/onfailure")["spec"]
    assert "podFailurePolicy" not in spec2


def test_a_kaito_preset_pod_with_max_model_len_auto_is_admitted_and_says_its_context(
    cluster: ControlPlane, gate: Vramgate, gpu_nodes: Callable[..., Any], namespace: str, tmp_path: Path
) -> None:
    """KAITO passes --max-model-len=auto to every vLLM preset pod (issue 37): vLLM picks the largest context that
    fits. It must be admitted through the real webhooks (once it was "'auto' is not valid"), bind, and carry the
    context vLLM will pick on an L4 in its estimate annotation."""
    gpu_nodes("s9-l4", **L4)
    gate.wait_inventory({"s9-l4"})
    script = ("python3 /workspace/vllm/inference_api.py --model=Qwen/Qwen3-8B --served-model-name=qwen3-8b "
              "--max-model-len=auto --gpu-memory-utilization=0.9")
    obj = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "workspace-qwen3-8b-0", "labels": {"kaito.sh/workspace": "workspace-qwen3-8b"}},
           "spec": {"containers": [{"name": "workspace-qwen3-8b",
                                    "image": "mcr.microsoft.com/aks/kaito/kaito-base:0.0.8",
                                    "command": ["/bin/sh", "-c", script],
                                    "resources": {"limits": {GPU_RESOURCE: "1"}}}]}}
    r = kubectl_apply(cluster, tmp_path, obj, namespace)
    assert r.returncode == 0, r.stderr
    assert "picks its context (--max-model-len auto)" in r.stderr  # kubectl prints the admission warning
    assert cluster.wait_pod_bound("workspace-qwen3-8b-0", namespace) == "s9-l4"
    estimate = cluster.get_pod("workspace-qwen3-8b-0", namespace)["metadata"]["annotations"][A_ESTIMATE]
    assert re.search(r"context chosen by vllm: \d{5} tokens on NVIDIA-L4", estimate), estimate
