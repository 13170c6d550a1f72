"""Enforcement modes per namespace label, exclusions, the skip label, and failure modes of the decision code."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import orjson
import pytest

import webhook.serve.admission.decision as decide_mod
from webhook.config import Admission, Config
from webhook.serve.state import AppState

from .conftest import SwappableInventory, use
from .helpers import Service, cluster, defaulted_pod, example, gpu_container, patch_ops, pod_of, review, workload

BIG = {"vramgate.io/model-params": "180B", "vramgate.io/precision": "bf16"}


def big_deployment(**kw: Any) -> dict[str, Any]:
    return workload("Deployment", gpu_container(memory="900Gi"), annotations=BIG, name="big", **kw)


def with_labels(svc: Service, labels: dict[str, str]) -> None:
    use(svc, snapshot=dataclasses.replace(cluster(), enforcement=labels))


def test_namespace_label_modes(svc: Service) -> None:
    with_labels(svc, {"strict": "enforce", "lenient": "warn", "wild": "off"})
    obj = big_deployment()
    assert svc.validate(obj, namespace="strict")["allowed"] is False
    warned = svc.validate(obj, namespace="lenient")
    assert warned["allowed"] is True and warned["warnings"][0].startswith("deployment/big: needs ")
    assert svc.validate(obj, namespace="wild") == {"uid": svc.seen[-1]["uid"], "allowed": True}
    assert svc.validate(obj, namespace="unlabelled")["allowed"] is False  # default_enforcement: enforce
    pod = pod_of(example("llama3-8b-deployment.yaml"))
    assert "patch" not in svc.ask("mutate", review(pod, namespace="wild"))
    assert "patch" in svc.ask("mutate", review(pod, namespace="lenient"))


def test_default_enforcement_from_config(svc: Service) -> None:
    use(svc, config=Config(admission=Admission(default_enforcement="warn")))
    with_labels(svc, {"strict": "enforce", "odd": "bogus"})
    obj = big_deployment()
    assert svc.validate(obj, namespace="ml")["allowed"] is True
    assert svc.validate(obj, namespace="odd")["allowed"] is True  # an unknown label value: the default
    assert svc.validate(obj, namespace="strict")["allowed"] is False


@pytest.mark.parametrize("namespace", ["vramgate", "kube-system", "gpu-operator"])
def test_own_and_excluded_namespaces_are_never_judged(svc: Service, namespace: str) -> None:
    use(svc, config=Config(admission=Admission(excluded_namespaces=["kube-system", "gpu-operator"])))
    obj = big_deployment(namespace=namespace)
    assert svc.validate(obj, namespace=namespace) == {"uid": svc.seen[-1]["uid"], "allowed": True}
    pod = defaulted_pod({"containers": [gpu_container(memory="64Gi")]}, namespace=namespace)
    assert "patch" not in svc.ask("mutate", review(pod, namespace=namespace))


@pytest.mark.parametrize("where", ["pod-labels", "template-labels", "workload-labels"])
def test_skip_label_opts_out(svc: Service, where: str) -> None:
    skip = {"vramgate.io/skip": "true"}
    if where == "pod-labels":
        obj = workload("Pod", gpu_container(memory="900Gi"), annotations=BIG, labels=skip)
    elif where == "template-labels":
        obj = big_deployment(labels=skip)
    else:
        obj = big_deployment(workload_labels=skip)
    assert svc.validate(obj)["allowed"] is True
    assert "patch" not in svc.ask("mutate", review(obj))
    not_skipped = big_deployment(labels={"vramgate.io/skip": "false"})
    assert svc.validate(not_skipped)["allowed"] is False


def _boom(*_: Any, **__: Any) -> Any:
    raise RuntimeError("boom")


def test_validation_error_fails_closed_by_default(svc: Service, monkeypatch: pytest.MonkeyPatch,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(decide_mod, "judge", _boom)
    before = svc.state.metrics.admission_errors.labels("validate")._value.get()
    with caplog.at_level(logging.ERROR, logger="vramgate.admission"):
        resp = svc.validate(example("llama3-8b-deployment.yaml"))
    assert resp["allowed"] is False and "internal error" in resp["status"]["message"]
    assert svc.state.metrics.admission_errors.labels("validate")._value.get() == before + 1
    assert any(r.exc_info and "boom" in str(r.exc_info[1]) for r in caplog.records)
    use(svc, config=Config(admission=Admission(validation_failure_mode="allow")))
    assert svc.validate(example("llama3-8b-deployment.yaml"))["allowed"] is True


def test_mutation_error_fails_open(svc: Service, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(decide_mod, "mutation", _boom)
    before = svc.state.metrics.admission_errors.labels("mutate")._value.get()
    resp = svc.ask("mutate", review(pod_of(example("llama3-8b-deployment.yaml"))))
    assert resp["allowed"] is True and "patch" not in resp and patch_ops(resp) == []
    assert svc.state.metrics.admission_errors.labels("mutate")._value.get() == before + 1


def test_unsynced_inventory_answers_like_a_down_webhook() -> None:
    from webhook.cluster.snapshot import Snapshot
    from webhook.serve.admission.decision import decide
    from webhook.serve.admission.review import parse_review

    req = parse_review(orjson.dumps(review(big_deployment())))
    closed = AppState(Config(), SwappableInventory(Snapshot()))
    answer = decide(closed, req, "validate")
    assert not answer.allowed and answer.reason == "inventory-not-synced" and "not synced" in answer.message
    assert decide(closed, req, "mutate").allowed
    open_ = AppState(Config(admission={"validation_failure_mode": "allow"}), SwappableInventory(Snapshot()))
    assert decide(open_, req, "validate").allowed
