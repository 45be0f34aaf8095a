"""The names a browser may reach runwatch by on this machine: one rule for the API (`api/host_check.py`) and
the dashboard (`app/door.py`), against DNS rebinding. On a loopback address a request's `Host` must name
127.0.0.1, localhost, ::1 or the bound address (any port), or a name listed in `RUNWATCH_ALLOWED_HOSTS`
(comma-separated); on another address every name passes (a token or a password guards it)."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
ALLOWED_HOSTS_ENV = "RUNWATCH_ALLOWED_HOSTS"  # extra names for the Host header, comma-separated


def is_loopback(address: str | None) -> bool:
    """True when `address` (a bind address) reaches this machine only; '' or None means every interface."""
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
        name, _, port = header[1:].partition("]")
        return name if port == "" or (port[:1] == ":" and port[1:].isdigit()) else header
    name, colon, port = header.rpartition(":")
    # a port is digits: `127.0.0.1:80@evil.example` is not 127.0.0.1 (no browser sends it; none passes)
    return name if colon and header.count(":") == 1 and port.isdigit() else header


def allowed_names(bind_address: str | None, env: Mapping[str, str]) -> frozenset[str]:
    """Names a browser may use on a loopback `bind_address`: loopback names, the bound address, the user's extras."""
    extra = {h.strip().lower() for h in env.get(ALLOWED_HOSTS_ENV, "").split(",") if h.strip()}
    bound = {bind_address.strip("[]").lower()} if bind_address else set()
    return LOOPBACK_NAMES | bound | extra
