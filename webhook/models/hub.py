"""An unknown model read from a model hub the way engines read it: config.json and the safetensors index.

Through ``huggingface_hub`` (its URL scheme, auth headers and error mapping), so ``HF_ENDPOINT`` and mirrors
that speak the hub's ``/{repo}/resolve/{revision}/{file}`` API work as they do for vLLM. Nothing is written
to disk (the container's root is read-only); a file is read into memory and parsed.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from typing import Any

import orjson

from .catalog import ConfigImportError, entry_from_hf_config

# A hub repository id: organisation/name, nothing more (paths, URIs and Ollama tags are not hub ids).
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96}$")
MAX_FILE_BYTES = 8 * 1024 * 1024  # config.json is a few KiB, an index a few MiB at most
MAX_ERROR_BYTES = 64 * 1024  # the hub's error answers are a line of JSON
MAX_REDIRECTS = 5
CONNECT_SECONDS = 5.0


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

    url = hf_hub_url(repo, filename, endpoint=endpoint)
    try:
        body = _get_capped(url, token, timeout)
    except EntryNotFoundError:
        if required:
            raise HubError(f"{repo} has no {filename}") from None
        return None
    except HfHubHTTPError as exc:
        raise HubError(f"{repo}/{filename}: {str(exc).splitlines()[0]}") from None
    except HubError as exc:
        raise HubError(f"{repo}/{filename}: {exc}") from None
    except Exception as exc:  # the transport's own errors (DNS, refused, timeout) differ by version
        raise HubError(f"{repo}/{filename}: {type(exc).__name__}: {exc}") from None
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise HubError(f"{repo}/{filename} is not JSON: {exc}") from None


def _get_capped(url: str, token: str | bool | None, timeout: float) -> bytes:
    """The body at ``url``, streamed: at most MAX_FILE_BYTES, within ``timeout`` seconds in all (connect, each
    read, the whole), following redirects only on the same host.

    ``response.content`` would read a body whole before any check (a hub sending 5 GB took the pod to 1.6 GiB),
    and the client's own redirect following goes to any host the answer names."""
    from urllib.parse import urljoin, urlsplit

    import httpx2
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    deadline = time.monotonic() + timeout
    host = urlsplit(url).netloc
    headers = build_hf_headers(token=token)
    for _ in range(MAX_REDIRECTS + 1):
        left = deadline - time.monotonic()
        if left <= 0:
            raise HubError(f"no answer within {timeout:g}s")
        limits = httpx2.Timeout(left, connect=min(left, CONNECT_SECONDS))
        with get_session().stream("GET", url, headers=headers, timeout=limits, follow_redirects=False) as r:
            if r.is_redirect:
                target = urljoin(url, r.headers.get("location", ""))
                if urlsplit(target).netloc != host:
                    raise HubError(f"redirected to another host ({urlsplit(target).netloc or target!r}); "
                                   "not followed")
                url = target
                continue
            if r.status_code >= 400:
                if _declared(r) <= MAX_ERROR_BYTES:
                    r.read()  # the hub's error JSON, which hf_raise_for_status reads for its code
                hf_raise_for_status(r)
            if _declared(r) > MAX_FILE_BYTES:
                raise HubError(f"is {_declared(r)} bytes, more than a model config holds")
            chunks: list[bytes] = []
            size = 0
            for chunk in r.iter_bytes():
                size += len(chunk)
                if size > MAX_FILE_BYTES:
                    raise HubError(f"is over {MAX_FILE_BYTES} bytes, more than a model config holds")
                if time.monotonic() > deadline:
                    raise HubError(f"not read within {timeout:g}s")
                chunks.append(chunk)
            return b"".join(chunks)
    raise HubError(f"more than {MAX_REDIRECTS} redirects")


def _declared(response: Any) -> int:
    try:
        return int(response.headers.get("content-length", "0"))
    except ValueError:
        return 0
