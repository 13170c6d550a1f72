"""Every reader is keyed by API group and kind: a namesake of another group goes to the generic reader."""

from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.cli.main import main
from webhook.kinds import CUSTOM_KINDS, READERS, Runtimes, reader_key, roles

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
NODES = FIXTURES / "distributed" / "nodes" / "h100x8.yaml"
# Kinds that name a runtime or template: a namesake of another group is nothing to judge (never read).
_TEMPLATE_SUFFIXES = ("Runtime", "Config", "Template", "Definition")


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _pod_holder(api_version: str, kind: str) -> dict[str, Any]:
    """An object of ``kind`` holding one GPU pod template, as any operator's CRD might."""
    container = {"name": "server", "image": "vllm/vllm-openai:v0.11.0",
                 "args": ["--model", "Qwen/Qwen3-8B"], "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": "x", "namespace": "ml"},
            "spec": {"template": {"metadata": {}, "spec": {"containers": [container]}}}}


def test_every_reader_is_keyed_by_a_real_api_group_and_kind() -> None:
    assert READERS, "no readers"
    for key in READERS:
        group, kind = key
        # An API group of a CRD is a DNS name (core and the built-in groups have no custom readers).
        assert "." in group and group == group.lower() and kind[:1].isupper(), key
        assert reader_key({"apiVersion": f"{group}/v1", "kind": kind}) == (key, "")
    assert {k for _, k in READERS} == CUSTOM_KINDS


@pytest.mark.parametrize("kind", sorted(CUSTOM_KINDS))
def test_a_namesake_of_an_unknown_group_goes_to_the_generic_reader(kind: str) -> None:
    obj = _pod_holder("unknown.example.com/v1", kind)
    assert reader_key(obj) == (None, "")
    rs = roles(obj)
    if kind.endswith(_TEMPLATE_SUFFIXES):
        assert rs is None  # a template kind of a group not known: nothing to judge, never a namesake's reading
        return
    assert rs is not None and len(rs.roles) == 1
    assert "read generically" in rs.warnings[0] and "unknown.example.com/v1" in rs.warnings[0]


def test_a_known_reader_under_a_sibling_group_is_not_used() -> None:
    # A close relative of a known group is still another group (serving.kserve.io vs kserve.io).
    for api in ("kserve.io/v1beta1", "serving.kserve.io.example/v1", "v1beta1"):
        assert reader_key({"apiVersion": api, "kind": "InferenceService"})[0] is None


@pytest.mark.parametrize("name", ["isvc-qwen2-5-vl-7b-instruct.yaml", "isvc-bge-reranker-v2-m3.yaml"])
def test_an_ome_inference_service_is_never_rejected_as_a_malformed_kserve_one(
        name: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = FIXTURES / "kinds" / "ome" / name
    (obj,) = _docs(path)
    assert obj["apiVersion"].startswith("ome.io/") and "predictor" not in obj["spec"]
    roles(obj)  # raises nothing (it used to raise "spec.predictor is missing")
    code = main(["check", "-f", str(path), "--nodes", str(NODES)])
    out = capsys.readouterr().out
    assert code == 0 and "REJECT" not in out and "spec.predictor" not in out, out


def test_an_object_without_api_version_is_read_by_the_one_reader_of_its_kind_and_said_so() -> None:
    obj = _pod_holder("", "LeaderWorkerSet")
    del obj["apiVersion"]
    obj["spec"] = {"replicas": 1, "leaderWorkerTemplate": {"size": 1, "workerTemplate": obj["spec"]["template"]}}
    key, note = reader_key(obj)
    assert key == ("leaderworkerset.x-k8s.io", "LeaderWorkerSet") and "no apiVersion" in note
    rs = roles(obj)
    assert rs is not None and any("no apiVersion: read as LeaderWorkerSet of leaderworkerset.x-k8s.io" in w
                                  for w in rs.warnings)
    # Kubernetes' own names are never guessed to be a custom group's namesake (a core Service, a batch Job).
    assert reader_key({"kind": "Service"}) == (None, "")


def test_runtimes_of_another_group_are_not_a_namesakes() -> None:
    kserve_rt = {"apiVersion": "serving.kserve.io/v1alpha1", "kind": "ClusterServingRuntime",
                 "metadata": {"name": "srt"}}
    ome_rt = {"apiVersion": "ome.io/v1beta1", "kind": "ClusterServingRuntime", "metadata": {"name": "srt"}}
    other = {"apiVersion": "example.com/v1", "kind": "ClusterServingRuntime", "metadata": {"name": "srt"}}
    index = Runtimes.of([ome_rt, other])
    assert index.lookup("ServingRuntime", "srt", "ml") is None  # KServe's lookup never sees OME's runtime
    assert index.lookup("ServingRuntime", "srt", "ml", "ome.io") is ome_rt
    assert index.all("ServingRuntime", "ml") == [] and index.all("ServingRuntime", "ml", "example.com") == []
    index = Runtimes.of([ome_rt, kserve_rt])
    assert index.lookup("ServingRuntime", "srt", "ml") is kserve_rt
    assert index.lookup("ServingRuntime", "srt", "ml", "ome.io") is ome_rt


def test_llmisvc_pipeline_parallel_on_one_node_is_warned_about(capsys: pytest.CaptureFixture[str]) -> None:
    path = FIXTURES / "kinds" / "kserve" / "llmisvc-single-node-tp2-pp2.yaml"
    (obj,) = _docs(path)
    rs = roles(obj)
    assert rs is not None and any("kserve/kserve#6044" in w and "tensor parallel 2 alone" in w for w in rs.warnings)
    code = main(["check", "-f", str(path), "--nodes", str(NODES)])
    out = capsys.readouterr().out
    assert code == 0 and "ADMIT" in out and "kserve/kserve#6044" in out, out
    # With a worker (multi-node), or a command of the user's own, KServe's single-node template is not in play.
    obj["spec"]["worker"] = {"containers": [{"name": "main"}]}
    assert not any("6044" in w for w in roles(obj).warnings)  # type: ignore[union-attr]
    del obj["spec"]["worker"]
    obj["spec"]["template"]["containers"][0]["command"] = ["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct"]
    assert not any("6044" in w for w in roles(obj).warnings)  # type: ignore[union-attr]


def test_every_published_kind_fixture_says_where_it_comes_from() -> None:
    files = sorted((FIXTURES / "kinds").glob("*/*.yaml"))
    assert len(files) >= 15
    for path in files:
        head = path.read_text().splitlines()[:2]
        assert head[0].startswith("# source: ") and any(line.startswith("# licence: ") for line in
                                                         path.read_text().splitlines()[:6]), path


def test_admission_fills_the_group_an_object_leaves_out_from_the_request() -> None:
    from webhook.serve.admission.decision import _with_kind

    req: Any = {"kind": {"group": "ome.io", "version": "v1beta1", "kind": "InferenceService"}}
    obj = _with_kind({"metadata": {"name": "x"}, "spec": {}}, req)
    assert (obj["apiVersion"], obj["kind"]) == ("ome.io/v1beta1", "InferenceService")
    assert reader_key(obj) == (("ome.io", "InferenceService"), "")
    core: Any = {"kind": {"group": "", "version": "v1", "kind": "Pod"}}
    assert _with_kind({}, core)["apiVersion"] == "v1"
    kept = {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService"}
    assert _with_kind(kept, req) is kept  # what the object says is never overwritten
