"""Every manifest under tests/fixtures/ and examples/, through every output form of `vramgate check`: the same
verdicts and the same exit code in text, json, yaml, junit, sarif, --explain and --fix --dry-run (issue 36).

The forms read one judged list (webhook/cli/inputs.py, report.judge_inputs); a form that read its own objects
(the DRA repro: a claim template passed with -f folded into the text form only) disagrees here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
import yaml

from webhook.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"
KIND = re.compile(r"^kind:\s*\S", re.MULTILINE)


def _is_inventory(path: Path) -> bool:
    return path.name.startswith("nodes") or "cluster" in path.name


def _manifests() -> list[Path]:
    found = sorted(p for p in [*FIX.rglob("*.yaml"), *(ROOT / "examples").rglob("*.yaml")]
                   if not _is_inventory(p) and ".fixed" not in p.name and KIND.search(p.read_text()))
    return found


# An inventory per folder where the folder has its own; else the bundled sample cluster.
def _nodes_for(path: Path) -> Path:
    for inv in sorted(path.parent.glob("nodes*.yaml")):
        return inv
    return ROOT / "examples" / "cluster.yaml"


MANIFESTS = _manifests()


def test_the_corpus_is_what_it_says() -> None:
    assert len(MANIFESTS) >= 150
    assert ROOT / "examples" / "dra" / "workload-with-claim.yaml" in MANIFESTS


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    rc = main(["check", *args])
    return rc, capsys.readouterr().out


def _text(out: str) -> list[str]:
    return [line.split()[0].lower() for line in out.splitlines() if line.startswith(("ADMIT ", "REJECT "))]


def _json(out: str) -> list[str]:
    return [r["verdict"] for r in json.loads(out)["results"]]


def _yaml(out: str) -> list[str]:
    return [r["verdict"] for r in yaml.safe_load(out)["results"]]


def _junit(out: str) -> list[str]:
    cases = ET.fromstring(out.split("\n", 1)[1]).iter("testcase")
    return ["reject" if case.find("failure") is not None else "admit" for case in cases]


def _sarif_rejections(out: str) -> int:
    return sum(1 for r in json.loads(out)["runs"][0]["results"] if r["level"] == "error")


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_form_gives_the_same_verdicts_and_exit_code(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = ["-f", str(path), "--nodes", str(_nodes_for(path))]
    rc, out = _run(capsys, *files)
    assert rc in (0, 1, 2), out
    verdicts = _text(out)
    assert rc != 1 or "reject" in verdicts
    if rc == 0:
        assert "reject" not in verdicts
    for form, read in (("json", _json), ("yaml", _yaml), ("junit", _junit)):
        frc, fout = _run(capsys, "-o", form, *files)
        assert (frc, read(fout)) == (rc, verdicts), f"-o {form} disagrees with the text form"
    src, sout = _run(capsys, "-o", "sarif", *files)
    assert (src, _sarif_rejections(sout)) == (rc, verdicts.count("reject")), "-o sarif disagrees"
    erc, eout = _run(capsys, "--explain", *files)
    assert (erc, _text(eout)) == (rc, verdicts), "--explain disagrees"
    if rc != 2:
        drc, _ = _run(capsys, "--fix", "--dry-run", *files)
        assert drc == rc, "--fix --dry-run disagrees"


def test_the_dra_repro_rejects_in_every_form(capsys: pytest.CaptureFixture[str]) -> None:
    """A Deployment whose claim template (same file) asks for a 10 GB MIG slice: REJECT and exit 1 everywhere."""
    files = ["-f", str(ROOT / "examples" / "dra" / "workload-with-claim.yaml"),
             "--nodes", str(ROOT / "examples" / "dra" / "nodes-and-slices.yaml")]
    rc, out = _run(capsys, *files)
    assert rc == 1 and "REJECT  deployment/llama-8b-on-a-mig-slice" in out
    for form in ("json", "yaml"):
        frc, fout = _run(capsys, "-o", form, *files)
        results = (json.loads(fout) if form == "json" else yaml.safe_load(fout))["results"]
        mig = next(r for r in results if r["name"] == "llama-8b-on-a-mig-slice")
        assert frc == 1 and mig["verdict"] == "reject"
        assert not any("not in view" in w for r in results for w in r["warnings"])
    src, sout = _run(capsys, "-o", "sarif", *files)
    assert src == 1 and _sarif_rejections(sout) == 1
    jrc, jout = _run(capsys, "-o", "junit", *files)
    assert jrc == 1 and _junit(jout).count("reject") == 1


def test_yaml_nested_too_deep_is_one_error_line_not_a_crash(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    deep = tmp_path / "deep.yaml"
    seed = (ROOT / "examples" / "seed-deployment.yaml").read_text()
    deep.write_text("a: " + "[" * 5000 + "]" * 5000 + "\n---\n" + seed)
    rc = main(["check", "-f", str(deep), "--nodes", str(ROOT / "examples" / "cluster.yaml")])
    captured = capsys.readouterr()
    assert rc == 2
    # libyaml stops at its nesting limit (its message, with the position); PyYAML's Python loader at the recursion limit
    assert re.search(r"document 0 is not valid YAML \((nested too deep|exceeded maximum nesting depth)\)",
                     captured.err), captured.err
    assert "deployment/llm-15b" in captured.out  # the other document is still judged
