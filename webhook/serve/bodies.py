"""Request bodies read under a size limit: the declared Content-Length first, then the streamed length."""

from __future__ import annotations

from starlette.requests import Request


class BodyTooLarge(Exception):
    """The body passes the limit; ``declared`` is the Content-Length when that already said so."""

    def __init__(self, limit: int, declared: int | None = None) -> None:
        super().__init__(f"body exceeds {limit} bytes")
        self.limit, self.declared = limit, declared


class BadContentLength(ValueError):
    """A Content-Length header that is not a number."""

    def __init__(self) -> None:
        super().__init__("Content-Length is not a number")


async def read_limited(request: Request, limit: int) -> bytes:
    """The whole body, or BodyTooLarge as soon as it (or its declared length) passes ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            length = int(declared)
        except ValueError:
            raise BadContentLength from None
        if length > limit:
            raise BodyTooLarge(limit, length)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(limit)
        chunks.append(chunk)
    return b"".join(chunks)
