"""Every fix `vramgate check` offers for the rejections in the test corpus is admitted after `--fix`,
and `--fix` changes only the bytes it must (issue 19)."""

from __future__ import annotations

import difflib
import shutil
from pathlib import Path

import pytest

from webhook.advise.fixes import Edit, rewrite
from webhook.cli.report import Result, collect
from webhook.cluster.snapshot import snapshot_from_nodes
from webhook.config import load_config
from webhook.kube.manifests import load_nodes
from webhook.models.catalog import builtin_catalog

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"
CORPUS = sorted(
    [p for p in (FIX / "manifests").glob("*.yaml") if p.name != "expected.yaml"]
    + sorted((FIX / "kinds").glob("*.yaml")) + sorted((ROOT / "examples").glob("*-deployment.yaml"))
    + sorted((FIX / "check").glob("*.yaml"))
)
CORPUS = [p for p in CORPUS if not p.name.startswith("nodes-") and ".fixed" not in p.name]
INVENTORIES = [FIX / "check" / "nodes-l4.yaml", FIX / "check" / "nodes-l4-single.yaml"]
CONFIG = load_config(None)
CATALOG = builtin_catalog()


def _snapshot(nodes: Path):  # type: ignore[no-untyped-def]
    return snapshot_from_nodes(load_nodes(nodes), CONFIG)


def _cases() -> list[tuple[Path, Path, str, int]]:
    cases = []
    for inv in INVENTORIES:
        snap = _snapshot(inv)
        for path in CORPUS:
            for r in collect([str(path)], snap, CONFIG, CATALOG):
                for f in r.fixes:
                    cases.append((inv, path, r.ref, f.suggestion))
    return cases


CASES = _cases()


def test_the_corpus_yields_fixes_of_every_shape() -> None:
    """Enough cases that the test below means something: flags, env, annotations, GPU counts, scripts."""
    assert len(CASES) >= 20
    assert len({(p.name) for _, p, _, _ in CASES}) >= 8


def _changed_lines(before: str, after: str) -> tuple[list[str], list[str]]:
    removed, added = [], []
    for line in difflib.ndiff(before.splitlines(), after.splitlines()):
        if line.startswith("- "):
            removed.append(line[2:])
        elif line.startswith("+ "):
            added.append(line[2:])
    return removed, added


@pytest.mark.parametrize(("inventory", "path", "ref", "n"), CASES,
                         ids=[f"{i.stem}:{p.name}:{r}:{n}" for i, p, r, n in CASES])
def test_fix_is_admitted_and_touches_only_its_lines(inventory: Path, path: Path, ref: str, n: int,
                                                     tmp_path: Path) -> None:
    snap = _snapshot(inventory)
    copy = tmp_path / path.name
    shutil.copy(path, copy)
    results = collect([str(copy)], snap, CONFIG, CATALOG)
    target: Result = next(r for r in results if r.ref == ref and not r.allowed)
    fix = target.fixes[n - 1]
    before, after = rewrite(copy, [Edit(target.document, "" if target.item is None else f"/items/{target.item}",
                                        fix.patch)])
    copy.write_text(after)
    again = {r.ref: r for r in collect([str(copy)], snap, CONFIG, CATALOG, with_fixes=False)}
    assert again[ref].allowed, again[ref].message
    # Untouched bytes stay: the diff removes at most one line per op (a value edited, a flow list extended),
    # and the text outside the changed lines is identical.
    removed, added = _changed_lines(before, after)
    assert len(removed) <= len(fix.patch), (removed, added)
    assert added, "the fix changed nothing"
    kept_before = [ln for ln in before.splitlines() if ln not in removed]
    kept_after = [ln for ln in after.splitlines() if ln not in added]
    assert kept_before == kept_after
