"""While serving, re-read the models file when its bytes change and swap the instance's catalog."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from pathlib import Path
from typing import Any

from ..models.models_file import ModelsFileError, catalog_with, parse_models
from .state import AppState

log = logging.getLogger("vramgate.models")


class ModelsWatcher:
    """Polls the models file's bytes and swaps ``state.catalog`` when they change to a valid file."""

    def __init__(self, state: AppState, path: str | Path, inline: list[dict[str, Any]], seen: bytes,
                 interval: float) -> None:
        self.state = state
        self.path = Path(path)
        self.inline = inline
        self.interval = interval
        self._digest = hashlib.sha256(seen).digest()
        self.reloads = 0
        try:
            self.entries = len(parse_models(seen, str(self.path))) if seen else 0
        except ModelsFileError:
            self.entries = 0

    def check(self) -> bool:
        """Re-read the file once; True when the catalog was swapped."""
        gone = False
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            raw, gone = b"", True
        except OSError as exc:
            log.warning("cannot read models file", extra={"fields": {"path": str(self.path), "error": str(exc)}})
            return False
        digest = hashlib.sha256(raw).digest()
        if digest == self._digest:
            return False
        self._digest = digest
        try:
            entries = parse_models(raw, str(self.path))
        except ModelsFileError as exc:
            log.error("models file rejected; the catalog in use stays", extra={"fields": {"error": str(exc)}})
            return False
        self.state.use_catalog(catalog_with(self.inline, entries))
        self.reloads += 1
        dropped = self.entries - len(entries)
        fields = {"path": str(self.path), "entries": len(entries), "dropped": max(0, dropped)}
        if gone or (dropped > 0 and not entries):
            # Its models are unknown from now on (judged without an estimate, or rejected where the annotation
            # names no size): not a routine reload.
            log.warning("models file %s: %d entries dropped; the catalog keeps the built-in and inline models",
                        "deleted" if gone else "emptied", max(0, dropped), extra={"fields": fields})
        else:
            log.info("models file reloaded", extra={"fields": fields})
        self.entries = len(entries)
        return True

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await asyncio.to_thread(self.check)
