"""One precision resolver and the engine version's own utilization default, everywhere a model is priced."""

import json

import pytest

from webhook.advise.fit import request_for
from webhook.cli.main import main
from webhook.config import Config
from webhook.decide.demand import default_util, read_demand
from webhook.engines.precision import resolve_precision
from webhook.kinds import pod_view
from webhook.models.catalog import builtin_catalog

from .helpers import container, deployment

CAT = builtin_catalog()


@pytest.mark.parametrize("model, expected", [
    ("Qwen/Qwen3-14B-AWQ", "int4"),
    ("Qwen/Qwen3-8B-FP8", "fp8"),
    ("meta-llama/Llama-3.1-8B-Instruct", "bf16"),
])
def test_estimate_fit_and_admission_see_the_same_precision(capsys: pytest.CaptureFixture[str], model: str,
                                                            expected: str) -> None:
    assert main(["estimate", "--model", model, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["precision"] == expected
    req, _, _ = request_for(CAT, model, Config())
    assert req.precision == expected
    view = pod_view(deployment(container(image="vllm/vllm-openai:v0.10.1", args=["serve", model])))
    assert view is not None
    d = read_demand(view, Config(), CAT)
    assert d is not None and d.estimate is not None and d.estimate.request.precision == expected


def test_a_value_vramgate_cannot_price_is_passed_over() -> None:
    spec = CAT.lookup("qwen3-8b")
    assert resolve_precision([("marlin-x9", "arg --quantization"), ("fp8", "model id")], spec, "inference",
                             "vllm") == ("fp8", "model id")
    assert resolve_precision([], spec, "inference", "ollama")[0] == "q4_k_m"
    assert resolve_precision([], None, "inference", "vllm") == ("bf16", "default bf16")


@pytest.mark.parametrize("version, expected", [((0, 6, 3), 0.9), ((0, 19, 1), 0.9), ((0, 20, 0), 0.92), (None, 0.92)])
def test_vllm_utilization_default_follows_the_version(version: tuple[int, ...] | None, expected: float) -> None:
    # vllm==0.20.0 vllm/config/cache.py:66 `gpu_memory_utilization: float = Field(default=0.92, ...)`; 0.9 before.
    assert default_util("vllm", Config(), "inference", 1, version) == expected
    assert default_util("vllm", Config(gpu_memory_utilization=0.8), "inference", 1, version) == 0.8
    assert default_util("nim", Config(), "inference", 1, version) == 0.9


def test_fit_uses_the_engine_versions_default(capsys: pytest.CaptureFixture[str]) -> None:
    _, old, _ = request_for(CAT, "qwen3-8b", Config(), engine_version="0.10.1")
    _, new, _ = request_for(CAT, "qwen3-8b", Config(), engine_version="0.20.0")
    assert (old, new) == (0.9, 0.92)


def test_a_checkpoint_format_defers_to_the_width_the_id_names() -> None:
    # Published start: vllm-project/vllm#17327, `--quantization compressed-tensors` for nytopop/Qwen3-30B-A3B.w4a16
    # on an RTX 3090 loads 15.68 GiB of weights; priced as fp8 (29 GiB) it was rejected.
    spec = CAT.lookup("qwen3-30b-a3b")
    assert resolve_precision([("compressed-tensors", "arg --quantization"), ("int4", "model id")], spec,
                             "inference", "vllm") == ("int4", "model id")
    assert resolve_precision([("compressed-tensors", "arg --quantization")], spec, "inference",
                             "vllm")[0] == "fp8"
