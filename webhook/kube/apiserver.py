"""Raw JSON calls to kube-apiserver over the official client's connection and credentials.

The controller reads and writes plain dicts (Leases, Nodes, Events, Evictions): no model classes
to round-trip, so nothing the server sent is lost or reformatted. Calls block; run them in a thread.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson


class ApiError(Exception):
    """The API server answered with an error status, or could not be reached (status 0)."""

    def __init__(self, status: int, message: str, method: str = "", path: str = "") -> None:
        self.status, self.message, self.method, self.path = status, message, method, path
        super().__init__(f"{method} {path}: {status or 'unreachable'} {message}".strip())


class RawApi:
    """Blocking JSON calls through a ``kubernetes.client.ApiClient`` (``timeout`` seconds per call)."""

    def __init__(self, api_client: Any, timeout: float = 10.0) -> None:
        self.api_client = api_client
        self.timeout = timeout

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: Mapping[str, str] | None = None,
        content_type: str = "application/json",
        timeout: float | None = None,
    ) -> Any:
        """One call; ``timeout`` (seconds, the whole call) replaces the client's own for this one."""
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        try:
            params = self.api_client.param_serialize(
                method, path, query_params=list((query or {}).items()), header_params=headers, body=body,
                auth_settings=["BearerToken"],
            )
            resp = self.api_client.call_api(*params, _request_timeout=timeout or self.timeout)
            raw = resp.read()
        except Exception as exc:  # urllib3/socket/ssl errors: the API server is unreachable
            status = getattr(exc, "status", None)
            raise ApiError(status if isinstance(status, int) else 0, _one_line(exc), method, path) from exc
        if not 200 <= resp.status <= 299:
            raise ApiError(resp.status, _message(raw), method, path)
        # orjson: the audit lists every pod in the cluster through here (MBs at 5,000 nodes), in a thread whose
        # decoding holds the GIL the event loop needs.
        return orjson.loads(raw) if raw else None

    def get(self, path: str, query: Mapping[str, str] | None = None, timeout: float | None = None) -> Any:
        return self.request("GET", path, query=query, timeout=timeout)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


def _message(raw: bytes | None) -> str:
    if not raw:
        return ""
    try:
        data = orjson.loads(raw)
    except ValueError:
        return raw[:300].decode("utf-8", "replace")
    return str(data.get("message") or "")[:300] if isinstance(data, dict) else str(data)[:300]
