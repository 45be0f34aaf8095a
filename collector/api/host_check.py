"""The API answers only to the names it is reached by on this machine (the `Host` header), against DNS
rebinding: a web page whose own name is made to resolve to 127.0.0.1 would otherwise read `/api/health`
(the database path and the roots; no token needed) from the user's browser.

The names are `collector.core.hosts`' (the dashboard's `app/door.py` asks the same); a request without a
`Host` (not a browser) passes. On another address every name passes (the token guards every route that
tells anything but health).
"""

from __future__ import annotations

import os

from starlette.responses import JSONResponse

from collector.core.hosts import ALLOWED_HOSTS_ENV, allowed_names, host_name, is_loopback


class HostCheck:
    """ASGI middleware: a request (HTTP or WebSocket) whose `Host` names this machine otherwise than by the
    allowed names is refused, 403 with the reason, before any route runs."""

    def __init__(self, app, bind_address: str = "127.0.0.1", env: dict[str, str] | None = None) -> None:
        self.app = app
        self.guarded = is_loopback(bind_address)
        self.names = allowed_names(bind_address, dict(os.environ) if env is None else env)

    async def __call__(self, scope, receive, send) -> None:
        if self.guarded and scope["type"] in ("http", "websocket"):
            header = dict(scope.get("headers") or []).get(b"host")
            name = host_name(header.decode("latin-1")) if header is not None else None
            if name is not None and name not in self.names:
                await self._refuse(scope, receive, send, name)
                return
        await self.app(scope, receive, send)

    async def _refuse(self, scope, receive, send, name: str) -> None:
        detail = (
            f"this collector answers to {', '.join(sorted(self.names))} only, not to {name!r} (a page of"
            f" another site that points its name at this machine is refused); to use another name, set"
            f" {ALLOWED_HOSTS_ENV}"
        )
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008, "reason": detail[:120]})
            return
        await JSONResponse({"detail": detail}, status_code=403)(scope, receive, send)
