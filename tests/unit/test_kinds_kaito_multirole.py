"""KAITO MultiRoleInference (kaito.sh/v1alpha1): prefill and decode, each as the InferenceSet KAITO generates."""

from pathlib import Path

import pytest
import yaml

from webhook.cli.main import main
from webhook.kinds import roles
from webhook.kinds.kaito_multirole import child_inferenceset

PATH = Path(__file__).resolve().parents[1] / "fixtures" / "kinds" / "kaito" / "multiroleinference-phi4.yaml"
NODES = Path(__file__).resolve().parents[1] / "fixtures" / "distributed" / "nodes"


def test_each_role_is_a_preset_on_its_instance_type(capsys: pytest.CaptureFixture[str]) -> None:
    (obj,) = [d for d in yaml.safe_load_all(PATH.read_text()) if d]
    rs = roles(obj)
    assert rs is not None and [r.name for r in rs.roles] == ["prefill", "decode"]
    for r in rs.roles:
        assert r.view.provisioned == "Standard_NC24ads_A100_v4" and r.view.ref == f"multiroleinference/phi-4 ({r.name})"
        # KAITO runs its legacy preset name as the hub id it maps it to (LegacyBuiltinToCatalog).
        assert r.view.spec["containers"][0]["command"][:3] == ["vllm", "serve", "microsoft/phi-4-mini-instruct"]
    code = main(["check", "-f", str(PATH), "--nodes", str(NODES / "l4x8.yaml")])
    out = capsys.readouterr().out
    # Judged on the A100 nodes KAITO provisions, not on today's L4s; never rejected.
    assert code == 0 and out.count("ADMIT   multiroleinference/phi-4") == 2 and "Standard_NC24ads_A100_v4" in out, out


def test_the_child_inferenceset_and_a_missing_model() -> None:
    child = child_inferenceset("m", {}, "llama", {"type": "decode", "replicas": 3, "runtimeConfig": "cfg"}, "r")
    assert child["metadata"]["name"] == "m-decode" and child["spec"]["replicas"] == 3
    assert child["spec"]["template"] == {"inference": {"preset": {"name": "llama"}, "config": "cfg"}}
    rs = roles({"apiVersion": "kaito.sh/v1alpha1", "kind": "MultiRoleInference", "metadata": {"name": "x"},
                "spec": {"roles": []}})
    assert rs is not None and rs.roles == () and "spec.model.name is missing" in rs.warnings[0]
