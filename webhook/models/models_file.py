"""Catalog entries from a file (the chart's ``models:`` values, mounted from a ConfigMap): the parser.

``config.models_file`` names a YAML file holding ``models: [...]`` (or a bare list) in the schema of
``config.models`` and ``webhook/data/models.yaml``. ``load_config`` appends its entries to
``config.models``, so every consumer (the service, ``vramgate check --config``) sees them at start;
while serving, ``serve.models_watch.ModelsWatcher`` re-reads the file when its bytes change (a ConfigMap update
reaches a mounted volume within the kubelet's sync period) and swaps the instance's catalog. A file
that does not parse or holds a bad entry is refused whole at start (exit 2) and, while serving,
logged and ignored: the catalog in use stays.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .catalog import Catalog, builtin_catalog, spec_from_mapping


class ModelsFileError(ValueError):
    """The models file is unreadable, not YAML, or holds an entry the catalog cannot take."""


def read_models_file(path: str | Path) -> tuple[list[dict[str, Any]], bytes]:
    """The entries in ``path`` and the bytes they came from; a missing file holds none."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        return [], b""
    except OSError as exc:
        raise ModelsFileError(f"cannot read models file {path}: {exc}") from exc
    return parse_models(raw, str(path)), raw


def parse_models(raw: bytes, where: str) -> list[dict[str, Any]]:
    try:
        data = yaml.safe_load(raw.decode("utf-8")) if raw.strip() else None
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ModelsFileError(f"models file {where} is not YAML: {exc}") from exc
    if data is None:
        return []
    entries = data.get("models") if isinstance(data, dict) else data
    if isinstance(data, dict) and set(data) - {"models"}:
        raise ModelsFileError(f"models file {where}: only a `models:` list is allowed, found {sorted(set(data))}")
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise ModelsFileError(f"models file {where}: `models` must be a list of catalog entries")
    out: list[dict[str, Any]] = []
    for i, entry in enumerate(entries):
        name = entry.get("name", "?") if isinstance(entry, dict) else "?"
        if not isinstance(entry, dict):
            raise ModelsFileError(f"models file {where}: entry {i} is not a mapping")
        try:
            spec_from_mapping(entry)
        except (TypeError, ValueError, KeyError, ZeroDivisionError) as exc:
            raise ModelsFileError(f"models file {where}: entry {i} ({name}): {exc}") from exc
        out.append(entry)
    return out


def catalog_with(inline: list[dict[str, Any]], from_file: list[dict[str, Any]]) -> Catalog:
    """The built-in catalog plus the config's entries, then the file's (later entries win)."""
    extra = [*inline, *from_file]
    base = builtin_catalog()
    return base.with_entries(extra) if extra else base
