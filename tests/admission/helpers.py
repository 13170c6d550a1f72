"""AdmissionReviews as kube-apiserver sends them, a client for the real HTTPS service, and patch checks."""

from __future__ import annotations

import base64
import copy
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import jsonpatch
import kubernetes_validate
import orjson
import yaml

from tests.unit.helpers import container
from webhook.cluster.snapshot import Snapshot, snapshot_from_nodes
from webhook.config import Config
from webhook.kube.manifests import load_file, load_nodes
from webhook.serve.state import AppState

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
K8S_VERSION = kubernetes_validate.latest_version()

GVK = {
    "Pod": ("", "v1", "pods"),
    "Deployment": ("apps", "v1", "deployments"),
    "StatefulSet": ("apps", "v1", "statefulsets"),
    "ReplicaSet": ("apps", "v1", "replicasets"),
    "DaemonSet": ("apps", "v1", "daemonsets"),
    "Job": ("batch", "v1", "jobs"),
    "CronJob": ("batch", "v1", "cronjobs"),
}


def example(name: str) -> dict[str, Any]:
    return load_file(EXAMPLES / name)[0]


def cluster(name: str = "cluster.yaml", config: Config | None = None) -> Snapshot:
    return snapshot_from_nodes(load_nodes(EXAMPLES / name), config or Config(), revision=1)


def review(obj: dict[str, Any] | None, operation: str = "CREATE", *, namespace: str | None = None,
           old: dict[str, Any] | None = None, dry_run: bool = False, kind: str | None = None,
           sub_resource: str | None = None, uid: str | None = None) -> dict[str, Any]:
    """An AdmissionReview v1 request the way kube-apiserver builds it."""
    src = obj if obj is not None else old or {}
    kind = kind or src.get("kind", "Pod")
    group, version, resource = GVK.get(kind, ("", "v1", kind.lower() + "s"))
    meta = src.get("metadata") or {}
    ns = namespace if namespace is not None else meta.get("namespace", "ml")
    req: dict[str, Any] = {
        "uid": uid or str(uuid.uuid4()),
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": resource},
        "requestKind": {"group": group, "version": version, "kind": kind},
        "requestResource": {"group": group, "version": version, "resource": resource},
        "name": meta.get("name", ""),
        "namespace": ns,
        "operation": operation,
        "userInfo": {"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]},
        "object": obj,
        "oldObject": old,
        "dryRun": dry_run,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": f"{operation.title()}Options"},
    }
    if sub_resource:
        req["subResource"] = sub_resource
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}


def defaulted_pod(spec: dict[str, Any], *, name: str = "", namespace: str = "ml",
                  labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
                  owner: tuple[str, str] | None = None, generate_name: str = "pod-") -> dict[str, Any]:
    """A Pod as a mutating webhook sees it on CREATE: after defaulting and the built-in mutating plugins."""
    spec = copy.deepcopy(spec)
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("priority", 0)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    tolerations = spec.setdefault("tolerations", [])
    keys = {t.get("key") for t in tolerations}
    for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):  # DefaultTolerationSeconds
        if key not in keys:
            tolerations.append({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300})
    for c in spec.get("containers", []) + spec.get("initContainers", []):
        c.setdefault("imagePullPolicy", "IfNotPresent")
        c.setdefault("terminationMessagePath", "/dev/termination-log")
        c.setdefault("terminationMessagePolicy", "File")
        c.setdefault("resources", {})
    meta: dict[str, Any] = {"namespace": namespace, "labels": dict(labels or {})}
    if name:
        meta["name"] = name
    else:
        meta["generateName"] = generate_name
    if annotations:
        meta["annotations"] = dict(annotations)
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1" if owner[0] != "Job" else "batch/v1", "kind": owner[0],
                                    "name": owner[1], "uid": str(uuid.uuid4()), "controller": True,
                                    "blockOwnerDeletion": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def pod_of(workload: dict[str, Any]) -> dict[str, Any]:
    """The Pod a workload's controller would create from its template."""
    path = ("spec", "jobTemplate", "spec", "template") if workload["kind"] == "CronJob" else ("spec", "template")
    template: Any = workload
    for key in path:
        template = template[key]
    meta = template.get("metadata") or {}
    name = workload["metadata"]["name"]
    owner_kind = {"Deployment": "ReplicaSet", "CronJob": "Job"}.get(workload["kind"], workload["kind"])
    return defaulted_pod(template["spec"], namespace=workload["metadata"].get("namespace", "ml"),
                         labels=meta.get("labels"), annotations=meta.get("annotations"),
                         owner=(owner_kind, name), generate_name=f"{name}-")


def gpu_container(name: str = "main", gpus: int = 1, *, env: dict[str, str] | None = None,
                  memory: str | None = None, args: list[str] | None = None,
                  image: str = "vllm/vllm-openai:v0.6.3") -> dict[str, Any]:
    """A container asking for ``gpus`` GPUs (0: none)."""
    return container(name, gpus or None, image=image, env=env, args=args, memory=memory)


def workload(kind: str, *containers: dict[str, Any], name: str = "w", namespace: str = "ml",
             annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None,
             pod_spec: dict[str, Any] | None = None, workload_labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A Pod or a workload whose pod template holds ``containers``."""
    spec: dict[str, Any] = {"containers": list(containers), **(pod_spec or {})}
    pod_meta: dict[str, Any] = {"labels": {"app": name, **(labels or {})}}
    if annotations:
        pod_meta["annotations"] = dict(annotations)
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if workload_labels:
        meta["labels"] = dict(workload_labels)
    if kind == "Pod":
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {**meta, **pod_meta}, "spec": spec}
    template = {"metadata": pod_meta, "spec": spec}
    group, version, _ = GVK[kind]
    api = f"{group}/{version}"
    if kind in ("Job",):
        spec.setdefault("restartPolicy", "Never")
        body: dict[str, Any] = {"template": template}
    elif kind == "CronJob":
        spec.setdefault("restartPolicy", "Never")
        body = {"schedule": "0 * * * *", "jobTemplate": {"spec": {"template": template}}}
    else:
        body = {"selector": {"matchLabels": {"app": name}}, "template": template}
        if kind == "StatefulSet":
            body["serviceName"] = name
    return {"apiVersion": api, "kind": kind, "metadata": meta, "spec": body}


def k8s_valid(obj: dict[str, Any]) -> None:
    """The object passes the Kubernetes OpenAPI schema (strict: no unknown fields)."""
    try:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        raise AssertionError(f"{obj.get('kind')} fails the {K8S_VERSION} schema: {str(exc).splitlines()[0]} "
                             f"at {list(exc.path)}") from None


@dataclass
class Service:
    """The running HTTPS service with a config and an inventory the test can swap."""

    state: AppState
    client: httpx.Client
    url: str
    seen: list[dict[str, Any]] = field(default_factory=list)
    last_patched: dict[str, Any] | None = None

    def post(self, path: str, content: bytes | dict[str, Any], **kw: Any) -> httpx.Response:
        data = content if isinstance(content, bytes) else orjson.dumps(content)
        return self.client.post(path, content=data, headers={"content-type": "application/json"}, **kw)

    def ask(self, webhook: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST a review; check the envelope; return the response part."""
        r = self.post(f"/{webhook}", body)
        assert r.status_code == 200, r.text
        assert r.headers["content-type"].startswith("application/json")
        out = r.json()
        assert out["apiVersion"] == "admission.k8s.io/v1" and out["kind"] == "AdmissionReview"
        resp = out["response"]
        assert resp["uid"] == body["request"]["uid"]
        assert isinstance(resp["allowed"], bool)
        for w in resp.get("warnings", []):
            assert len(w) <= 120, w
        if not resp["allowed"]:
            assert resp["status"]["code"] == 403 and resp["status"]["message"]
        if "patch" in resp:
            assert resp["patchType"] == "JSONPatch"
            self._check_patch(webhook, body, resp)
        self.seen.append(resp)
        return dict(resp)

    def _check_patch(self, webhook: str, body: dict[str, Any], resp: dict[str, Any]) -> None:
        """Every patch a test sees: it applies, the result passes the schema, and a second pass is empty."""
        patched = jsonpatch.apply_patch(body["request"]["object"], patch_ops(resp))
        k8s_valid(patched)
        again = copy.deepcopy(body)
        again["request"]["object"] = patched
        again["request"]["uid"] = str(uuid.uuid4())
        r = self.post(f"/{webhook}", again)
        assert r.status_code == 200
        second = r.json()["response"]
        assert "patch" not in second, f"second pass not empty: {patch_ops(second)}"
        self.last_patched = patched

    def validate(self, obj: dict[str, Any], **kw: Any) -> dict[str, Any]:
        return self.ask("validate", review(obj, **kw))

    def mutate(self, obj: dict[str, Any], **kw: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """Mutate, apply the patch, check the schema, and check that mutating the result changes nothing."""
        resp = self.ask("mutate", review(obj, **kw))  # applies, schema-checks and re-mutates any patch
        ops = patch_ops(resp)
        patched = jsonpatch.apply_patch(obj, ops) if ops else copy.deepcopy(obj)
        k8s_valid(patched)
        return patched, resp


def patch_ops(resp: dict[str, Any]) -> list[dict[str, Any]]:
    if "patch" not in resp:
        return []
    ops: list[dict[str, Any]] = orjson.loads(base64.b64decode(resp["patch"]))
    return ops


def dump(obj: Any) -> str:
    return yaml.safe_dump(obj, sort_keys=False)


def validate_object(running: Any, obj: dict[str, Any]) -> dict[str, Any]:
    """POST a review of ``obj`` to ``/validate`` of a running server (tests/harness.Running); its response part."""
    with running.client() as c:
        r = c.post("/validate", content=orjson.dumps(review(obj)), headers={"Content-Type": "application/json"})
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()["response"]
    return out
