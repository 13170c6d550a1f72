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


def test_the_measured_residuals_admission_uses_are_current() -> None:
    found, _, _, _ = accuracy.collect()
    assert accuracy.MEASURED.read_text() == accuracy.measured_text(found), (
        "webhook/data/measured.yaml is stale: python -m bench.accuracy --write-measured")


def test_chance_to_fit_reads_the_residuals() -> None:
    from webhook.engines.measured import chance_to_fit, residuals

    vllm = residuals()["vllm"]
    assert len(vllm) >= 40 and list(vllm) == sorted(vllm)
    # Expected exactly what is usable: it fits when vramgate is right or high (e >= 0).
    chance, n = chance_to_fit("vllm", 20_000, 4_000, 20_000) or (0.0, 0)
    assert n == len(vllm) and chance == sum(1 for e in vllm if e >= 0) / n
    # Far over: no measured error closes the gap; far under: every one does.
    assert chance_to_fit("vllm", 40_000, 4_000, 20_000) == (0.0, n)
    assert chance_to_fit("vllm", 10_000, 4_000, 20_000) == (1.0, n)
    assert chance_to_fit("vllm", 20_000, 21_000, 20_000) is None  # nothing but KV: nothing measured applies
    assert chance_to_fit("tgi", 20_000, 4_000, 19_000) is None  # not measured
