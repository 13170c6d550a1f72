"""A real autoscaler acts on vramgate's VRAM affinity (issue #27): Karpenter's KWOK provider, built from the
``sigs.k8s.io/karpenter`` module (tests/e2e/karpenter/build.sh), and KWOK (bench/cluster/build_kwok.sh) keeping the
nodes it creates Ready, beside the real scheduler with vramgate's extender.

Two NodePools start empty: ``l4`` (one NVIDIA L4 per node, cheap) and ``h100`` (one H100, dear). They say what
GPU their nodes will have in one of two ways (the module runs once each): GPU Feature Discovery's labels in the
NodePool template (``nvidia.com/gpu.memory`` …), as a platform team may declare GPU node groups; or only
Karpenter's AWS well-known labels on the instance types (``karpenter.k8s.aws/instance-gpu-name``), as the AWS
provider sets them. A pending pod whose model needs more than an L4 makes Karpenter launch an H100 node, never
an L4 one; a pod that fits both gets the cheaper L4.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import GPU_RESOURCE, ApiError, ControlPlane, Process, free_port
from tests.e2e.vramgate_fixture import Vramgate

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
KARPENTER_GO_MOD = ROOT / "tests" / "e2e" / "karpenter" / "go.mod"
KWOK_GO_MOD = ROOT / "bench" / "cluster" / "kwok" / "go.mod"
NODECLASS = {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
POOLS = {
    # pool: (instance type, GFD product label, nvidia.com/gpu.memory MiB as GFD writes it, price per hour,
    #        Karpenter's AWS instance-gpu-name)
    "l4": ("gpu-l4-1x", "NVIDIA-L4", 23034, 0.80, "l4"),
    "h100": ("gpu-h100-1x", "NVIDIA-H100-80GB-HBM3", 81559, 4.00, "h100"),
}
# How the pools tell what GPU their nodes will have: GFD's labels in the NodePool template (what a platform team
# writes), or only Karpenter's own well-known AWS labels on the instance types (what the AWS provider sets).
LABELLING = ("nodepool-gfd-labels", "karpenter-aws-labels")


def _pinned(go_mod: Path, module: str) -> str:
    for line in go_mod.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0] == "require" and parts[1] == module:
            return parts[2]
        if len(parts) >= 2 and parts[0] == module:
            return parts[1]
    raise AssertionError(f"{module} is not pinned in {go_mod}")


KARPENTER_DIR = ROOT / ".cache" / "karpenter" / _pinned(KARPENTER_GO_MOD, "sigs.k8s.io/karpenter")
KWOK_DIR = ROOT / ".cache" / "kwok" / _pinned(KWOK_GO_MOD, "sigs.k8s.io/kwok")


def instance_types(labelling: str) -> list[dict[str, Any]]:
    """Karpenter KWOK's instance-type file (kwok/cloudprovider/instance_types.json's shape): one GPU each.

    Every key of an offering's requirements becomes a label Karpenter knows and puts on the node
    (kwok/cloudprovider/helpers.go newInstanceType, cloudprovider.go addInstanceLabels).
    """
    out = []
    for itype, _, _, price, aws_name in POOLS.values():
        requirements = [
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["test-zone-a"]},
        ]
        if labelling == "karpenter-aws-labels":
            requirements += [
                {"key": "karpenter.k8s.aws/instance-gpu-name", "operator": "In", "values": [aws_name]},
                {"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "In", "values": ["1"]},
                {"key": "karpenter.k8s.aws/instance-gpu-manufacturer", "operator": "In", "values": ["nvidia"]},
            ]
        out.append({
            "name": itype,
            "offerings": [{"Price": price, "Available": True, "Requirements": requirements}],
            "architecture": "amd64",
            "operatingSystems": ["linux"],
            "resources": {"cpu": "16", "memory": "64Gi", "pods": "110", "ephemeral-storage": "100Gi",
                          GPU_RESOURCE: "1"},
        })
    return out


def nodepool(name: str, labelling: str) -> dict[str, Any]:
    itype, product, mib, _, _ = POOLS[name]
    labels = {"vramgate-e2e/pool": name}
    if labelling == "nodepool-gfd-labels":
        labels |= {"nvidia.com/gpu.product": product, "nvidia.com/gpu.memory": str(mib), "nvidia.com/gpu.count": "1"}
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeClassRef": NODECLASS,
                    "requirements": [
                        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [itype]},
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                    ],
                    "expireAfter": "Never",
                },
            },
            "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never"},
            "limits": {GPU_RESOURCE: "4"},
        },
    }


def gpu_pod(name: str, namespace: str, args: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
        "spec": {"containers": [{
            "name": "vllm", "image": "vllm/vllm-openai:v0.10.1", "args": args,
            "resources": {"requests": {"cpu": "1", "memory": "4Gi"}, "limits": {GPU_RESOURCE: "1"}},
        }]},
    }


def _apply(cluster: ControlPlane, obj: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-f", "-", input=json.dumps(obj))


def _karpenter_nodes(cluster: ControlPlane) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cluster.request(
        "GET", "/api/v1/nodes", query={"labelSelector": "karpenter.sh/nodepool"})["items"]
    return items


def _nodeclaims(cluster: ControlPlane) -> list[dict[str, Any]]:
    try:
        items: list[dict[str, Any]] = cluster.request("GET", "/apis/karpenter.sh/v1/nodeclaims")["items"]
    except ApiError:
        return []
    return items


@pytest.fixture(scope="module", params=LABELLING)
def karpenter(request: pytest.FixtureRequest, cluster: ControlPlane, vramgate: Vramgate
              ) -> Iterator[tuple[ControlPlane, str]]:
    """The CRDs, the two empty NodePools, KWOK and Karpenter; everything they made is gone afterwards."""
    labelling = str(request.param)
    binary = KARPENTER_DIR / "bin" / "karpenter-kwok"
    kwok = KWOK_DIR / "bin" / "kwok"
    if not binary.exists() or not (KARPENTER_DIR / "crds").is_dir() or not kwok.exists():
        pytest.fail(f"Karpenter or KWOK missing ({KARPENTER_DIR}, {KWOK_DIR}): run bash tests/e2e/karpenter/build.sh "
                    "and bash bench/cluster/build_kwok.sh (make e2e-bin does both)", pytrace=False)
    if not vramgate.alive():
        vramgate.start()
    vramgate.wait_ready()
    for crd in sorted((KARPENTER_DIR / "crds").glob("*.yaml")):
        cluster.kubectl("apply", "--server-side", "-f", str(crd))
    for crd_name in ("nodepools.karpenter.sh", "nodeclaims.karpenter.sh", "kwoknodeclasses.karpenter.kwok.sh"):
        cluster.kubectl("wait", "--for=condition=Established", f"crd/{crd_name}", "--timeout=60s")
    types = cluster.tmpdir / "karpenter-instance-types.json"
    types.write_text(json.dumps(instance_types(labelling)))
    procs = [
        Process("kwok", [str(kwok), f"--kubeconfig={cluster.kubeconfig}", f"--config={KWOK_DIR / 'stages.yaml'}",
                         "--manage-all-nodes=false", f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake",
                         "--node-lease-duration-seconds=0", "--server-address=", "--cidr=100.126.0.1/16",
                         "--node-ip=127.0.0.1"],
                cluster.logs_dir / "kwok.log", cluster.tmpdir),
        Process("karpenter", [str(binary)], cluster.logs_dir / "karpenter.log", cluster.tmpdir, env={
            **os.environ, "KUBECONFIG": str(cluster.kubeconfig), "SYSTEM_NAMESPACE": "kube-system",
            "DISABLE_LEADER_ELECTION": "true", "INSTANCE_TYPES_FILE_PATH": str(types),
            "METRICS_PORT": str(free_port()), "HEALTH_PROBE_PORT": str(free_port()), "LOG_LEVEL": "debug",
            "BATCH_IDLE_DURATION": "1s", "BATCH_MAX_DURATION": "5s", "KARPENTER_SERVICE": "",
        }),
    ]
    try:
        _apply(cluster, {"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass",
                         "metadata": {"name": "default"}, "spec": {}})
        for pool in POOLS:
            _apply(cluster, nodepool(pool, labelling))
        # vramgate found no NodePool CRD when it started (404: asked again in 10 minutes); now it lists them.
        vramgate.restart()
        vramgate.wait_ready()
        yield cluster, labelling
    finally:
        for pool in POOLS:
            cluster.request("DELETE", f"/apis/karpenter.sh/v1/nodepools/{pool}", ok=(200, 202, 404))
        try:  # Karpenter drains and deletes what it launched while it still runs
            cluster.wait_for("Karpenter's nodes gone", lambda: not _karpenter_nodes(cluster) and not
                             _nodeclaims(cluster), timeout=60)
        finally:
            for p in procs:
                p.stop()
            for claim in _nodeclaims(cluster):  # whatever is left: no controller will finish it now
                name = claim["metadata"]["name"]
                cluster.request("PATCH", f"/apis/karpenter.sh/v1/nodeclaims/{name}",
                                {"metadata": {"finalizers": None}}, content_type="application/merge-patch+json",
                                ok=(200, 404))
                cluster.request("DELETE", f"/apis/karpenter.sh/v1/nodeclaims/{name}", ok=(200, 202, 404))
            for node in _karpenter_nodes(cluster):
                name = node["metadata"]["name"]
                cluster.request("PATCH", f"/api/v1/nodes/{name}", {"metadata": {"finalizers": None}},
                                content_type="application/merge-patch+json", ok=(200, 404))
                cluster.request("DELETE", f"/api/v1/nodes/{name}", ok=(200, 202, 404))
            cluster.request("DELETE", "/apis/karpenter.kwok.sh/v1alpha1/kwoknodeclasses/default", ok=(200, 202, 404))


def _bound(cluster: ControlPlane, namespace: str, name: str, timeout: float) -> dict[str, Any]:
    pod: dict[str, Any] = cluster.wait_for(
        f"pod {name} bound to a node Karpenter launched",
        lambda: (p := cluster.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}"))["spec"].get("nodeName")
        and p,
        timeout=timeout, interval=0.5)
    return pod


def test_karpenter_launches_the_gpu_the_model_needs_and_the_cheaper_one_when_both_fit(
    karpenter: tuple[ControlPlane, str], vramgate: Vramgate, namespace: str
) -> None:
    cluster, labelling = karpenter
    # No GPU node from an earlier module: the pools alone place these pods.
    cluster.wait_for("an empty GPU inventory", lambda: not vramgate.inventory_nodes(), timeout=15)
    assert not _karpenter_nodes(cluster)

    # Llama-3.1-70B in 4-bit: ~37 GiB of weights, more than an L4's 22.5 GiB.
    pod = gpu_pod("big", namespace, ["--model", "hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4",
                                     "--max-model-len", "8192"])
    created = cluster.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod)
    # No GPU node exists yet: admitted unchecked, and given the VRAM affinity Karpenter reads.
    floor = int(created["metadata"]["annotations"]["vramgate.io/vram-per-gpu-min-mib"])
    assert floor > 23034 * 0.9
    terms = created["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    exprs = [e for t in terms["nodeSelectorTerms"] for e in t["matchExpressions"]]
    # GFD's label for the first pools, Karpenter's GPU names for the second: the terms either kind acts on.
    gfd = [e for e in exprs if e["key"] == "nvidia.com/gpu.memory" and e["operator"] == "Gt"]
    assert gfd and 23034 <= int(gfd[0]["values"][0]) < 81559
    names = next(e["values"] for e in exprs if e["key"] == "karpenter.k8s.aws/instance-gpu-name")
    assert "h100" in names and "l4" not in names
    bound = _bound(cluster, namespace, "big", timeout=120)
    node = cluster.get_node(bound["spec"]["nodeName"])
    assert node["metadata"]["labels"]["karpenter.sh/nodepool"] == "h100"
    if labelling == "karpenter-aws-labels":  # no GFD label anywhere: the Karpenter term placed it
        assert "nvidia.com/gpu.memory" not in node["metadata"]["labels"]
        assert node["metadata"]["labels"]["karpenter.k8s.aws/instance-gpu-name"] == "h100"
    pools = {c["metadata"]["labels"].get("karpenter.sh/nodepool") for c in _nodeclaims(cluster)}
    assert pools == {"h100"}, "Karpenter launched a node from a pool whose GPU cannot hold the model"

    # An 8B model fits either GPU; the H100's only GPU is taken, so a new node: the cheaper L4.
    pod = gpu_pod("small", namespace, ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "8192"])
    cluster.request("POST", f"/api/v1/namespaces/{namespace}/pods", pod)
    bound = _bound(cluster, namespace, "small", timeout=120)
    node = cluster.get_node(bound["spec"]["nodeName"])
    assert node["metadata"]["labels"]["karpenter.sh/nodepool"] == "l4"


def _apply_pod(cluster: ControlPlane, pod: dict[str, Any], *flags: str) -> tuple[int, str]:
    """``kubectl apply`` as a developer runs it: the exit code and the warnings (joined, as kubectl splits them)."""
    r = cluster.kubectl("apply", "-f", "-", *flags, input=json.dumps(pod), check=False)
    lines = [line.removeprefix("Warning: ") for line in r.stderr.splitlines() if line.startswith("Warning: ")]
    said = " ".join(w.removeprefix("…").removesuffix("…") for w in lines)
    return r.returncode, said if r.returncode == 0 else r.stderr


def _set_gpu_limit(cluster: ControlPlane, pool: str, gpus: int) -> None:
    cluster.request("PATCH", f"/apis/karpenter.sh/v1/nodepools/{pool}", {"spec": {"limits": {GPU_RESOURCE: str(gpus)}}},
                    content_type="application/merge-patch+json")


def test_a_model_no_node_holds_is_admitted_when_a_nodepool_can_add_one(
    karpenter: tuple[ControlPlane, str], vramgate: Vramgate, namespace: str
) -> None:
    """Issue #42, "Fits after scale-up": only an L4 node is up; the H100 pool makes the 70B pod admissible, and
    Karpenter then launches the H100 it was admitted for. With the pool at its GPU limit it is rejected."""
    cluster, labelling = karpenter
    # The earlier test's pods gone with their namespace (else Karpenter relaunches an H100 for its 70B pod).
    cluster.wait_for("no other test's pods", lambda: not [
        p for p in cluster.request("GET", "/api/v1/pods")["items"]
        if p["metadata"]["namespace"].startswith("e2e-") and p["metadata"]["namespace"] != namespace], timeout=120,
        interval=0.5)
    # An L4 node up (the earlier test's, or a new one), and no H100 node: its NodeClaim goes, Karpenter drains it.
    cluster.request("POST", f"/api/v1/namespaces/{namespace}/pods",
                    gpu_pod("l4-user", namespace, ["--model", "meta-llama/Llama-3.1-8B-Instruct",
                                                   "--max-model-len", "8192"]))
    _bound(cluster, namespace, "l4-user", timeout=120)

    def only_l4() -> bool:
        for claim in _nodeclaims(cluster):
            if claim["metadata"]["labels"].get("karpenter.sh/nodepool") == "h100":
                cluster.request("DELETE", f"/apis/karpenter.sh/v1/nodeclaims/{claim['metadata']['name']}",
                                ok=(200, 202, 404))
        nodes = vramgate.inventory_nodes()
        return bool(nodes) and all(n["vram_mib"] == 23034 for n in nodes.values())

    cluster.wait_for("only L4 nodes in vramgate's inventory", only_l4, timeout=90, interval=1)

    big = gpu_pod("big-after", namespace, ["--model", "hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4",
                                           "--max-model-len", "8192"])
    # The H100 pool full: nothing can hold it, and (where the pool's GPUs are known) the rejection says why.
    _set_gpu_limit(cluster, "h100", 0)
    code, said = cluster.wait_for("vramgate to see the full pool",
                                  lambda: (r := _apply_pod(cluster, big, "--dry-run=server"))[0] != 0 and r,
                                  timeout=30, interval=0.5)
    assert "the largest GPU in the cluster has 22.5 GiB" in said, said
    if labelling == "nodepool-gfd-labels":
        assert "NodePool h100 could add gpu-h100-1x" in said and "but it is full" in said, said

    _set_gpu_limit(cluster, "h100", 4)
    cluster.wait_for("vramgate to see the pool's room",
                     lambda: _apply_pod(cluster, big, "--dry-run=server")[0] == 0, timeout=30, interval=0.5)
    code, said = _apply_pod(cluster, big)
    assert code == 0, said
    assert "big-after: no node holds it now" in said or "not checked: no node holds it now" in said, said
    if labelling == "nodepool-gfd-labels":  # the template's GFD labels tell the pool's GPU
        assert "NodePool h100 can add gpu-h100-1x (1× NVIDIA-H100-80GB-HBM3, 79.6 GiB each)" in said, said
    else:  # the KWOK instance types' GPUs are Karpenter's to know: the pool is named, unchecked
        assert "NodePool h100 (gpu-h100-1x)" in said, said
    assert "NodePool l4" not in said  # its L4s hold it no better than the node that is up
    # What it was admitted for happens: Karpenter launches an H100 node and the pod lands there.
    bound = _bound(cluster, namespace, "big-after", timeout=120)
    node = cluster.get_node(bound["spec"]["nodeName"])
    assert node["metadata"]["labels"]["karpenter.sh/nodepool"] == "h100"

    # A pod no NodePool can hold either (70B in bf16 on one GPU: ~140 GiB) is rejected. Now that an H100 node of
    # gpu-h100-1x is up, vramgate knows that instance type's GPU in both labellings.
    cluster.wait_for("vramgate to see the H100 node", lambda: any(
        n["vram_mib"] == 81559 for n in vramgate.inventory_nodes().values()), timeout=30, interval=0.5)
    huge = gpu_pod("huge", namespace, ["--model", "meta-llama/Llama-3.1-70B-Instruct", "--max-model-len", "8192"])
    code, said = _apply_pod(cluster, huge)
    assert code != 0, said
    assert 'denied the request: pod/huge: needs' in said and "the largest GPU in the cluster has 79.6 GiB" in said, said
    assert "NodePool" not in said  # no pool can add a larger GPU: nothing to name
