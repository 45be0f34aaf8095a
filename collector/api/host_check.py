"""The API answers only to the names it is reached by on this machine (the `Host` header), against DNS
rebinding: a web page whose own name is made to resolve to 127.0.0.1 would otherwise read `/api/health`
(the database path and the roots; no token needed) from the user's browser.

On a loopback address (the default) a request's `Host` must name 127.0.0.1, localhost, ::1 or the bound
address (any port), or a name listed in `RUNWATCH_ALLOWED_HOSTS` (comma-separated; the dashboard's
setting too); a request without one (not a browser) passes. On another address every name passes (the
token guards every route that tells anything but health). The same rule as the dashboard's `app/door.py`.
"""

from __future__ import annotations

import ipaddress
import json
import os

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
ALLOWED_HOSTS_ENV = "RUNWATCH_ALLOWED_HOSTS"


def is_loopback(address: str | None) -> bool:
    """True when a bind address reaches this machine only ('' or None means every interface)."""
    if not address:
        return False
    if address.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False


def host_name(header: str) -> str:
    """The name in a `Host` header, without its port (`[::1]:8080` -> `::1`)."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].split("]", 1)[0]
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def allowed_names(bind_address: str, env: dict[str, str]) -> frozenset[str]:
    extra = {h.strip().lower() for h in env.get(ALLOWED_HOSTS_ENV, "").split(",") if h.strip()}
    return LOOPBACK_NAMES | {bind_address.strip("[]").lower()} | extra


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
                await self._refuse(scope, send, name)
                return
        await self.app(scope, receive, send)

    async def _refuse(self, scope, send, name: str) -> None:
        detail = (
            f"this collector answers to {', '.join(sorted(self.names))} only, not to {name!r} (a page of"
            f" another site that points its name at this machine is refused); to use another name, set"
            f" {ALLOWED_HOSTS_ENV}"
        )
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008, "reason": detail[:120]})
            return
        body = json.dumps({"detail": detail}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 403, "headers": headers})
        await send({"type": "http.response.body", "body": body})
