"""The published start-up logs bench.accuracy reads: well-formed, sourced, and no published start rejected."""

from __future__ import annotations

import pytest

from bench import accuracy

RECORDS = list(accuracy.records())


def test_every_record_is_sourced_and_quoted() -> None:
    ids = [r["id"] for r in RECORDS]
    assert len(ids) == len(set(ids)), "record ids repeat across the data files"
    for r in RECORDS:
        assert str(r.get("source", "")).startswith("http"), f"{r['_file']}: {r['id']} has no source URL"
        assert r.get("quote"), f"{r['_file']}: {r['id']} quotes nothing"
        assert r.get("outcome") in ("started", "failed"), f"{r['_file']}: {r['id']} outcome {r.get('outcome')!r}"


def _judged_starts() -> list[accuracy.Outcome]:
    out = []
    for r in RECORDS:
        case = accuracy.case_of(r) if r.get("outcome") == "started" else None
        if case is not None and (o := accuracy.outcome(case)) is not None:
            out.append(o)
    return out


STARTS = _judged_starts()


def test_the_corpus_judges_enough_published_starts() -> None:
    # Records of uncataloged models or without the GPU's size are in the data but cannot be judged.
    assert len(STARTS) >= 25


@pytest.mark.parametrize("out", STARTS, ids=lambda o: o.record)
def test_no_published_start_is_rejected(out: accuracy.Outcome) -> None:
    """The worst failure: refusing at apply time what published logs show starting on that GPU."""
    assert out.verdict != "reject", f"low end {out.low_gib:.1f} GiB > usable {out.usable_gib:.1f} GiB"


def test_the_report_prints_every_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert accuracy.main([]) == 0
    out = capsys.readouterr().out
    for heading in ("Per engine and component", "Published outcomes", "Worst rows"):
        assert heading in out
    assert "| vllm | all | weights per GPU |" in out


def test_docs_accuracy_carries_the_current_tables() -> None:
    doc = (accuracy.ROOT / "docs" / "accuracy.md").read_text()
    found, outcomes, n, priced = accuracy.collect()
    block = accuracy.report(found, outcomes, n, priced, by_version=True)
    assert f"{accuracy.BEGIN}\n{block}\n{accuracy.END}" in doc, (
        "docs/accuracy.md is stale: python -m bench.accuracy --by-version --doc docs/accuracy.md "
        "--plot docs/img/accuracy.png")
