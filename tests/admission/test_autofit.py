"""Autofit over the wire: /mutate applies the first eligible fix to an opted-in workload, /validate then admits it."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import orjson

from webhook.advise.autofit import A_APPLIED, A_AUTOFIT
from webhook.cluster.snapshot import snapshot_from_nodes
from webhook.config import Config

from ..unit.helpers import gpu_node
from .conftest import use
from .helpers import Service, patch_ops, review, workload

L4 = gpu_node("l4", gpus=1, mem=23034, product="NVIDIA-L4")
VLLM = "vllm/vllm-openai:v0.10.1"


def long_context(annotations: dict[str, str] | None = None, context: str = "131072") -> dict[str, Any]:
    c = {"name": "main", "image": VLLM, "resources": {"limits": {"nvidia.com/gpu": 1}},
         "args": ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", context]}
    obj = workload("Deployment", c, name="chat")
    if annotations:
        obj["metadata"]["annotations"] = annotations
    return obj


def on_l4(svc: Service, enforcement: dict[str, str] | None = None) -> None:
    snap = snapshot_from_nodes([L4], Config(), revision=7)
    use(svc, snapshot=replace(snap, enforcement=enforcement or {}))


def counter(svc: Service, result: str) -> float:
    for line in svc.client.get("/metrics").text.splitlines():
        if line.startswith("vramgate_autofit_total{") and f'result="{result}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def args(obj: dict[str, Any]) -> list[str]:
    return list(obj["spec"]["template"]["spec"]["containers"][0]["args"])


def test_an_opted_in_deployment_gets_the_shorter_context_and_is_then_admitted(svc: Service) -> None:
    on_l4(svc)
    before = counter(svc, "applied")
    obj = long_context({A_AUTOFIT: "true"})
    patched, resp = svc.mutate(obj)  # also checks: the patch applies, passes the schema, a second pass is empty
    assert args(patched)[-2:] == ["--max-model-len", "37888"]
    trail = orjson.loads(patched["metadata"]["annotations"][A_APPLIED])
    assert trail["change"].startswith("--max-model-len 37888") and trail["reason"].startswith("deployment/chat:")
    assert any(w.startswith("vramgate autofit: applied --max-model-len 37888") for w in resp["warnings"])
    assert svc.validate(patched)["allowed"] is True
    assert counter(svc, "applied") == before + 1


def test_without_the_opt_in_nothing_changes_and_validation_rejects(svc: Service) -> None:
    on_l4(svc)
    resp = svc.ask("mutate", review(long_context()))
    assert "patch" not in resp and not resp.get("warnings")
    assert svc.validate(long_context())["allowed"] is False


def test_a_namespace_labelled_autofit_opts_every_workload_in(svc: Service) -> None:
    on_l4(svc, {"ml": "autofit"})
    patched, _ = svc.mutate(long_context())
    assert A_APPLIED in patched["metadata"]["annotations"]
    # The label also enforces: what autofit cannot fix is rejected as under "enforce".
    assert svc.validate(long_context())["allowed"] is False


def test_no_eligible_fix_is_refused_with_a_warning_and_counted(svc: Service) -> None:
    on_l4(svc)
    before = counter(svc, "refused")
    c = {"name": "main", "image": VLLM, "resources": {"limits": {"nvidia.com/gpu": 1}},
         "args": ["--model", "Qwen/Qwen3-14B", "--max-model-len", "8192"]}
    obj = workload("Deployment", c, name="big")
    obj["metadata"]["annotations"] = {A_AUTOFIT: "true"}
    resp = svc.ask("mutate", review(obj))
    assert "patch" not in resp
    assert any(w.startswith("vramgate autofit: refused: no eligible fix") for w in resp["warnings"])
    assert counter(svc, "refused") == before + 1
    assert svc.validate(obj)["allowed"] is False


def test_an_object_already_autofitted_is_judged_as_written(svc: Service) -> None:
    on_l4(svc)
    obj = long_context({A_AUTOFIT: "true", A_APPLIED: "{}"})
    resp = svc.ask("mutate", review(obj))
    assert "patch" not in resp


def test_update_runs_autofit_only_when_the_engine_flags_change(svc: Service) -> None:
    on_l4(svc)
    old = long_context({A_AUTOFIT: "true"}, context="8192")
    same = copy.deepcopy(long_context({A_AUTOFIT: "true"}))
    same["spec"]["template"]["spec"]["containers"][0]["args"] = args(old)
    same["spec"]["replicas"] = 2
    assert "patch" not in svc.ask("mutate", review(same, "UPDATE", old=old))
    changed = long_context({A_AUTOFIT: "true", A_APPLIED: "{\"change\": \"an earlier one\"}"})
    resp = svc.ask("mutate", review(changed, "UPDATE", old=old))
    ops = patch_ops(resp)
    assert {"op": "replace", "path": "/spec/template/spec/containers/0/args/3", "value": "37888"} in ops
    assert any(op["path"] == "/metadata/annotations/vramgate.io~1autofit-applied" for op in ops)


def test_a_dry_run_is_fitted_the_same_way(svc: Service) -> None:
    on_l4(svc)
    resp = svc.ask("mutate", review(long_context({A_AUTOFIT: "true"}), dry_run=True))
    assert patch_ops(resp)


def test_a_bare_pod_gets_the_fix_and_then_the_usual_mutation(svc: Service) -> None:
    on_l4(svc)
    c = {"name": "main", "image": VLLM, "resources": {"limits": {"nvidia.com/gpu": 1}},
         "args": ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "131072"]}
    pod = workload("Pod", c, name="p", annotations={A_AUTOFIT: "true"})
    patched, _ = svc.mutate(pod)  # the fix and the mutation of the fixed pod in one patch; a second pass is empty
    assert patched["spec"]["containers"][0]["args"][-1] == "37888"
    assert A_APPLIED in patched["metadata"]["annotations"]
    # The expected figure is priced without a GPU (vLLM's large-GPU defaults); the low end must fit the L4.
    assert int(patched["metadata"]["annotations"]["vramgate.io/vram-per-gpu-min-mib"]) < 23034
    assert any(t.get("key") == "nvidia.com/gpu" for t in patched["spec"]["tolerations"])
