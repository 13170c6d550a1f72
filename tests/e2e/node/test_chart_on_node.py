"""The chart as a platform engineer installs it, on a real node: install, apply, failover, upgrade, uninstall.

The vramgate image is built from the repository's Dockerfile (on a Debian-packaged Python base),
the webhook is called by kube-apiserver through its Service. Installed with its defaults (native
placement) the chart runs no scheduler and the cluster's default scheduler binds a GPU pod by the
webhook's VRAM affinity; upgraded with ``extender.enabled=true`` the chart's own kube-scheduler binds
one through its extender sidecar. The tests run in file order: each leaves the release as the next
expects it, and the last one uninstalls it.
"""

from __future__ import annotations

import base64
import datetime as dt
import threading
import time
from typing import Any

import pytest

from tests.e2e.demo import DENIED, FITTING_POD
from tests.e2e.harness import ApiError
from tests.e2e.node.conftest import PREFIX, RELEASE, RELEASE_NS, NodeCluster, install_args
from tests.e2e.node.host import NODE_NAME

pytestmark = pytest.mark.e2e_node

SCHEDULER = "vramgate-scheduler"
A_ESTIMATE = "vramgate.io/estimate"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def gpu_pod(name: str, namespace: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "containers": [
                {
                    "name": "vllm",
                    "image": "vllm/vllm-openai:v0.10.1",
                    "command": ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "8192"],
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ]
        },
    }


class CreateLoad:
    """A client creating GPU pods back to back (``?dryRun=All``: admission runs in full, as the
    webhooks are ``sideEffects: None`` or ``NoneOnDryRun``, and nothing is stored) while a ``with`` block runs; counts
    the pods that came back mutated (``admitted``), unmutated, and the refused (``failed``)."""

    def __init__(self, nc: NodeCluster) -> None:
        self.nc = nc
        self.counts = {"admitted": 0, "unmutated": 0, "failed": 0}
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            i += 1
            try:
                p = self.nc.cp.request(
                    "POST", "/api/v1/namespaces/default/pods", gpu_pod(f"load-{i}"), query={"dryRun": "All"},
                    timeout=15,
                )
            except ApiError as e:
                self.counts["failed"] += 1
                self.errors.append(str(e)[:300])
                continue
            key = "admitted" if A_ESTIMATE in (p["metadata"].get("annotations") or {}) else "unmutated"
            self.counts[key] += 1
            time.sleep(0.05)

    def __enter__(self) -> CreateLoad:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


def _ts(value: str) -> dt.datetime:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


def _serving_serial(nc: NodeCluster) -> int:
    from cryptography import x509

    secret = nc.cp.request("GET", f"/api/v1/namespaces/{RELEASE_NS}/secrets/{PREFIX}-tls")
    return x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"])).serial_number


def _issuer_in_bundle(nc: NodeCluster, bundle: bytes) -> bool:
    from cryptography import x509

    secret = nc.cp.request("GET", f"/api/v1/namespaces/{RELEASE_NS}/secrets/{PREFIX}-tls")
    leaf = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    return any(ca.subject == leaf.issuer for ca in x509.load_pem_x509_certificates(bundle))


def _ca_bundles(nc: NodeCluster) -> list[bytes]:
    out = []
    for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
        cfg = nc.cp.request("GET", f"/apis/admissionregistration.k8s.io/v1/{kind}/{PREFIX}")
        out += [base64.b64decode(w["clientConfig"]["caBundle"]) for w in cfg["webhooks"]]
    return out


def test_helm_install_runs_every_component_on_the_real_node(release: NodeCluster) -> None:
    nc = release
    pods = nc.pods()
    by_component: dict[str, list[dict[str, Any]]] = {}
    for p in pods:
        by_component.setdefault(p["metadata"]["labels"]["app.kubernetes.io/component"], []).append(p)
    # Native placement, the default: no scheduler of vramgate's runs.
    assert sorted(by_component) == ["controller", "webhook"], nc.describe_release()
    for component, ps in by_component.items():
        assert len(ps) == 2, (component, nc.describe_release())
        for p in ps:
            # On the real node, as the chart's own ServiceAccount, every container ready.
            assert p["spec"]["nodeName"] == NODE_NAME
            assert p["spec"]["serviceAccountName"] == f"{PREFIX}-{component}"
            assert p["status"]["phase"] == "Running"
            assert all(c["ready"] for c in p["status"]["containerStatuses"]), p["status"]
    # The selfSigned hook Jobs ran: the Secret exists and its CA is the caBundle of every webhook.
    secret = nc.cp.request("GET", f"/api/v1/namespaces/{RELEASE_NS}/secrets/{PREFIX}-tls")
    assert secret["type"] == "kubernetes.io/tls"
    ca = base64.b64decode(secret["data"]["ca.crt"])
    bundles = _ca_bundles(nc)
    assert bundles and all(b == ca for b in bundles)
    # The hook Jobs are deleted once they succeed (hook-delete-policy: hook-succeeded).
    jobs = nc.cp.request("GET", f"/apis/batch/v1/namespaces/{RELEASE_NS}/jobs")["items"]
    assert jobs == [], [j["metadata"]["name"] for j in jobs]
    # The image runs as the chart says: non-root, on a read-only root filesystem, /tmp writable.
    probe = (
        "import os,tempfile\n"
        "try:\n open('/probe','w')\nexcept OSError as e:\n print('ro', e.errno)\n"
        "print('uid', os.getuid(), os.getgid())\n"
        "with tempfile.NamedTemporaryFile() as f: print('tmp ok')"
    )
    webhook = by_component["webhook"][0]["metadata"]["name"]
    out = nc.cp.kubectl("exec", "-n", RELEASE_NS, webhook, "--", "python", "-c", probe).stdout.split("\n")
    assert out[:3] == ["ro 30", "uid 65532 65532", "tmp ok"], out  # 30: EROFS
    # Start time of the image: container start to Ready, recorded for docs/install.md.
    for p in by_component["webhook"]:
        started = _ts(p["status"]["containerStatuses"][0]["state"]["running"]["startedAt"])
        ready = next(c for c in p["status"]["conditions"] if c["type"] == "Ready")
        nc.transcript[f"webhook {p['metadata']['name']} start to Ready"] = str(
            (_ts(ready["lastTransitionTime"]) - started).total_seconds()
        )


def test_kubectl_apply_of_a_model_no_gpu_holds_is_denied_by_the_in_cluster_webhook(release: NodeCluster) -> None:
    nc = release
    nc.cp.request(
        "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}},
        ok=(201, 409),
    )
    r = nc.cp.kubectl("apply", "-f", str(DENIED), check=False)
    nc.transcript["kubectl apply -f examples/llama70b-one-gpu.yaml"] = r.stdout + r.stderr
    assert r.returncode != 0, r.stdout
    assert 'admission webhook "validate.vramgate.io" denied the request: deployment/llama70b: needs' in r.stderr
    # The fix is in the message a developer reads.
    assert "--tensor-parallel-size" in r.stderr, r.stderr
    assert nc.cp.request("GET", "/apis/apps/v1/namespaces/ml/deployments/llama70b", ok=(404,))


def _scheduled_by(nc: NodeCluster, pod: str) -> str:
    """Which scheduler reported binding this pod (by its UID: an earlier pod of the same name has events too)."""
    uid = nc.cp.get_pod(pod)["metadata"]["uid"]

    def scheduled_events() -> list[dict[str, Any]]:
        events = nc.cp.request(
            "GET", "/api/v1/namespaces/default/events",
            query={"fieldSelector": f"involvedObject.name={pod},involvedObject.uid={uid}"},
        )["items"]
        return [e for e in events if e["reason"] == "Scheduled"]

    # The scheduler records the event asynchronously, after the binding: wait for it.
    scheduled = nc.cp.wait_for("the Scheduled event", scheduled_events, timeout=30, interval=0.5)
    return str(scheduled[0]["reportingComponent"])


def test_a_fitting_gpu_pod_is_placed_natively_by_the_default_scheduler(release: NodeCluster) -> None:
    nc = release
    r = nc.cp.kubectl("apply", "-f", "-", input=FITTING_POD, check=False)
    nc.transcript["kubectl apply (fitting pod, native)"] = r.stdout + r.stderr
    assert r.returncode == 0, r.stderr
    pod = nc.cp.get_pod("llama8b")
    assert pod["spec"]["schedulerName"] == "default-scheduler"
    assert GPU_TOLERATION in pod["spec"]["tolerations"]
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert any(e["key"] == "vramgate.io/gpu-memory-mib" and e["operator"] == "Gt"
               for t in terms["nodeSelectorTerms"] for e in t["matchExpressions"])
    node = nc.cp.wait_pod_bound("llama8b", timeout=60)
    assert node in nc.gpu_nodes
    assert _scheduled_by(nc, "llama8b") == "default-scheduler"
    nc.cp.kubectl("delete", "pod", "llama8b", "--wait=true", "--grace-period=0", "--force")


def test_helm_upgrade_with_the_extender_adds_its_scheduler(release: NodeCluster) -> None:
    nc = release
    # The extender sidecar's own ServiceAccount may read its metrics port (metrics.auth): bound to the reader role.
    reader = [f"metrics.reader.subjects[0].{k}={v}" for k, v in (
        ("kind", "ServiceAccount"), ("name", f"{RELEASE}-vramgate-scheduler"), ("namespace", RELEASE_NS))]
    nc.helm_run(*install_args("--set", "extender.enabled=true", *[a for kv in reader for a in ("--set", kv)]))
    nc.wait_release_ready()
    by_component = {p["metadata"]["labels"]["app.kubernetes.io/component"] for p in nc.pods()}
    assert by_component == {"controller", "scheduler", "webhook"}, nc.describe_release()
    assert len(nc.pods("scheduler")) == 2


def test_a_fitting_gpu_pod_is_mutated_and_bound_by_the_charts_scheduler_through_its_extender(
    release: NodeCluster,
) -> None:
    nc = release
    r = nc.cp.kubectl("apply", "-f", "-", input=FITTING_POD, check=False)
    nc.transcript["kubectl apply (fitting pod)"] = r.stdout + r.stderr
    assert r.returncode == 0, r.stderr
    pod = nc.cp.get_pod("llama8b")
    assert pod["spec"]["schedulerName"] == SCHEDULER
    assert GPU_TOLERATION in pod["spec"]["tolerations"]
    assert A_ESTIMATE in pod["metadata"]["annotations"]
    node = nc.cp.wait_pod_bound("llama8b", timeout=60)
    assert node in nc.gpu_nodes
    assert _scheduled_by(nc, "llama8b") == SCHEDULER
    # The extender sidecar of the leading scheduler answered this pod's filter (read from inside the pod:
    # the extender listens on 127.0.0.1 only; its metrics port asks for a token, the pod's ServiceAccount's).
    lease = nc.cp.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/{RELEASE_NS}/leases/{SCHEDULER}")
    leader = lease["spec"]["holderIdentity"].split("_")[0]
    script = (
        "import ssl,urllib.request as u;c=ssl._create_unverified_context();"
        "t=open('/var/run/secrets/kubernetes.io/serviceaccount/token').read().strip();"
        "r=u.Request('https://127.0.0.1:8445/metrics',headers={'Authorization':'Bearer '+t});"
        "print(u.urlopen(r,context=c).read().decode())"
    )
    out = nc.cp.kubectl("exec", "-n", RELEASE_NS, leader, "-c", "extender", "--", "python", "-c", script).stdout
    filters = [line for line in out.splitlines() if line.startswith('vramgate_extender_requests_total{verb="filter"}')]
    assert filters and float(filters[0].split()[-1]) >= 1, out[-2000:]
    nc.cp.kubectl("delete", "pod", "llama8b", "--wait=false")


#: What each ServiceAccount of the chart must NOT be able to do (kubectl auth can-i --as).
FORBIDDEN = {
    "webhook": [
        ("get", "secrets", "-A"), ("list", "secrets", "-A"), ("patch", "pods", "-A"), ("delete", "pods", "-A"),
        ("update", "nodes", ""), ("create", "pods", "-A"), ("patch", "mutatingwebhookconfigurations", ""),
    ],
    "controller": [
        ("get", "secrets", "-A"), ("list", "secrets", "-A"), ("create", "pods", "-A"),
        ("delete", "pods", "-A"),  # remediation is off by default: no evictions, no deletes
        ("patch", "validatingwebhookconfigurations", ""), ("delete", "nodes", ""),
    ],
    # Upstream's system:kube-scheduler role may delete pods (preemption); it may not edit them.
    "scheduler": [
        ("get", "secrets", "-A"), ("list", "secrets", "-A"), ("patch", "pods", "-A"), ("patch", "nodes", ""),
        ("create", "pods", "-A"), ("update", "deployments", "-A"),
    ],
}
#: And what each must be able to do for its job (a check that can-i answers at all).
ALLOWED = {
    "webhook": [("list", "nodes", "")],
    "controller": [("patch", "nodes", ""), ("list", "nodes", "")],
    "scheduler": [("create", "pods", "-A --subresource=binding"), ("list", "nodes", "")],
}


@pytest.mark.parametrize("component", sorted(FORBIDDEN))
def test_the_charts_service_accounts_have_least_privilege(release: NodeCluster, component: str) -> None:
    nc = release
    sa = f"system:serviceaccount:{RELEASE_NS}:{PREFIX}-{component}"

    def can(verb: str, resource: str, scope: str) -> bool:
        args = ["auth", "can-i", verb, resource, "--as", sa, *scope.split()]
        r = nc.cp.kubectl(*args, check=False)
        assert r.stdout.strip() in ("yes", "no"), r.stderr
        return r.stdout.strip() == "yes"

    granted = [f"{v} {r} {s}".strip() for v, r, s in FORBIDDEN[component] if can(v, r, s)]
    assert granted == [], f"{sa} may {granted}"
    missing = [f"{v} {r} {s}".strip() for v, r, s in ALLOWED[component] if not can(v, r, s)]
    assert missing == [], f"{sa} may not {missing}"
    # The Secret it serves from, and nothing else in the namespace, is readable by the webhook.
    if component == "webhook":
        assert not can("get", "secrets/other", f"--namespace={RELEASE_NS}")


def test_the_pdbs_keep_one_webhook_through_a_drain(release: NodeCluster) -> None:
    nc = release
    pods = [p["metadata"]["name"] for p in nc.pods("webhook")]
    assert len(pods) == 2

    def evict(name: str) -> int:
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": RELEASE_NS},
        }
        try:
            nc.cp.request("POST", f"/api/v1/namespaces/{RELEASE_NS}/pods/{name}/eviction", body, ok=(201,))
        except ApiError as e:
            return e.status
        return 201

    # What `kubectl drain` does: the first eviction goes through, the second waits on the PDB.
    assert evict(pods[0]) == 201
    assert evict(pods[1]) == 429
    # Once the replacement is ready (and the disruption controller has counted it), drain's retry
    # goes through, as `kubectl drain` retries on 429.
    nc.wait_release_ready()
    nc.cp.wait_for("the PDB to allow the second eviction", lambda: evict(pods[1]) == 201, timeout=60, interval=1)
    nc.wait_release_ready()


def test_killing_the_active_controller_pod_fails_over(release: NodeCluster) -> None:
    nc = release
    path = f"/apis/coordination.k8s.io/v1/namespaces/{RELEASE_NS}/leases/{PREFIX}-controller"
    lease = nc.cp.wait_for("a controller leader", lambda: nc.cp.request("GET", path, ok=(200,)), timeout=60)
    holder = lease["spec"]["holderIdentity"]
    pod = holder.split("_")[0]
    assert pod in {p["metadata"]["name"] for p in nc.pods("controller")}, holder
    t0 = time.monotonic()
    nc.cp.request(
        "DELETE", f"/api/v1/namespaces/{RELEASE_NS}/pods/{pod}", {"gracePeriodSeconds": 0}, ok=(200, 202)
    )

    def new_leader() -> str | None:
        h = nc.cp.request("GET", path)["spec"].get("holderIdentity") or ""
        return h if h and not h.startswith(pod + "_") else None

    after = nc.cp.wait_for("another controller to take the Lease", new_leader, timeout=90, interval=0.5)
    nc.transcript["controller failover seconds"] = f"{time.monotonic() - t0:.1f}"
    survivor = after.split("_")[0]
    assert survivor in {p["metadata"]["name"] for p in nc.pods("controller")}
    # The new leader does the leader's work: it labels the GPU nodes' health again.
    nc.wait_release_ready()


def test_helm_upgrade_rotates_the_cert_and_loses_no_admission(release: NodeCluster) -> None:
    nc = release
    serial_before = _serving_serial(nc)
    ca_before = _ca_bundles(nc)[0]
    load = CreateLoad(nc)
    with load:
        time.sleep(2)
        # A changed pod annotation rolls every Deployment; a renewal window longer than the installed
        # cert's remaining life (365 days) makes the pre-upgrade hook re-issue it (for 800 days), and the
        # post-upgrade hook patch the new caBundle.
        nc.helm_run(*install_args(
            "--set", "extender.enabled=true",
            "--set", "webhook.podAnnotations.e2e/upgraded=yes",
            "--set", "controller.podAnnotations.e2e/upgraded=yes",
            "--set", "certs.selfSigned.days=800", "--set", "certs.selfSigned.renewBeforeDays=399",
        ))
        nc.wait_release_ready()
        time.sleep(3)
    nc.transcript["upgrade admissions"] = str(load.counts)
    assert load.counts["admitted"] > 20, load.counts
    assert load.counts["failed"] == 0 and load.counts["unmutated"] == 0, (load.counts, load.errors[:5])
    assert _serving_serial(nc) != serial_before
    bundles = _ca_bundles(nc)
    assert all(b == bundles[0] for b in bundles)
    # The new serving cert's issuer is trusted by every webhook (the CA is kept or re-issued; a
    # re-issued one is added to the bundle before any pod serves a cert it signed).
    assert _issuer_in_bundle(nc, bundles[0]), (ca_before[:64], bundles[0][:64])
    # And the pods serve the new certificate: admission through the Service still works.
    p = nc.cp.request("POST", "/api/v1/namespaces/default/pods", gpu_pod("after-upgrade"), query={"dryRun": "All"})
    assert A_ESTIMATE in p["metadata"]["annotations"]


def test_helm_uninstall_leaves_no_webhook_configuration_behind(release: NodeCluster) -> None:
    nc = release
    # GPU pods keep being created through the uninstall: each is either judged by vramgate (before
    # the pre-delete hook removed the webhook configurations) or not sent to it at all (after); none
    # may be refused because the configurations outlived the pods behind them.
    load = CreateLoad(nc)
    with load:
        time.sleep(1)
        nc.helm_run("uninstall", RELEASE, "-n", RELEASE_NS, "--wait", "--timeout", "2m")
        time.sleep(1)
    nc.transcript["uninstall admissions"] = str(load.counts)
    assert load.counts["failed"] == 0, (load.counts, load.errors[:5])
    assert load.counts["admitted"] > 0 and load.counts["unmutated"] > 0, load.counts
    for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
        items = nc.cp.request("GET", f"/apis/admissionregistration.k8s.io/v1/{kind}")["items"]
        assert [i["metadata"]["name"] for i in items] == []
    # GPU pods are created again, unjudged: nothing left blocks the cluster.
    p = nc.cp.request("POST", "/api/v1/namespaces/default/pods", gpu_pod("after-uninstall"), query={"dryRun": "All"})
    assert A_ESTIMATE not in (p["metadata"].get("annotations") or {})
    leftovers = nc.cp.request(
        "GET",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        query={"labelSelector": "app.kubernetes.io/name=vramgate"},
    )["items"]
    assert leftovers == []
