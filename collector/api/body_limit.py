"""A request body is read only up to a size no route needs (1 MiB): a bigger one gets 413 before it is read.

FastAPI reads a POST's whole body before the token is checked, so without a bound any local process, or a
web page posting a form to 127.0.0.1 (a "simple" request needs no CORS preflight and names 127.0.0.1 as its
Host), could make the collector hold hundreds of megabytes (a 300 MB body: 1 GB peak RSS, seen). The
largest body a route takes is a note or a reason (10,000 characters) or a list of paths to ingest.
"""

from __future__ import annotations

from starlette.responses import JSONResponse

MAX_BODY_BYTES = 1 << 20


class BodyLimit:
    """ASGI middleware: 413 for a body over `max_bytes`, by its Content-Length before anything is read, or
    once a chunked body's pieces pass it (the route then never runs)."""

    def __init__(self, app, max_bytes: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            await self._refuse(scope, receive, send)
            return
        seen, over, refused = 0, False, False

        async def bounded_receive():
            nonlocal seen, over
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    over = True
                    raise _TooLarge
            return message

        async def guarded_send(message) -> None:
            nonlocal refused
            if not over:
                await send(message)
            elif message["type"] == "http.response.start" and not refused:
                refused = True  # (FastAPI answers a body it could not read with a 400: the 413 says why)
                await self._refuse(scope, receive, send)

        try:
            await self.app(scope, bounded_receive, guarded_send)
        except _TooLarge:
            if not refused:
                await self._refuse(scope, receive, send)

    async def _refuse(self, scope, receive, send) -> None:
        detail = f"the request body is over {self.max_bytes:,} bytes; no route of this API takes one"
        answer = JSONResponse({"detail": detail}, status_code=413, headers={"connection": "close"})
        await answer(scope, receive, send)


class _TooLarge(Exception):
    """A chunked body passed the limit while it was read."""
