"""An unknown model read from a model hub the way engines read it: config.json and the safetensors index.

Through ``huggingface_hub`` (its URL scheme, auth headers and error mapping), so ``HF_ENDPOINT`` and mirrors
that speak the hub's ``/{repo}/resolve/{revision}/{file}`` API work as they do for vLLM. Nothing is written
to disk (the container's root is read-only); a file is read into memory and parsed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import orjson

from .catalog import ConfigImportError, entry_from_hf_config

# A hub repository id: organisation/name, nothing more (paths, URIs and Ollama tags are not hub ids).
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96}$")
MAX_FILE_BYTES = 8 * 1024 * 1024  # config.json is a few KiB, an index a few MiB at most


class HubError(Exception):
    """The hub could not say: unreachable, no such repository or file, gated, or not a model config."""


def repo_id(name: str) -> str | None:
    """``name`` as a hub repository id (``Org/Name``, revision suffixes dropped), or None when it is not one."""
    text = name.strip()
    if text.startswith(("/", ".", "~")):  # a path in the container, never a hub id
        return None
    candidate = text.removeprefix("hf://").split("@", 1)[0].split(":", 1)[0].rstrip("/")
    if not _REPO_ID.match(candidate) or ".." in candidate:
        return None
    return candidate


def fetch_entry(repo: str, *, endpoint: str | None = None, token: str | bool | None = None,
                timeout: float = 10.0) -> dict[str, Any]:
    """The catalog entry for ``repo`` built from its config.json and safetensors index (if it has one)."""
    config = _json(repo, "config.json", endpoint, token, timeout, required=True)
    index = _json(repo, "model.safetensors.index.json", endpoint, token, timeout, required=False)
    if isinstance(config, dict) and "quantization_config" not in config:
        quant = _json(repo, "quantization_config.json", endpoint, token, timeout, required=False)
        if isinstance(quant, dict):
            config["quantization_config"] = quant
    try:
        entry = entry_from_hf_config(config if isinstance(config, Mapping) else {},
                                     index if isinstance(index, Mapping) else None, repo)
    except ConfigImportError as exc:
        raise HubError(f"{repo}: {exc}") from None
    return entry


def _json(repo: str, filename: str, endpoint: str | None, token: str | bool | None, timeout: float, *,
          required: bool) -> Any:
    from huggingface_hub import hf_hub_url
    from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    url = hf_hub_url(repo, filename, endpoint=endpoint)
    try:
        response = get_session().get(url, headers=build_hf_headers(token=token), timeout=timeout,
                                     follow_redirects=True)
        hf_raise_for_status(response)
    except EntryNotFoundError:
        if required:
            raise HubError(f"{repo} has no {filename}") from None
        return None
    except HfHubHTTPError as exc:
        raise HubError(f"{repo}/{filename}: {str(exc).splitlines()[0]}") from None
    except Exception as exc:  # the transport's own errors (DNS, refused, timeout) differ by version
        raise HubError(f"{repo}/{filename}: {type(exc).__name__}: {exc}") from None
    body = response.content
    if len(body) > MAX_FILE_BYTES:
        raise HubError(f"{repo}/{filename} is {len(body)} bytes, more than a model config holds")
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise HubError(f"{repo}/{filename} is not JSON: {exc}") from None
