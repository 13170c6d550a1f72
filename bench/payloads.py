"""Realistic AdmissionReview payloads: a 3-container GPU Deployment, a GPU Pod and a CPU Pod."""

from __future__ import annotations

import uuid
from typing import Any


def _review(obj: dict[str, Any], kind: dict[str, str], resource: str) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": kind,
            "resource": {"group": kind["group"], "version": kind["version"], "resource": resource},
            "requestKind": kind,
            "requestResource": {"group": kind["group"], "version": kind["version"], "resource": resource},
            "name": obj["metadata"].get("name", ""),
            "namespace": "ml",
            "operation": "CREATE",
            "userInfo": {"username": "alice@example.com", "groups": ["system:authenticated", "ml-team"]},
            "object": obj,
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


def _vllm_container() -> dict[str, Any]:
    return {
        "name": "vllm",
        "image": "vllm/vllm-openai:v0.6.3",
        "args": ["--model", "meta-llama/Meta-Llama-3-8B-Instruct", "--max-model-len", "8192",
                 "--gpu-memory-utilization", "0.9", "--max-num-seqs", "16", "--port", "8000"],
        "env": [{"name": "HF_HOME", "value": "/models"}, {"name": "VLLM_LOGGING_LEVEL", "value": "INFO"},
                {"name": "HUGGING_FACE_HUB_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}],
        "ports": [{"containerPort": 8000, "name": "http", "protocol": "TCP"}],
        "resources": {"limits": {"nvidia.com/gpu": "1", "memory": "32Gi", "cpu": "8"},
                      "requests": {"nvidia.com/gpu": "1", "memory": "32Gi", "cpu": "4"}},
        "readinessProbe": {"httpGet": {"path": "/health", "port": 8000}, "periodSeconds": 10},
        "livenessProbe": {"httpGet": {"path": "/health", "port": 8000}, "initialDelaySeconds": 120},
        "volumeMounts": [{"name": "models", "mountPath": "/models"}, {"name": "shm", "mountPath": "/dev/shm"}],
    }


def _sidecar(name: str, image: str) -> dict[str, Any]:
    return {
        "name": name,
        "image": image,
        "args": ["--listen", ":9090", "--upstream", "http://127.0.0.1:8000"],
        "ports": [{"containerPort": 9090, "name": f"{name[:10]}-port"}],
        "resources": {"limits": {"memory": "256Mi", "cpu": "500m"}, "requests": {"memory": "128Mi", "cpu": "100m"}},
    }


def _pod_spec(containers: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "containers": containers,
        "volumes": [{"name": "models", "persistentVolumeClaim": {"claimName": "models"}},
                    {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}}],
        "serviceAccountName": "llm",
        "nodeSelector": {"kubernetes.io/os": "linux"},
    }


def deployment_review() -> dict[str, Any]:
    labels = {"app.kubernetes.io/name": "llama3", "app.kubernetes.io/part-of": "chat", "team": "ml"}
    obj = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "llama3-8b", "namespace": "ml", "labels": labels,
                     "annotations": {"deployment.kubernetes.io/revision": "3"}},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app.kubernetes.io/name": "llama3"}},
            "template": {
                "metadata": {"labels": labels, "annotations": {"prometheus.io/scrape": "true"}},
                "spec": _pod_spec([_vllm_container(), _sidecar("metrics-proxy", "ghcr.io/acme/proxy:1.4"),
                                   _sidecar("log-shipper", "fluent/fluent-bit:3.0")]),
            },
        },
    }
    return _review(obj, {"group": "apps", "version": "v1", "kind": "Deployment"}, "deployments")


def gpu_pod_review() -> dict[str, Any]:
    obj = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "llama3-8b-7d9f8-abcde", "namespace": "ml", "labels": {"app": "llama3"},
                        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "llama3-8b-7d9f8",
                                             "uid": str(uuid.uuid4()), "controller": True}]},
           "spec": _pod_spec([_vllm_container()])}
    return _review(obj, {"group": "", "version": "v1", "kind": "Pod"}, "pods")


def cpu_pod_review() -> dict[str, Any]:
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-0", "namespace": "ml", "labels": {"app": "w"}},
           "spec": _pod_spec([_sidecar("web", "nginx:1.27")])}
    return _review(obj, {"group": "", "version": "v1", "kind": "Pod"}, "pods")


PAYLOADS = {"deployment": deployment_review, "gpu-pod": gpu_pod_review, "cpu-pod": cpu_pod_review}
