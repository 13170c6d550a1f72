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


# --------------------------------------------------------------------------------------------------------------
# The package's layers (docs/architecture.md): imports run only downward, never into a sibling's private names.

PACKAGE = ROOT / "webhook"
# Higher imports lower; equal ranks in different folders do not import each other.
RANK = {
    "cli": 10, "serve": 9, "controller": 8, "audit": 7, "jobs": 7, "advise": 6, "kube": 6, "decide": 5,
    "metrics": 5, "cluster": 4, "config": 3, "engines": 3, "kinds": 2, "models": 2, "units": 1, "tls": 1,
}
LOOSE = {"__init__.py", "config.py", "metrics.py"}


def _layer(module: str) -> str:
    """``webhook.decide.rules`` → ``decide``; ``webhook.config`` → ``config``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _is_module(module: str) -> bool:
    where = ROOT.joinpath(*module.split("."))
    return where.with_suffix(".py").is_file() or (where / "__init__.py").is_file()


def _imports(path: Path) -> list[tuple[str, list[str], int]]:
    """(absolute module, names taken, line) for every import of the project in ``path``, lazy ones too."""
    import ast

    package = list(path.relative_to(ROOT).parent.parts)  # the package a relative import starts from
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            if module == "webhook" or module.startswith("webhook."):
                names = [a.name for a in node.names]
                # `from ..units import declaration` names a module: judge the module it names.
                subs = [f"{module}.{n}" for n in names if _is_module(f"{module}.{n}")]
                if subs:
                    out.extend((s, [], node.lineno) for s in subs)
                    continue
                out.append((module, names, node.lineno))
        elif isinstance(node, ast.Import):
            out.extend((a.name, [], node.lineno) for a in node.names if a.name.startswith("webhook"))
    return out


def _sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_imports_run_only_down_the_layers() -> None:
    upward = []
    for path in _sources():
        here = _layer(".".join(path.relative_to(ROOT).with_suffix("").parts))
        assert here in RANK or here == "__init__", f"{path}: folder {here!r} has no place in the layer order"
        for module, _, line in _imports(path):
            there = _layer(module)
            if there in ("", here):
                continue
            assert there in RANK, f"{path}:{line} imports {module}, outside the layer order"
            if RANK[there] >= RANK[here]:
                upward.append(f"{path.relative_to(ROOT)}:{line} ({here}) imports {module} ({there})")
    assert upward == []


def test_no_file_imports_a_sibling_folders_private_name() -> None:
    private = []
    for path in _sources():
        here = _layer(".".join(path.relative_to(ROOT).with_suffix("").parts))
        for module, names, line in _imports(path):
            if _layer(module) != here:
                private.extend(f"{path.relative_to(ROOT)}:{line} takes {module}.{n}"
                               for n in names if n.startswith("_") and not n.startswith("__"))
    assert private == []


def test_at_most_three_loose_modules_and_every_folder_says_what_it_is_for() -> None:
    loose = {p.name for p in PACKAGE.glob("*.py")}
    assert loose <= LOOSE, f"loose modules beyond {sorted(LOOSE)}: {sorted(loose - LOOSE)}"
    for init in PACKAGE.rglob("__init__.py"):
        text = init.read_text().lstrip()
        first = text.splitlines()[0] if text else ""
        assert first.startswith('"""') and first.rstrip().endswith('"""') and len(first) > 10, (
            f"{init.relative_to(ROOT)}: needs a one-line docstring saying what the folder is for")
