"""Mutation over the wire: every patch applies, passes the Kubernetes schema, and a second pass is empty."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from webhook.config import Admission, Config
from webhook.decide.mutation import vram_terms

from .conftest import use
from .helpers import Service, defaulted_pod, example, gpu_container, patch_ops, pod_of, review, workload

SMALL = {"vramgate.io/model-params": "7B", "vramgate.io/precision": "bf16", "vramgate.io/context-length": "4096"}
REQ = "requiredDuringSchedulingIgnoredDuringExecution"


def cfg(**admission: Any) -> Config:
    return Config(admission=Admission(**admission))


def terms(pod: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = pod["spec"]["affinity"]["nodeAffinity"][REQ]["nodeSelectorTerms"]
    return out


def ours_for(got: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """vramgate's VRAM terms alone for the floor the first of ``got`` names (its vramgate-label Gt value)."""
    floor = int(got[0]["matchExpressions"][-1]["values"][0]) + 1
    return vram_terms(None, floor, Config())


def tolerations(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t.get("key", ""): t for t in pod["spec"].get("tolerations", [])}


def env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def test_llama3_pod_gets_everything(svc: Service) -> None:
    pod = pod_of(example("llama3-8b-deployment.yaml"))
    patched, _ = svc.mutate(pod)
    ann = patched["metadata"]["annotations"]
    per_gpu = int(ann["vramgate.io/vram-per-gpu-mib"])
    assert int(ann["vramgate.io/vram-required-mib"]) == per_gpu > 30000
    assert ann["vramgate.io/estimate"].startswith("32.3 GiB (32.1–")
    assert "on vllm 0.6.3: weights 15.0 GiB (8.03B × bf16) + KV cache 16.0 GiB" in ann["vramgate.io/estimate"]
    # VRAM affinity: a GPU holding the estimate's low end at utilization 0.9 (a pod admitted because it
    # may fit must not be made unschedulable); the controller's label, else GFD's.
    low = int(ann["vramgate.io/vram-per-gpu-min-mib"])
    assert 0 < low < per_gpu
    floor = -(-low * 10 // 9)
    unlabelled = [{"key": "vramgate.io/gpu-memory-mib", "operator": "DoesNotExist"},
                  {"key": "nvidia.com/gpu.memory", "operator": "DoesNotExist"}]
    assert terms(patched) == [
        {"matchExpressions": [{"key": "vramgate.io/gpu-memory-mib", "operator": "Gt", "values": [str(floor - 1)]}]},
        {"matchExpressions": [{"key": "vramgate.io/gpu-memory-mib", "operator": "DoesNotExist"},
                              {"key": "nvidia.com/gpu.memory", "operator": "Gt", "values": [str(floor - 1)]}]},
        # Where neither label is (a node Karpenter or GKE's autoscaler has yet to create): the GPU names
        # that hold it, from webhook/data/gpu_instances.yaml.
        {"matchExpressions": [*unlabelled,
                              {"key": "karpenter.k8s.aws/instance-gpu-name", "operator": "In",
                               "values": ["b200", "b300", "h100", "h200", "l40s"]},
                              {"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "Gt", "values": ["0"]}]},
        {"matchExpressions": [*unlabelled,
                              {"key": "cloud.google.com/gke-accelerator", "operator": "In",
                               "values": ["nvidia-a100-80gb", "nvidia-b200", "nvidia-gb200", "nvidia-gb300",
                                          "nvidia-h100-80gb",
                                          "nvidia-h100-mega-80gb", "nvidia-h200-141gb", "nvidia-rtx-pro-6000",
                                          "nvidia-tesla-a100"]},
                              {"key": "cloud.google.com/gke-gpu-partition-size", "operator": "DoesNotExist"}]},
    ]
    assert terms(patched) == vram_terms(None, floor, Config())
    tol = tolerations(patched)
    assert tol["nvidia.com/gpu"] == {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
        assert tol[key] == {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 900}
    c = patched["spec"]["containers"][0]
    assert env(c) == {"MODEL_NAME": "llama-3-8b-instruct", "MAX_BATCH_SIZE": "16",
                      "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "0"}
    assert c["resources"]["limits"]["memory"] == "32Gi"  # has a limit: no floor
    assert patched["spec"]["priorityClassName"] == "gpu-production-priority"
    assert "priority" not in patched["spec"] and "preemptionPolicy" not in patched["spec"]
    assert patched["spec"]["schedulerName"] == "default-scheduler"
    assert patched["spec"]["terminationGracePeriodSeconds"] == 60


def test_affinity_is_anded_into_every_user_term(svc: Service) -> None:
    user_terms = [
        {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}]},
        {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["b"]}],
         "matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["gpu-t4-0"]}]},
    ]
    spec = {"containers": [gpu_container(memory="64Gi")],
            "affinity": {"nodeAffinity": {REQ: {"nodeSelectorTerms": copy.deepcopy(user_terms)},
                                          "preferredDuringSchedulingIgnoredDuringExecution": [
                                              {"weight": 1, "preference": {"matchExpressions": [
                                                  {"key": "pool", "operator": "In", "values": ["x"]}]}}]},
                         "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}}
    patched, _ = svc.mutate(defaulted_pod(spec, annotations=SMALL))
    got = terms(patched)
    n = len(ours_for(got))
    assert n == 4 and len(got) == 2 * n  # vramgate's label, GFD's, Karpenter's and GKE's, for each user term
    for i, user in enumerate(user_terms):
        for ours in got[n * i: n * i + n]:
            assert ours["matchExpressions"][: len(user["matchExpressions"])] == user["matchExpressions"]
            assert ours.get("matchFields") == user.get("matchFields")
        assert got[n * i]["matchExpressions"][-1]["key"] == "vramgate.io/gpu-memory-mib"
        assert got[n * i + 1]["matchExpressions"][-1]["key"] == "nvidia.com/gpu.memory"
    na = patched["spec"]["affinity"]["nodeAffinity"]
    assert na["preferredDuringSchedulingIgnoredDuringExecution"][0]["weight"] == 1
    assert "podAntiAffinity" in patched["spec"]["affinity"]


def test_memory_floor_where_no_limit(svc: Service) -> None:
    spec = {"containers": [gpu_container("a", 2), gpu_container("b", 2, memory="200Gi"),
                           {"name": "sidecar", "image": "busybox"}],
            "initContainers": [{"name": "fetch", "image": "busybox",
                                "resources": {"requests": {"memory": "1Gi"}}}]}
    big = {"vramgate.io/model-params": "70B", "vramgate.io/precision": "bf16", "vramgate.io/context-length": "4096"}
    patched, _ = svc.mutate(defaulted_pod(spec, annotations=big))
    a, b, side = patched["spec"]["containers"]
    # 70B bf16 ≈ 130 GiB of weights over 4 GPUs; container a holds 2 of them: 1.3 × 65 GiB.
    assert a["resources"]["limits"]["memory"].endswith("Mi")
    assert 80 * 1024 < int(a["resources"]["limits"]["memory"][:-2]) < 90 * 1024
    assert b["resources"]["limits"]["memory"] == "200Gi"
    assert side.get("resources") == {} and "env" not in side
    assert env(a)["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert "limits" not in patched["spec"]["initContainers"][0]["resources"]


def test_memory_floor_respects_a_larger_request(svc: Service) -> None:
    c = gpu_container()
    c["resources"]["requests"] = {"memory": "100Gi"}
    patched, _ = svc.mutate(defaulted_pod({"containers": [c]}, annotations=SMALL))
    assert patched["spec"]["containers"][0]["resources"]["limits"]["memory"] == "100Gi"


def test_existing_settings_are_kept(svc: Service) -> None:
    c = gpu_container(memory="64Gi", env={"CUDA_VISIBLE_DEVICES": "0", "CUDA_DEVICE_ORDER": "FASTEST_FIRST"})
    spec = {"containers": [c], "priorityClassName": "mine", "terminationGracePeriodSeconds": 600,
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                             "tolerationSeconds": 60},
                            {"key": "nvidia.com/gpu", "operator": "Exists"}]}
    pod = defaulted_pod(spec, annotations=SMALL)
    pod["spec"]["priority"] = 7
    patched, _ = svc.mutate(pod)
    assert patched["spec"]["priorityClassName"] == "mine" and patched["spec"]["priority"] == 7
    assert patched["spec"]["terminationGracePeriodSeconds"] == 600
    tol = tolerations(patched)
    assert tol["node.kubernetes.io/not-ready"]["tolerationSeconds"] == 60
    assert tol["node.kubernetes.io/unreachable"]["tolerationSeconds"] == 900  # the plugin's default 300 replaced
    assert sum(t.get("key") == "nvidia.com/gpu" for t in patched["spec"]["tolerations"]) == 1
    assert env(patched["spec"]["containers"][0])["CUDA_DEVICE_ORDER"] == "FASTEST_FIRST"


def test_env_from_containers_get_no_cuda_env(svc: Service) -> None:
    c = gpu_container(memory="64Gi")
    c["envFrom"] = [{"configMapRef": {"name": "gpu-env"}}]
    patched, _ = svc.mutate(defaulted_pod({"containers": [c]}, annotations=SMALL))
    assert "env" not in patched["spec"]["containers"][0]


def test_batch_tier_and_scheduler_name(svc: Service) -> None:
    use(svc, config=cfg(scheduler_name="vramgate-scheduler"))
    job = workload("Job", gpu_container(memory="64Gi"), annotations=SMALL, name="train")
    patched, _ = svc.mutate(pod_of(job))
    assert patched["spec"]["priorityClassName"] == "gpu-batch-priority"
    assert patched["spec"]["schedulerName"] == "vramgate-scheduler"
    other = defaulted_pod({"containers": [gpu_container(memory="64Gi")], "schedulerName": "volcano"},
                          annotations=SMALL)
    assert svc.mutate(other)[0]["spec"]["schedulerName"] == "volcano"


def test_gpu_job_gets_a_pod_failure_policy(svc: Service) -> None:
    use(svc, config=cfg(device_fault_exit_codes=[79, 3, 79]))
    job = workload("Job", gpu_container(memory="64Gi"), annotations=SMALL, name="train")
    patched, _ = svc.mutate(job)
    assert patched["spec"]["podFailurePolicy"] == {"rules": [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
        {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [3, 79]}},
    ]}
    assert patched["spec"]["template"] == job["spec"]["template"]  # the template itself is not rewritten
    use(svc, config=Config())
    patched, _ = svc.mutate(job)
    assert patched["spec"]["podFailurePolicy"] == {"rules": [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}


@pytest.mark.parametrize("case", ["on-failure", "has-policy", "no-gpu"])
def test_jobs_left_alone(svc: Service, case: str) -> None:
    job = workload("Job", gpu_container(memory="64Gi"), annotations=SMALL, name="train")
    if case == "on-failure":
        job["spec"]["template"]["spec"]["restartPolicy"] = "OnFailure"
    elif case == "has-policy":
        job["spec"]["podFailurePolicy"] = {"rules": [{"action": "FailJob", "onExitCodes": {
            "operator": "In", "values": [42]}}]}
    else:
        job = workload("Job", {"name": "c", "image": "busybox"}, name="cpu")
    resp = svc.ask("mutate", review(job))
    assert "patch" not in resp


@pytest.mark.parametrize("kind", ["Deployment", "StatefulSet", "ReplicaSet", "DaemonSet", "CronJob"])
def test_workload_templates_are_not_mutated(svc: Service, kind: str) -> None:
    resp = svc.ask("mutate", review(workload(kind, gpu_container(memory="64Gi"), annotations=SMALL)))
    assert resp["allowed"] is True and "patch" not in resp


def test_gpuless_pods_are_not_mutated(svc: Service) -> None:
    pod = defaulted_pod({"containers": [{"name": "web", "image": "nginx"}]})
    assert "patch" not in svc.ask("mutate", review(pod))


def test_unknown_model_still_gets_gpu_settings_but_no_vram_affinity(svc: Service) -> None:
    pod = defaulted_pod({"containers": [gpu_container(memory="64Gi")]})
    patched, _ = svc.mutate(pod)
    assert "affinity" not in patched["spec"]
    assert "vramgate.io/estimate" not in patched["metadata"].get("annotations", {})
    assert tolerations(patched)["nvidia.com/gpu"]["operator"] == "Exists"


def test_rejected_pod_is_not_mutated_and_warn_mode_skips_the_affinity(svc: Service) -> None:
    big = {"vramgate.io/model-params": "180B", "vramgate.io/precision": "bf16"}
    pod = defaulted_pod({"containers": [gpu_container(memory="900Gi")]}, annotations=big)
    assert "patch" not in svc.ask("mutate", review(pod))  # /validate denies it; mutation stays out of the way
    use(svc, config=cfg(default_enforcement="warn"))
    patched, _ = svc.mutate(pod)
    assert "affinity" not in patched["spec"]  # no node could satisfy it: the pod stays schedulable as asked
    assert patched["spec"]["priorityClassName"] == "gpu-production-priority"


def test_reroute_replaces_the_narrow_selector(svc: Service) -> None:
    use(svc, config=cfg(reroute_narrow_selectors=True))
    spec = {"containers": [gpu_container(memory="64Gi")],
            "nodeSelector": {"nvidia.com/gpu.product": "Tesla-T4", "kubernetes.io/os": "linux"},
            "affinity": {"nodeAffinity": {REQ: {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["Tesla-T4"]},
                {"key": "kubernetes.io/arch", "operator": "NotIn", "values": ["arm64"]}]}]}}}}
    patched, resp = svc.mutate(defaulted_pod(spec, annotations=SMALL))
    assert patched["spec"]["nodeSelector"] == {"kubernetes.io/os": "linux"}
    got = terms(patched)
    assert len(got) == len(ours_for(got))
    assert all(t["matchExpressions"][0] == {"key": "kubernetes.io/arch", "operator": "NotIn", "values": ["arm64"]}
               for t in got)
    assert any("replaced nodeSelector nvidia.com/gpu.product=Tesla-T4" in w for w in resp["warnings"])
    # The rerouted pod passes validation.
    assert svc.validate(patched)["allowed"] is True


def test_reroute_of_a_selector_only_pod(svc: Service) -> None:
    use(svc, config=cfg(reroute_narrow_selectors=True))
    spec = {"containers": [gpu_container(memory="64Gi")], "nodeSelector": {"nvidia.com/gpu.product": "Tesla-T4"}}
    patched, _ = svc.mutate(defaulted_pod(spec, annotations=SMALL))
    assert "nodeSelector" not in patched["spec"] and terms(patched) == ours_for(terms(patched))


def test_mutation_is_stable_under_reinvocation_after_another_webhook(svc: Service) -> None:
    pod = pod_of(example("llama3-8b-deployment.yaml"))
    patched, _ = svc.mutate(pod)
    # Another webhook adds a sidecar and a label; the built-in Priority plugin re-runs and fills priority.
    patched["spec"]["containers"].append({"name": "proxy", "image": "envoy", "resources": {}})
    patched["metadata"]["labels"]["injected"] = "yes"
    patched["spec"]["priority"] = 1000
    again = svc.ask("mutate", review(patched))
    assert patch_ops(again) == []


def test_patch_reproduces_the_whole_mutation(svc: Service) -> None:
    """The patch is diffed over the parts mutate_pod touches; applied, it must give exactly mutate_pod's output."""
    import jsonpatch

    from webhook.decide.mutation import mutate_pod, mutation
    from webhook.decide.verdict import judge

    use(svc, config=cfg(reroute_narrow_selectors=True, scheduler_name="s"))
    pods = [
        pod_of(example("llama3-8b-deployment.yaml")),
        defaulted_pod({"containers": [gpu_container("a", 2), gpu_container("b", 2, memory="1Gi")],
                       "initContainers": [gpu_container("init", 1)],
                       "nodeSelector": {"nvidia.com/gpu.product": "Tesla-T4"}}, annotations=SMALL),
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bare", "namespace": "ml"},
         "spec": {"containers": [gpu_container(memory="64Gi")]}},
    ]
    pods[2]["metadata"]["annotations"] = SMALL
    for pod in pods:
        j = judge(pod, svc.state.inventory.snapshot(), svc.state.config, svc.state.catalog)
        expected, _ = mutate_pod(pod, j, svc.state.config)
        ops, _ = mutation(pod, j, svc.state.config)
        assert ops and jsonpatch.apply_patch(pod, ops) == expected


def test_daemonset_pods_keep_their_node_pinning(svc: Service) -> None:
    use(svc, config=cfg(reroute_narrow_selectors=True))
    pin = {"affinity": {"nodeAffinity": {REQ: {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["gpu-t4-0"]}]}]}}}}
    ds = workload("DaemonSet", gpu_container(memory="64Gi"), annotations=SMALL, name="agent")
    pod = defaulted_pod({**ds["spec"]["template"]["spec"], **pin}, annotations=SMALL, owner=("DaemonSet", "agent"))
    assert svc.validate(pod)["allowed"] is True
    patched, _ = svc.mutate(pod)
    assert all(t["matchFields"] == pin["affinity"]["nodeAffinity"][REQ]["nodeSelectorTerms"][0]["matchFields"]
               for t in terms(patched))
