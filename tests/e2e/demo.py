"""`make demo`: the e2e control plane with the bundled GPU nodes and vramgate wired in as the chart wires it.

Starts etcd, kube-apiserver, kube-controller-manager and kube-scheduler on loopback (the binaries
`make e2e-bin` builds), creates the Nodes of ``examples/cluster.yaml`` (labels, taints and GPU status as
GPU Feature Discovery and the device plugin show them), runs ``vramgate serve`` against that API server
with the chart's webhook configurations and the chart's scheduler extender, prints the ``export
KUBECONFIG=…`` line and stays up until Ctrl-C, then tears everything down. ``--check`` runs the README's
session once (a 70B Deployment on one GPU denied, a fitting Pod admitted and bound through the extender).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from tests.e2e.harness import REPO_ROOT, ControlPlane, HarnessError, missing_binaries
from tests.e2e.vramgate_fixture import NAMESPACE, Vramgate
from webhook.kube.manifests import load_nodes

NODES = REPO_ROOT / "examples" / "cluster.yaml"
DENIED = REPO_ROOT / "examples" / "llama70b-one-gpu.yaml"
FITTING_POD = """
apiVersion: v1
kind: Pod
metadata: {name: llama8b, namespace: default}
spec:
  containers:
  - name: vllm
    image: vllm/vllm-openai:v0.10.1
    command: ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "8192"]
    resources: {limits: {nvidia.com/gpu: "1"}}
"""


def create_nodes(cluster: ControlPlane, path: Path = NODES) -> list[str]:
    """Create every Node of an inventory file, then set its status (capacity, allocatable, conditions)."""
    names = []
    for node in load_nodes(path):
        meta = node["metadata"]
        body = {"apiVersion": "v1", "kind": "Node", "spec": node.get("spec") or {},
                "metadata": {"name": meta["name"], "labels": meta.get("labels", {})}}
        cluster.request("POST", "/api/v1/nodes", body)
        # A merge patch of the status subresource: the controller-manager may touch the Node meanwhile.
        cluster.request("PATCH", f"/api/v1/nodes/{meta['name']}/status", {"status": node.get("status") or {}},
                        content_type="application/merge-patch+json")
        names.append(meta["name"])
    return names


def run(check: bool = False) -> int:
    """Bring the demo up; with ``check``, run the README's session once and return 0 when it behaves."""
    missing = missing_binaries()
    if missing:
        print(f"demo: {', '.join(missing)} missing: run `make e2e-bin` first", file=sys.stderr)
        return 2
    cluster = ControlPlane()
    gate: Vramgate | None = None
    try:
        cluster.start()
        nodes = create_nodes(cluster)
        for ns in (NAMESPACE, "ml"):
            cluster.request("POST", "/api/v1/namespaces",
                            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}, ok=(201, 409))
        gate = Vramgate(cluster)
        gate.apply(gate.priority_classes())
        gate.start()
        gate.wait_inventory({n for n in nodes if not n.startswith("cpu-")})  # /inventory lists GPU nodes
        gate.register()
        cluster.start_scheduler([gate.extender()])
        print(f"demo: Kubernetes {cluster.version} with the {len(nodes)} nodes of {NODES.relative_to(REPO_ROOT)}; "
              f"vramgate at {gate.url} (webhooks and extender registered from the chart)")
        print(f"export KUBECONFIG={cluster.kubeconfig}")
        if check:
            return _session(cluster)
        print("demo: try `kubectl apply -f examples/llama70b-one-gpu.yaml`; Ctrl-C stops and cleans up", flush=True)
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        stop.wait()
        return 0
    except HarnessError as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 1
    finally:
        if gate is not None:
            gate.unregister()
            gate.stop()
        cluster.stop()


def _session(cluster: ControlPlane) -> int:
    """The README's session: a 70B Deployment on one GPU denied at apply, a fitting Pod admitted and bound."""
    denied = cluster.kubectl("apply", "-f", str(DENIED), check=False)
    if denied.returncode == 0 or "denied the request" not in denied.stderr:
        print(f"demo: the 70B Deployment was not denied: {denied.stdout}{denied.stderr}", file=sys.stderr)
        return 1
    print(denied.stderr.strip())
    admitted = cluster.kubectl("apply", "-f", "-", input=FITTING_POD, check=False)
    if admitted.returncode != 0:
        print(f"demo: the fitting Pod was refused: {admitted.stderr}", file=sys.stderr)
        return 1
    node = cluster.wait_pod_bound("llama8b", "default", timeout=60)
    print(f"pod/llama8b admitted and bound to {node}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make demo", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="run the README's session once and exit")
    return run(check=parser.parse_args(argv).check)


if __name__ == "__main__":
    sys.exit(main())
