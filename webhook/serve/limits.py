"""What the process may use: its container's memory limit, and the extender body limit derived from it.

Measured on this service (docs/reliability.md): the worst body shape, ``NodeNames`` of names the inventory
does not know, costs ~12 bytes of peak RSS per body byte (decoded strings, the verdict map and an answer three
times the body); a NodeList body (``nodeCacheCapable: false``) ~8. The peak must stay under half the container's
limit, so the body limit is half the limit less the process's own ``BASELINE_BYTES``, over
``BYTES_PER_BODY_BYTE``, never more than ``extender.max_body_bytes``. Large bodies are read and decoded one at a
time (the routes hold a lock), so concurrent ones do not add up.
"""

from __future__ import annotations

import os
from pathlib import Path

BYTES_PER_BODY_BYTE = 16
BASELINE_BYTES = 144 * 1024 * 1024
MIN_BODY_BYTES = 1024 * 1024
_UNLIMITED = 1 << 60


def container_memory_limit() -> int | None:
    """The memory limit in bytes: ``VRAMGATE_MEMORY_LIMIT_BYTES`` (the chart's downward API), else the cgroup's."""
    raw = os.environ.get("VRAMGATE_MEMORY_LIMIT_BYTES", "").strip()
    if raw.isdigit() and 0 < int(raw) < _UNLIMITED:
        return int(raw)
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and 0 < int(text) < _UNLIMITED:
            return int(text)
    return None


def extender_body_limit(max_body_bytes: int, memory_limit: int | None) -> int:
    """The largest extender body this process takes: the configured limit, lowered to what its memory holds."""
    if memory_limit is None:
        return max_body_bytes
    holds = (memory_limit // 2 - BASELINE_BYTES) // BYTES_PER_BODY_BYTE
    return max(MIN_BODY_BYTES, min(max_body_bytes, holds))


def too_large_hint(limit: int, max_body_bytes: int, memory_limit: int | None) -> str:
    """Why the limit is what it is, and what raises it: for the 413 an operator reads in the scheduler's log."""
    if memory_limit is not None and limit < max_body_bytes:
        return (f" (derived from the container's {memory_limit // (1024 * 1024)} MiB memory limit: raise the "
                f"extender's resources.limits.memory, or set nodeCacheCapable: true so the scheduler sends names)")
    return " (extender.max_body_bytes)"


def release_memory() -> None:
    """Hand the heap freed by a large body back to the system (glibc keeps it otherwise)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass  # not glibc: nothing to do
