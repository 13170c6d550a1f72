"""vramgate_workload_placeable_replicas: more replicas of each admitted GPU workload the free GPUs hold now."""

from __future__ import annotations

import re

from webhook.config import Config
from webhook.decide.placement import Need, fits_ever
from webhook.serve.placeable import placeable

from .conftest import use
from .helpers import Service, cluster, example, gpu_container, pod_of, review, workload


def sample(svc: Service, namespace: str, name: str) -> float | None:
    text = svc.client.get("/metrics").text
    m = re.search(rf'^vramgate_workload_placeable_replicas\{{namespace="{namespace}",workload="{re.escape(name)}"\}} '
                  r"(\S+)$", text, flags=re.M)
    return float(m.group(1)) if m else None


def test_admitted_workloads_report_the_replicas_free_gpus_hold(svc: Service) -> None:
    snap = cluster()
    use(svc, snapshot=snap)
    small = workload("Deployment", gpu_container(gpus=1), name="small-1gpu", namespace="team-a",
                     annotations={"vramgate.io/vram": "30Gi"})
    big = workload("Deployment", gpu_container(gpus=4), name="big-4gpu", namespace="team-a",
                   annotations={"vramgate.io/vram": "240Gi"})
    assert svc.ask("validate", review(small))["allowed"] and svc.ask("validate", review(big))["allowed"]
    # by hand: healthy nodes whose GPUs hold one pod, ⌊free ÷ GPUs per pod⌋ each
    for name, gpus, per_gpu in (("deployment/small-1gpu", 1, 30 * 1024), ("deployment/big-4gpu", 4, 60 * 1024)):
        need = Need(gpus, per_gpu, 1.0)
        expected = sum(snap.free_gpus(n.name) // gpus for n in snap.gpu_nodes()
                       if n.health != "unhealthy" and fits_ever(need, n))
        assert expected > 0
        assert sample(svc, "team-a", name) == expected
    # 30 GiB per GPU: the 40/45/80 GiB GPUs of healthy nodes (the unhealthy A100 node is left out)
    assert sample(svc, "team-a", "deployment/small-1gpu") == 7 + 4 + 8 + 8
    assert sample(svc, "team-a", "deployment/big-4gpu") == 2 + 2  # the H100 and the healthy 80 GiB A100


def test_pods_and_rejections_are_not_tracked_and_the_count_is_bounded(svc: Service) -> None:
    use(svc, snapshot=cluster())
    pod = pod_of(example("llama3-8b-deployment.yaml"))
    svc.ask("validate", review(pod))
    assert not any(k[1].startswith("pod/") for k in svc.state.placeable._needs)
    huge = workload("Deployment", gpu_container(gpus=1), name="huge", namespace="team-b",
                    annotations={"vramgate.io/vram": "900Gi"})
    assert not svc.ask("validate", review(huge))["allowed"]
    assert sample(svc, "team-b", "deployment/huge") is None
    use(svc, config=Config.model_validate({"admission": {"placeable_workloads_max": 2}}))
    for i in range(4):
        svc.ask("validate", review(workload("Deployment", gpu_container(gpus=1), name=f"w{i}", namespace="team-c",
                                            annotations={"vramgate.io/vram": "10Gi"})))
    assert len(svc.state.placeable.tracked()) == 2
    assert sample(svc, "team-c", "deployment/w3") is not None and sample(svc, "team-c", "deployment/w0") is None


def test_placeable_counts_free_gpus_only() -> None:
    snap = cluster()
    need = Need(8, 70 * 1024, 1.0)
    assert placeable(need, snap) == 2  # the H100 and the healthy 80 GiB A100 node, 8 free GPUs each
