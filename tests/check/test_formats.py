"""`vramgate check -o json|yaml|junit|sarif` against their schemas; `--fix` golden file; `--dry-run` (issue 19)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jsonpatch
import jsonschema
import pytest
import xmlschema
import yaml

from webhook.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"
SCHEMAS = FIX / "schemas"
WORKLOADS = FIX / "check" / "workloads.yaml"
SINGLE = FIX / "check" / "nodes-l4-single.yaml"
L4 = FIX / "check" / "nodes-l4.yaml"
EX = ROOT / "examples"
OUTPUT_SCHEMA = json.loads((ROOT / "docs" / "check-output.schema.json").read_text())
# SARIF 2.1.0 (OASIS), from the schema the standard publishes; see tests/fixtures/schemas/README.md.
SARIF_SCHEMA = json.loads((SCHEMAS / "sarif-schema-2.1.0.json").read_text())
# JUnit XML as Jenkins reads it (the Ant junit report format): jenkinsci/xunit-plugin junit-10.xsd.
JUNIT_SCHEMA = xmlschema.XMLSchema(str(SCHEMAS / "junit-10.xsd"))
FILES = [str(WORKLOADS), str(EX / "seed-deployment.yaml"), str(EX / "llama3-8b-deployment.yaml"),
         str(FIX / "manifests" / "04-gke-lws-vllm-llama31-405b-a3.yaml"),
         str(FIX / "manifests" / "12-gke-nim-llm-gemma3-27b-h100.yaml")]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def check(capsys: pytest.CaptureFixture[str], output: str, nodes: Path = SINGLE) -> tuple[int, str]:
    code, out, _ = run(capsys, "check", "-f", *FILES, "--nodes", str(nodes), "-o", output)
    return code, out


def test_json_follows_the_published_schema(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = check(capsys, "json")
    doc = json.loads(out)
    jsonschema.validate(doc, OUTPUT_SCHEMA, cls=jsonschema.Draft202012Validator)
    assert code == 1
    results = doc["results"]
    assert doc["summary"]["rejected"] == sum(r["verdict"] == "reject" for r in results) > 0
    eq = next(r for r in results if r["ref"] == "deployment/vllm-eq")
    assert (eq["file"], eq["document"], eq["line"], eq["namespace"]) == (str(WORKLOADS), 0, 3, "serving")
    assert eq["code"] == "VRAMTooSmall" and eq["sources"]["context"] == "arg --max-model-len"
    est = eq["estimate"]
    assert est["low_per_gpu_mib"] <= est["per_gpu_mib"] <= est["high_per_gpu_mib"]
    assert set(est["parts"]) >= {"weights_mib", "kv_cache_mib", "overhead_mib"}
    # Roles of a grouped kind are results of their own.
    assert {r["role"] for r in results if r["kind"] == "LeaderWorkerSet"} == {"leader", "worker"}
    assert any(r["verdict"] == "admit" for r in check_admitted(capsys))


def check_admitted(capsys: pytest.CaptureFixture[str]) -> list[dict[str, object]]:
    _, out, _ = run(capsys, "check", "-f", str(EX / "llama3-8b-deployment.yaml"), "--nodes",
                    str(EX / "cluster.yaml"), "-o", "json")
    doc = json.loads(out)
    jsonschema.validate(doc, OUTPUT_SCHEMA, cls=jsonschema.Draft202012Validator)
    return list(doc["results"])


def test_yaml_is_the_same_document(capsys: pytest.CaptureFixture[str]) -> None:
    _, as_json = check(capsys, "json")
    code, as_yaml = check(capsys, "yaml")
    doc = yaml.safe_load(as_yaml)
    jsonschema.validate(doc, OUTPUT_SCHEMA, cls=jsonschema.Draft202012Validator)
    assert doc == json.loads(as_json) and code == 1


def test_every_offered_patch_applies_and_is_admitted(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    _, out = check(capsys, "json", L4)
    offered = 0
    for r in json.loads(out)["results"]:
        if r["verdict"] == "admit":
            assert r["fixes"] == []
            continue
        objs = list(yaml.safe_load_all(Path(r["file"]).read_text()))
        obj = objs[r["document"]]
        for f in r["fixes"]:
            patched = jsonpatch.apply_patch(obj, f["patch"])
            one = tmp_path / "one.yaml"
            one.write_text(yaml.safe_dump(patched))
            _, text, _ = run(capsys, "check", "-f", str(one), "--nodes", str(L4), "-o", "json")
            again = {x["ref"]: x for x in json.loads(text)["results"]}
            assert again[r["ref"]]["verdict"] == "admit", (r["ref"], f["description"])
            offered += 1
    assert offered >= 8


def test_junit_follows_the_jenkins_junit_xsd(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = check(capsys, "junit")
    JUNIT_SCHEMA.validate(out)
    doc = JUNIT_SCHEMA.to_dict(out)
    cases = [c for s in doc["testsuite"] for c in s["testcase"]]
    failed = [c for c in cases if "failure" in c]
    _, as_json = check(capsys, "json")
    results = json.loads(as_json)["results"]
    assert len(cases) == len(results) and len(failed) == sum(r["verdict"] == "reject" for r in results)
    assert code == 1


def test_sarif_follows_the_sarif_2_1_0_schema(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = check(capsys, "sarif")
    log = json.loads(out)
    jsonschema.validate(log, SARIF_SCHEMA, cls=jsonschema.Draft4Validator)
    assert code == 1 and log["version"] == "2.1.0"
    results = log["runs"][0]["results"]
    errors = [r for r in results if r["level"] == "error"]
    warnings = [r for r in results if r["level"] == "warning"]
    assert errors and warnings
    # The offending document's line: the TGI Deployment is the third document of workloads.yaml.
    tgi = next(r for r in errors if "deployment/tgi-env" in r["message"]["text"])
    region = tgi["locations"][0]["physicalLocation"]["region"]
    line = WORKLOADS.read_text().splitlines()[region["startLine"] - 1]
    assert line == "apiVersion: apps/v1" and region["startLine"] > 50
    assert tgi["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].endswith("workloads.yaml")


def test_text_stays_the_default(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "check", "-f", str(EX / "seed-deployment.yaml"), "--nodes",
                       str(EX / "cluster-small.yaml"))
    code2, out2, _ = run(capsys, "check", "-f", str(EX / "seed-deployment.yaml"), "--nodes",
                         str(EX / "cluster-small.yaml"), "-o", "text")
    assert (code, out) == (code2, out2) and out.startswith("REJECT  deployment/llm-15b: needs ")


def test_fix_rewrites_in_place_keeping_comments_golden(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    work = tmp_path / "workloads.yaml"
    shutil.copy(WORKLOADS, work)
    code, diff, err = run(capsys, "check", "-f", str(work), "--nodes", str(SINGLE), "--fix", "--suggestion", "2")
    assert code == 0, err  # every rejection fixed: the re-check admits them all
    golden = FIX / "check" / "workloads.fixed-2.yaml"
    assert work.read_text() == golden.read_text()
    name = str(work).lstrip("/")
    assert diff.startswith(f"--- a/{name}\n+++ b/{name}\n")
    assert "fix 2: --max-model-len 27648" in err
    code, _, _ = run(capsys, "check", "-f", str(work), "--nodes", str(SINGLE))
    assert code == 0


def test_dry_run_changes_nothing(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    work = tmp_path / "workloads.yaml"
    shutil.copy(WORKLOADS, work)
    before = work.read_bytes()
    code, diff, _ = run(capsys, "check", "-f", str(work), "--nodes", str(SINGLE), "--fix", "--dry-run")
    assert code == 1 and work.read_bytes() == before
    assert "+        - \"--quantization\"" in diff


def test_fix_with_no_such_suggestion_says_so(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    work = tmp_path / "seed.yaml"
    shutil.copy(EX / "seed-deployment.yaml", work)
    code, diff, err = run(capsys, "check", "-f", str(work), "--nodes", str(EX / "cluster-small.yaml"), "--fix")
    assert code == 1 and diff == "" and "no fix 1" in err
    assert run(capsys, "check", "-f", str(work), "--nodes", str(L4), "--fix", "--suggestion", "0")[0] == 2


def test_rewrite_falls_back_to_a_round_trip_of_that_document(tmp_path: Path) -> None:
    """An edit with no exact place in the text (an empty flow mapping) re-emits only its document,
    with ruamel.yaml's round trip: comments and order kept; the other documents stay byte for byte."""
    from webhook.advise.fixes import Edit, rewrite

    first = "# first\napiVersion: v1\nkind: ConfigMap\nmetadata:   {name: untouched}   # odd spacing kept\n"
    second = ("---\n# second\napiVersion: v1\nkind: Pod\nmetadata:\n  name: p  # the name\n  annotations: {}\n"
              "spec:\n  containers:\n  - name: a\n    image: x\n")
    f = tmp_path / "two.yaml"
    f.write_text(first + second)
    before, after = rewrite(f, [Edit(1, "", [{"op": "add", "path": "/metadata/annotations/vramgate.io~1precision",
                                              "value": "int4"}])])
    assert before == first + second
    assert after.startswith(first + "---\n")
    assert "# second" in after and "name: p  # the name" in after
    docs = list(yaml.safe_load_all(after))
    assert docs[1]["metadata"]["annotations"] == {"vramgate.io/precision": "int4"}
    assert docs[1]["spec"]["containers"][0]["image"] == "x"


def test_fix_in_a_list_and_in_json_edits_only_the_value(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "j"}, "spec": {"containers": [{
        "name": "a", "image": "vllm/vllm-openai:v0.8.5", "resources": {"limits": {"nvidia.com/gpu": 1}},
        "args": ["--model", "meta-llama/Meta-Llama-3.1-8B-Instruct", "--max-model-len", "65536"]}]}}
    as_json = tmp_path / "pod.json"
    as_json.write_text(json.dumps(pod))
    listed = tmp_path / "list.yaml"
    listed.write_text("# kubectl get -o yaml\n" + yaml.safe_dump({"apiVersion": "v1", "kind": "List",
                                                                  "items": [{**pod, "metadata": {"name": "k"}}]}))
    for f in (as_json, listed):
        before = f.read_text()
        code, _, err = run(capsys, "check", "-f", str(f), "--nodes", str(SINGLE), "--fix", "--suggestion", "2")
        assert code == 0, err
        after = f.read_text()
        assert after == before.replace('"65536"', '"27648"').replace("'65536'", "'27648'"), after


def test_too_few_gpus_gets_the_count_that_fits(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """8 GPUs asked, 1 on every node: the fix sets the GPU count and the TP flag together."""
    f = tmp_path / "eight.yaml"
    f.write_text("""apiVersion: apps/v1
kind: Deployment
metadata:
  name: eight
spec:
  template:
    spec:
      containers:
      - name: vllm
        image: vllm/vllm-openai:v0.8.5
        args: ["--model", "meta-llama/Meta-Llama-3.1-8B-Instruct", "--tensor-parallel-size", "8",
               "--max-model-len", "8192"]
        resources:
          limits:
            nvidia.com/gpu: 8   # one node's worth
""")
    code, out, _ = run(capsys, "check", "-f", str(f), "--nodes", str(SINGLE), "-o", "json")
    r = json.loads(out)["results"][0]
    assert code == 1 and r["code"] == "TooFewGPUs"
    assert r["fixes"][0]["patch"] == [
        {"op": "replace", "path": "/spec/template/spec/containers/0/resources/limits/nvidia.com~1gpu", "value": 1},
        {"op": "replace", "path": "/spec/template/spec/containers/0/args/3", "value": "1"},
    ]
    before = f.read_text()
    code, _, err = run(capsys, "check", "-f", str(f), "--nodes", str(SINGLE), "--fix")
    assert code == 0, err
    assert f.read_text() == before.replace('"--tensor-parallel-size", "8"', '"--tensor-parallel-size", "1"').replace(
        "nvidia.com/gpu: 8", "nvidia.com/gpu: 1")


def test_fix_options_go_together(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["check", "-f", str(WORKLOADS), "--nodes", str(SINGLE)]
    assert run(capsys, *base, "--dry-run")[0] == 2
    assert run(capsys, *base, "--suggestion", "2")[0] == 2
    code, _, err = run(capsys, *base, "--fix", "-o", "json")
    assert code == 2 and "--fix prints a diff" in err


def test_sarif_fixes_are_the_text_edits_of_fix(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """SARIF `fixes` replacements, applied to the file, give what `--fix --suggestion N` writes."""
    _, out, _ = run(capsys, "check", "-f", str(WORKLOADS), "--nodes", str(SINGLE), "-o", "sarif")
    log = json.loads(out)
    jsonschema.validate(log, SARIF_SCHEMA, cls=jsonschema.Draft4Validator)
    text = WORKLOADS.read_text()
    vllm_eq = next(r for r in log["runs"][0]["results"] if r["message"]["text"].startswith("deployment/vllm-eq"))
    assert len(vllm_eq["fixes"]) == len(vllm_eq["properties"]["fixes"]) == 2
    for n, fix in enumerate(vllm_eq["fixes"], start=1):
        edited = text
        for rep in sorted(fix["artifactChanges"][0]["replacements"],
                          key=lambda x: x["deletedRegion"]["charOffset"], reverse=True):
            at, length = rep["deletedRegion"]["charOffset"], rep["deletedRegion"]["charLength"]
            edited = edited[:at] + rep["insertedContent"]["text"] + edited[at + length:]
        only = tmp_path / f"vllm-eq-{n}.yaml"
        only.write_text(text.split("\n---\n")[0] + "\n")
        run(capsys, "check", "-f", str(only), "--nodes", str(SINGLE), "--fix", "--suggestion", str(n))
        assert edited.split("\n---\n")[0] + "\n" == only.read_text()
