"""The repository layout the README promises: a tracked certs/ folder whose keys git never takes."""

import re
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


# --------------------------------------------------------------------------------------------------------------
# Seam 1 (shared/LAYOUT.md): one Engine per engine module, registered in one table; the rest of the package asks
# the registry and never imports an engine module by name.

ENGINES_DIR = PACKAGE / "engines"


def _engine_modules() -> set[str]:
    """``webhook.engines.vllm`` and the like: the modules that define an ``ENGINE = Engine(...)``."""
    return {f"webhook.engines.{p.stem}" for p in ENGINES_DIR.glob("*.py")
            if "\nENGINE = Engine(" in p.read_text()}


def test_every_engine_module_defines_one_engine_and_the_registry_holds_them_all() -> None:
    from webhook.engines import REGISTRY, engine_named

    modules = _engine_modules()
    assert len(modules) == len(REGISTRY) >= 7
    for module in modules:
        engine = __import__(module, fromlist=["ENGINE"]).ENGINE
        assert REGISTRY[engine.name] is engine, f"{module}.ENGINE is not registered"
        for alias in engine.aliases:
            assert engine_named(alias) is engine


def test_nothing_outside_engines_imports_an_engine_module_by_name() -> None:
    engine_modules = _engine_modules()
    by_name = []
    for path in _sources():
        if path.is_relative_to(ENGINES_DIR):
            continue
        for module, names, line in _imports(path):
            if module in engine_modules:
                by_name.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
            elif module == "webhook.engines":
                by_name.extend(f"{path.relative_to(ROOT)}:{line} takes webhook.engines.{n}"
                               for n in names if f"webhook.engines.{n}" in engine_modules)
    assert by_name == []


def test_no_engine_module_switches_on_another_engine() -> None:
    """An engine module asks nothing of another engine's name: its NAME is its own business."""
    import re

    names = {m: __import__(m, fromlist=["NAME"]).NAME for m in _engine_modules()}
    switches = []
    for module in names:
        text = (ROOT / (module.replace(".", "/") + ".py")).read_text()
        for other_module, other in names.items():
            if other_module == module:
                continue
            pattern = rf"==\s*[\"']{re.escape(other)}[\"']|in\s*\([^)]*[\"']{re.escape(other)}[\"']"
            switches.extend(f"{module} compares against {other!r}" for _ in re.finditer(pattern, text))
    assert switches == []


def test_docs_architecture_lists_every_module() -> None:
    """docs/architecture.md's tree names every module of every folder (a module it does not list fails)."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    tree = text[text.index("webhook/\n"):]
    tree = tree[: tree.index("```")]
    rows: dict[str, str] = {}
    current = ""
    for line in tree.splitlines():
        head = line.strip().split(" ", 1)
        if line.startswith("  ") and head[0].endswith("/"):
            current = head[0].rstrip("/")
            rows[current] = rows.get(current, "") + " " + (head[1] if len(head) > 1 else "")
        elif current and line.startswith("               "):
            rows[current] += " " + line
    missing = []
    for path in _sources():
        rel = path.relative_to(PACKAGE)
        if len(rel.parts) < 2 or rel.name == "__init__.py":
            continue
        folder = rel.parts[-2]
        words = set(re.findall(r"[\w]+", rows.get(folder, "")))
        if rel.stem not in words:
            missing.append(str(rel))
    assert missing == []
