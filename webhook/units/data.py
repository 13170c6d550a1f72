"""The YAML tables shipped in ``webhook/data/``, parsed once per content and kept beside the user's cache."""

from __future__ import annotations

import hashlib
import marshal
import os
from importlib import resources
from pathlib import Path
from typing import Any

# The pure-Python SafeLoader takes ~0.6 s for models.yaml, the C one ~0.08 s, and reading back what either built
# ~1 ms: a CLI run is mostly start-up, so the parsed table is kept (marshal: plain data, no code is run on load).
_CACHE_FORMAT = f"m{marshal.version}"


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/vramgate`` (else ``~/.cache/vramgate``); ``VRAMGATE_NO_CACHE=1`` turns the cache off."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "vramgate"


def _parse(text: str) -> Any:
    import yaml

    loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # both build the same objects
    return yaml.load(text, Loader=loader)


def packaged_yaml(name: str) -> Any:
    """``webhook/data/<name>`` parsed (safe YAML: plain data only)."""
    raw = resources.files("webhook").joinpath(f"data/{name}").read_bytes()
    if os.environ.get("VRAMGATE_NO_CACHE"):
        return _parse(raw.decode("utf-8"))
    # Keyed by the content itself: an upgrade, an edit or another checkout never reads a stale table.
    path = cache_dir() / f"{name}.{hashlib.sha256(raw).hexdigest()[:20]}.{_CACHE_FORMAT}"
    try:
        return marshal.loads(path.read_bytes())
    except (OSError, EOFError, ValueError, TypeError):
        pass  # absent, unreadable or torn: parse it again
    data = _parse(raw.decode("utf-8"))
    try:
        blob = marshal.dumps(data)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(blob)
        os.replace(tmp, path)  # whole or not at all, for a concurrent reader
    except (OSError, ValueError):
        pass  # a read-only home, or a value marshal cannot keep (a YAML timestamp): parse every time
    return data
