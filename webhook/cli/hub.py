"""`vramgate check --hub`: hub ids the catalog does not know, read from the hub before judging, cached on disk.

For CI runners that can reach the hub. The same reader as the service's hub worker (``models.hub.fetch_entry``:
config.json and the safetensors index, capped, same-host redirects only), the same endpoint and token settings
(``hub.endpoint``, else ``HF_ENDPOINT``, else huggingface.co; ``hub.token_file``, else ``HF_TOKEN``). What it
resolved is kept under ``$XDG_CACHE_HOME/vramgate/hub/<host>/<org>/<name>.json`` (``~/.cache`` when unset), so a
second run asks nothing. A hub that cannot answer costs a warning: the check still runs, offline, without it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson

from ..config import Config
from ..models.catalog import Catalog
from ..models.hub import HubError, fetch_entry, repo_id

DEFAULT_ENDPOINT = "https://huggingface.co"


def endpoint_of(config: Config) -> str:
    """The hub's base URL as the service's worker picks it (serve/hub.py)."""
    return (config.hub.endpoint or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def cache_dir(endpoint: str) -> Path:
    """Where entries read from ``endpoint`` are kept: one folder per hub host (a mirror may answer differently)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    host = urlsplit(endpoint).netloc or endpoint
    return Path(base) / "vramgate" / "hub" / host.replace(":", "_")


def _token(config: Config) -> str | bool | None:
    if not config.hub.token_file:
        return None  # huggingface_hub's own: HF_TOKEN, else anonymous
    try:
        return Path(config.hub.token_file).read_text().strip() or False
    except OSError as exc:
        print(f"warning: hub token file {config.hub.token_file} unreadable ({exc}); asking anonymously",
              file=sys.stderr)
        return False


def _cached(path: Path) -> dict[str, Any] | None:
    try:
        entry = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    return entry if isinstance(entry, dict) else None


def _keep(path: Path, entry: dict[str, Any]) -> None:
    """Write atomically (a second runner reading the cache never sees half a file); a cache that cannot be
    written is only a warning: the entry is used this run all the same."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_suffix(f".{os.getpid()}.part")
        part.write_bytes(orjson.dumps(entry, option=orjson.OPT_INDENT_2))
        os.replace(part, path)
    except OSError as exc:
        print(f"warning: hub cache {path} not written ({exc})", file=sys.stderr)


def _unusable(catalog: Catalog, entry: dict[str, Any]) -> str | None:
    """Why ``entry`` cannot join the catalog, or None when it can."""
    try:
        catalog.with_entries([entry])
    except (TypeError, ValueError, KeyError, ZeroDivisionError, AttributeError) as exc:
        return str(exc) or type(exc).__name__
    return None


def resolve(repos: Iterable[str], config: Config, catalog: Catalog) -> tuple[Catalog, list[str]]:
    """``catalog`` with an entry for each hub id of ``repos`` it lacks, from the cache or the hub, and one line
    per id saying where its entry came from or why there is none."""
    endpoint = endpoint_of(config)
    host = urlsplit(endpoint).netloc or endpoint
    folder = cache_dir(endpoint)
    entries: list[dict[str, Any]] = []
    said: list[str] = []
    token: str | bool | None = None
    asked = False
    for repo in dict.fromkeys(r for name in repos if (r := repo_id(name)) is not None):
        if catalog.resolve(repo) is not None:
            continue
        path = folder.joinpath(*repo.split("/")).with_suffix(".json")
        entry = _cached(path)
        if entry is not None and _unusable(catalog, entry) is None:
            entries.append(entry)
            said.append(f"hub: {repo}: from the cache ({path})")
            continue  # a cached file that is not an entry (cut short, edited by hand) is read again from the hub
        if not asked:
            token, asked = _token(config), True
        try:
            entry = fetch_entry(repo, endpoint=endpoint, token=token, timeout=config.hub.timeout_seconds)
        except HubError as exc:
            said.append(f"warning: hub: {repo}: {host} could not say ({exc}); judged without it, offline")
            continue
        entry["source"] = f"{endpoint}/{repo} (config.json, read by vramgate check --hub)"
        if (problem := _unusable(catalog, entry)) is not None:
            said.append(f"warning: hub: {repo}: its config.json gives no usable entry ({problem}); judged without it")
            continue
        _keep(path, entry)
        entries.append(entry)
        said.append(f"hub: {repo}: read from {host} ({entry.get('params')} parameters), cached at {path}")
    return (catalog.with_entries(entries) if entries else catalog), said


def unknown_hub_ids(files: Iterable[str], snapshot: Any, config: Config, catalog: Catalog) -> list[str]:
    """The hub ids the workloads in ``files`` name that ``catalog`` does not know, in the order they appear.

    Judged once as the service judges with its hub on, so that an unknown id in ``vramgate.io/model`` is noted
    rather than refused (the final judgement, after the lookups, is the offline one)."""
    from ..decide.verdict import judge
    from .inputs import gather

    online = config.model_copy(update={"hub": config.hub.model_copy(update={"enabled": True})})
    inputs = gather(list(files), snapshot, online)
    found: list[str] = []
    for loc in inputs.located:
        whole = judge(loc.obj, inputs.snapshot, online, catalog, runtimes=inputs.runtimes)
        for j in (whole, *(r.judgement for r in whole.roles)):
            name = j.demand.unknown_model if j.demand is not None else None
            if name and (repo := repo_id(name)) is not None and repo not in found:
                found.append(repo)
    return found


def with_hub(files: Iterable[str], snapshot: Any, config: Config, catalog: Catalog) -> Catalog:
    """`check --hub`: the catalog with the files' unknown hub ids resolved; what happened, on stderr."""
    files = list(files)
    catalog, said = resolve(unknown_hub_ids(files, snapshot, config, catalog), config, catalog)
    for line in said:
        print(line, file=sys.stderr)
    return catalog
