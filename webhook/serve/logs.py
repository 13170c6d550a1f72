"""JSON log lines (one object per line) for the service, its admission reviews and uvicorn's own messages.

Records carry structured data in ``extra={"fields": {...}}``; those keys land at the top level of
the line. Nothing here logs object bodies or env values: callers pass only identifiers and codes.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any, TextIO

import orjson

_CONFIGURED = "_vramgate_json"


class JsonFormatter(logging.Formatter):
    """``{"ts": ..., "level": ..., "logger": ..., "msg": ..., **fields}`` on one line."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            line.update(fields)
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(line, default=str).decode()


def setup_logging(level: str | int = "INFO", stream: TextIO | None = None) -> None:
    """Send every logger (uvicorn's included) through one JSON handler on stderr. Idempotent."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, _CONFIGURED, False):
            root.removeHandler(handler)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    setattr(handler, _CONFIGURED, True)
    root.addHandler(handler)
    root.setLevel(level)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        lg = logging.getLogger(name)
        lg.handlers.clear()
        lg.propagate = True


def _json_handler() -> logging.StreamHandler[TextIO] | None:
    for handler in logging.getLogger().handlers:
        if getattr(handler, _CONFIGURED, False) and isinstance(handler, logging.StreamHandler):
            return handler
    return None


def info_fast(logger: logging.Logger, msg: str, fields: dict[str, Any]) -> None:
    """One INFO line in the same JSON shape, without building a LogRecord: the per-review hot path.

    Falls back to the logging machinery when the JSON handler is not installed (tests, embedding).
    """
    if not logger.isEnabledFor(logging.INFO):
        return
    handler = _json_handler()
    if handler is None:
        logger.info(msg, extra={"fields": fields})
        return
    now = time.time()
    line = {
        "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now * 1000) % 1000:03d}Z",
        "level": "info",
        "logger": logger.name,
        "msg": msg,
        **fields,
    }
    text = orjson.dumps(line, default=str).decode() + "\n"
    with handler.lock or _NO_LOCK:
        handler.stream.write(text)
        handler.stream.flush()


class _NoLock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NO_LOCK = _NoLock()
