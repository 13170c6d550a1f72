"""The repository layout the README promises: a tracked certs/ folder whose keys git never takes."""

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_certs_folder_is_there_with_a_readme() -> None:
    readme = ROOT / "certs" / "README.md"
    assert readme.is_file()
    text = readme.read_text()
    assert "vramgate certs init" in text and "tls.key" in text and "Never commit" in text


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="not a git checkout")
@pytest.mark.parametrize("path, ignored", [
    ("certs/tls.key", True), ("certs/tls.crt", True), ("certs/ca.crt", True), ("certs/dev.pem", True),
    ("certs/.tls.key.tmp", True), ("certs/README.md", False),
])
def test_git_ignores_keys_not_the_readme(path: str, ignored: bool) -> None:
    result = subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT, check=False)
    assert (result.returncode == 0) is ignored
