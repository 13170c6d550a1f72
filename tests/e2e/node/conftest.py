"""Fixtures for the real-node suite: a control plane on a routable address, a real node, the chart installed by helm.

Fixtures
  node_cluster  (module)   :class:`NodeCluster`: the control plane bound to host.ADDRESS, the real
                           node (containerd + kubelet + kube-proxy), and the GPU nodes of
                           examples/cluster.yaml created through the API (tainted nvidia.com/gpu, so
                           the chart's own pods land on the real, CPU-only node)
  release       (module)   ``helm install`` of charts/vramgate as a user runs it (selfSigned certs,
                           the locally built images), uninstalled after the module unless a test did

A host that cannot run the node fails the suite with the reason (never a skip). Teardown checks
that the host is left as found and fails (as an error of the last test) when it is not.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.chart.render import INSTALL_HINT, HelmMissingError, helm_binary
from tests.e2e.demo import create_nodes
from tests.e2e.harness import ControlPlane, HarnessError, missing_binaries
from tests.e2e.node.host import ADDRESS, NODE_NAME, NodeUnavailable, RealNode, host_address

CHART = Path(__file__).resolve().parents[3] / "charts" / "vramgate"
RELEASE = "vg"
RELEASE_NS = "vramgate-system"
PREFIX = f"{RELEASE}-vramgate"


@dataclass
class NodeCluster:
    cp: ControlPlane
    node: RealNode
    gpu_nodes: list[str]
    helm: str
    #: Outputs kept for docs/install.md and the failure report (command -> output).
    transcript: dict[str, str] = field(default_factory=dict)

    def helm_run(self, *args: str, timeout: float = 600.0, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [self.helm, "--kubeconfig", str(self.cp.kubeconfig), *args]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        self.transcript[f"helm {' '.join(args)}"] = r.stdout + r.stderr
        if check and r.returncode != 0:
            raise AssertionError(
                f"helm {' '.join(args)} exited {r.returncode}:\n{r.stdout}\n{r.stderr}\n"
                f"{self.describe_release()}"
            )
        return r

    def pods(self, component: str | None = None) -> list[dict[str, Any]]:
        sel = "app.kubernetes.io/name=vramgate"
        if component:
            sel += f",app.kubernetes.io/component={component}"
        out = self.cp.request("GET", f"/api/v1/namespaces/{RELEASE_NS}/pods", query={"labelSelector": sel})
        return [p for p in out["items"] if not p["metadata"].get("deletionTimestamp")]

    def describe_release(self) -> str:
        """Pods, events and container logs of the release namespace (attached to failures)."""
        k = self.cp.kubectl
        parts = [k("get", "pods,jobs", "-n", RELEASE_NS, "-o", "wide", check=False).stdout]
        ev = k("get", "events", "-n", RELEASE_NS, "--sort-by=.lastTimestamp", check=False).stdout
        parts.append("\n".join(ev.splitlines()[-30:]))
        for pod in self.pods():
            for c in pod["spec"]["containers"]:
                log = k("logs", "-n", RELEASE_NS, pod["metadata"]["name"], "-c", c["name"], "--tail=15", check=False)
                parts.append(f"--- {pod['metadata']['name']}/{c['name']} ---\n{log.stdout}{log.stderr}")
        return "\n".join(parts)

    def wait_release_ready(self, timeout: float = 240.0) -> None:
        """Every Deployment of the release fully rolled out (updated, ready, no old replicas)."""

        def rolled_out() -> bool:
            deps = self.cp.request(
                "GET", f"/apis/apps/v1/namespaces/{RELEASE_NS}/deployments",
                query={"labelSelector": "app.kubernetes.io/name=vramgate"},
            )["items"]
            return bool(deps) and all(
                d["status"].get("observedGeneration") == d["metadata"]["generation"]
                and d["status"].get("updatedReplicas") == d["spec"]["replicas"]
                and d["status"].get("readyReplicas") == d["spec"]["replicas"]
                and d["status"].get("replicas") == d["spec"]["replicas"]
                for d in deps
            )

        try:
            self.cp.wait_for("the release's Deployments rolled out", rolled_out, timeout=timeout, interval=1.0)
        except TimeoutError as e:
            raise AssertionError(f"{e}\n{self.describe_release()}") from e


def install_args(*extra: str) -> list[str]:
    """`helm upgrade --install` as a user runs it, with the images built by build_images.sh."""
    from tests.e2e.node.host import images_env

    ref = images_env()["VRAMGATE_REF"]
    repo, _, tag = ref.rpartition(":")
    return [
        "upgrade", "--install", RELEASE, str(CHART),
        "--namespace", RELEASE_NS, "--create-namespace",
        "--set", f"image.repository={repo}", "--set", f"image.tag={tag}",
        "--set", "certs.mode=selfSigned",
        "--wait", "--timeout", "5m",
        *extra,
    ]


# Module scope: torn down before the rest of the suite runs, so the real node's pods and the second
# control plane do not compete with it for the two cores.
@pytest.fixture(scope="module")
def node_cluster() -> Iterator[NodeCluster]:
    missing = missing_binaries()
    if missing:
        pytest.fail(f"e2e binaries {missing} missing: run bash tests/e2e/build.sh", pytrace=False)
    try:
        helm = helm_binary()
    except HelmMissingError:
        pytest.fail(f"helm is required; install it with: {INSTALL_HINT}", pytrace=False)
    left: list[str] = []
    try:
        with host_address() as address:
            cp = ControlPlane(address=address)
            try:
                cp.start()
                node = RealNode(cp)
                node.start()
            except (NodeUnavailable, HarnessError) as e:
                cp.stop()
                pytest.fail(str(e), pytrace=False)
            try:
                # API-only nodes never run a pod: keep only the GPU ones (tainted nvidia.com/gpu), so
                # the chart's pods, which tolerate no taint, can only land on the real node.
                gpu_nodes = []
                for name in create_nodes(cp):
                    if cp.get_node(name).get("spec", {}).get("taints"):
                        gpu_nodes.append(name)
                    else:
                        cp.delete_node(name)
                print(
                    f"\nreal node {NODE_NAME} Ready ({', '.join(f'{k} {v:.1f}s' for k, v in node.timings.items())}); "
                    f"API server at {ADDRESS}; {len(gpu_nodes)} API-only nodes; logs in {cp.logs_dir}"
                )
                yield NodeCluster(cp, node, gpu_nodes, helm)
            finally:
                left = node.stop()
                cp.stop()
    except NodeUnavailable as e:
        pytest.fail(str(e), pytrace=False)
    if left:
        pytest.fail("the real node left the host changed:\n  " + "\n  ".join(left), pytrace=False)


@pytest.fixture(scope="module")
def release(node_cluster: NodeCluster) -> Iterator[NodeCluster]:
    nc = node_cluster
    t0 = time.monotonic()
    nc.helm_run(*install_args())
    nc.transcript["install seconds"] = f"{time.monotonic() - t0:.1f}"
    nc.wait_release_ready()
    nc.transcript["kubectl get pods"] = nc.cp.kubectl("get", "pods", "-n", RELEASE_NS, "-o", "wide").stdout
    artifacts = nc.cp.logs_dir / "helm-transcript.json"
    artifacts.write_text(json.dumps(nc.transcript, indent=2))
    yield nc
    if nc.helm_run("status", RELEASE, "-n", RELEASE_NS, check=False).returncode == 0:
        nc.helm_run("uninstall", RELEASE, "-n", RELEASE_NS, "--wait", "--timeout", "2m", check=False)
    artifacts.write_text(json.dumps(nc.transcript, indent=2))
