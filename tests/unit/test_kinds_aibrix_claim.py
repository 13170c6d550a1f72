"""AIBrix ModelClaim (model.aibrix.ai): starts no pod; the warning names the model and the pool it runs in."""

from pathlib import Path

import yaml

from webhook.kinds import roles
from webhook.kinds.aibrix_claim import claimed_model

PATH = Path(__file__).resolve().parents[1] / "fixtures" / "kinds" / "aibrix" / "modelclaim-qwen2-7b.yaml"


def test_a_model_claim_names_its_model_and_pool_and_judges_no_pod() -> None:
    (obj,) = [d for d in yaml.safe_load_all(PATH.read_text()) if d]
    assert claimed_model(obj) == "Qwen/Qwen2-7B-Instruct"
    rs = roles(obj)
    assert rs is not None and rs.roles == ()
    (w,) = rs.warnings
    assert "model Qwen/Qwen2-7B-Instruct on vllm" in w and "pool.aibrix.ai/name=b300-pool-a" in w
    assert "declares no perGPU cost" in w
    obj["spec"]["perGPU"] = {"maximumFootprint": "30Gi", "kvFloor": "2Gi"}
    rs = roles(obj)
    assert rs is not None and "declares 30Gi + 2Gi KV per GPU" in rs.warnings[0]
    assert claimed_model({"spec": {"artifactURL": "s3://b/qwen"}}) == "s3://b/qwen" and claimed_model({}) is None
