"""Published distributed deployments (DP, EP, DP attention, multi-node TP × PP) admitted on the GPUs they run on.

Each file in tests/fixtures/distributed/ is a manifest someone else published, unchanged but for what its
header says, with its source, licence, GPUs, the node inventory of those GPUs (``# nodes:``) and the
layout it declares. The worst failure is rejecting a deployment that works: every one must be admitted.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from webhook.cli.main import main

from .corpus import file_header

HERE = Path(__file__).resolve().parents[1] / "fixtures" / "distributed"
FILES = sorted(HERE.glob("[0-9][0-9]-*.yaml"))
HEADER = ("# source:", "# licence:", "# gpu:", "# nodes:", "# layout:")


def _header(path: Path) -> dict[str, str]:
    return file_header(path, HEADER)


def test_the_corpus_is_large_and_every_file_says_where_it_comes_from() -> None:
    assert len(FILES) >= 25
    for path in FILES:
        header = _header(path)
        assert set(header) == set(HEADER), f"{path.name}: header lacks {set(HEADER) - set(header)}"
        nodes = header["# nodes:"].split()[0]
        assert (HERE / "nodes" / f"{nodes}.yaml").is_file(), f"{path.name}: no inventory {nodes}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_admitted_on_its_gpus(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nodes = _header(path)["# nodes:"].split()[0]
    code = main(["check", "-f", str(path), "--nodes", str(HERE / "nodes" / f"{nodes}.yaml")])
    out = capsys.readouterr()
    assert code == 0, out.out + out.err
    assert "REJECT" not in out.out
