"""The YAML tables shipped in ``webhook/data/``, read once each with libyaml's C loader where PyYAML has it."""

from __future__ import annotations

from importlib import resources
from typing import Any

import yaml

# The pure-Python SafeLoader takes ~0.6 s for models.yaml, the C one ~0.07 s; both build the same objects.
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def packaged_yaml(name: str) -> Any:
    """``webhook/data/<name>`` parsed (safe YAML: plain data only)."""
    text = resources.files("webhook").joinpath(f"data/{name}").read_text(encoding="utf-8")
    return yaml.load(text, Loader=_LOADER)
