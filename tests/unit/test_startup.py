"""CLI start-up: what `vramgate --help` imports, the packaged tables' parse cache, and env overrides of the config."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from webhook.config import Config, load_config
from webhook.units import data

ROOT = Path(__file__).resolve().parents[2]


def _imported_after(argv: list[str]) -> set[str]:
    code = ("import sys, runpy\n"
            f"sys.argv = ['vramgate', *{argv!r}]\n"
            "try:\n    runpy.run_module('webhook.cli', run_name='__main__')\n"
            "except SystemExit:\n    pass\n"
            "print('\\n' + __import__('json').dumps(sorted(sys.modules)))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_help_imports_no_engine_config_or_pydantic() -> None:
    mods = _imported_after(["--help"])
    assert "webhook.cli.main" in mods
    for heavy in ("webhook.engines", "webhook.config", "pydantic", "pydantic_settings", "yaml", "kubernetes",
                  "webhook.cli.commands", "webhook.cli.audit"):
        assert heavy not in mods, heavy


def test_a_command_imports_its_module_and_not_pydantic_settings() -> None:
    mods = _imported_after(["models", "list", "-o", "json"])
    assert "webhook.cli.commands" in mods and "webhook.config" in mods
    assert "webhook.cli.audit" not in mods  # audit/explain's module: not this command's
    if not any(k.upper().startswith("VRAMGATE_") for k in os.environ):
        assert "pydantic_settings" not in mods


def test_each_command_help_still_lists_its_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    from webhook.cli.main import main

    for argv, needle in ((["fit", "--help"], "--gpu-memory-utilization"), (["explain", "--help"], "KIND/NAME"),
                         (["estimate", "--help"], "trtllm"), (["--config", "x.yaml", "audit", "--help"], "-A")):
        with pytest.raises(SystemExit):
            main(argv)
        assert needle in capsys.readouterr().out, argv


def test_env_overrides_go_through_pydantic_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    plain = load_config(None)
    assert type(plain) is Config or not any(k.startswith("VRAMGATE_") for k in os.environ)
    monkeypatch.setenv("VRAMGATE_NAMESPACE", "gpu-system")
    monkeypatch.setenv("VRAMGATE_LABELS__GPU_RESOURCE", "nvidia.com/gpu.shared")
    env = load_config(None)
    assert isinstance(env, Config)
    assert (env.namespace, env.labels.gpu_resource) == ("gpu-system", "nvidia.com/gpu.shared")
    f = tmp_path / "c.yaml"
    f.write_text("namespace: from-file\n")
    both = load_config(str(f))  # the file's key wins over the environment's, as pydantic-settings orders them
    assert (both.namespace, both.labels.gpu_resource) == ("from-file", "nvidia.com/gpu.shared")


def test_packaged_table_cache_round_trips_and_follows_content(monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path: Path) -> None:
    monkeypatch.delenv("VRAMGATE_NO_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = data.packaged_yaml("models.yaml")
    kept = list((tmp_path / "vramgate").glob("models.yaml.*"))
    assert len(kept) == 1
    assert data.packaged_yaml("models.yaml") == first == data._parse(
        (ROOT / "webhook" / "data" / "models.yaml").read_text(encoding="utf-8"))
    kept[0].write_bytes(b"\x00torn")  # a torn or foreign file is parsed again, never trusted
    assert data.packaged_yaml("models.yaml") == first


def test_packaged_table_without_a_writable_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.delenv("VRAMGATE_NO_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))  # its "vramgate" folder can never be made
    assert data.packaged_yaml("gpu_instances.yaml")
