"""Who may use the dashboard: the `Host` check (DNS rebinding) and the password of a dashboard opened to others.

The dashboard holds the API token: whoever reaches it can read every run and ack or resolve alerts. On
127.0.0.1 (the default, `app/.streamlit/config.toml`, wherever it is started) only this machine reaches it, and
only through a loopback name in the `Host` header: a page on another site that rebinds its own name to
127.0.0.1 gets nothing. A user who binds another address opts into a login: the password in
`RUNWATCH_DASHBOARD_PASSWORD`, else the API token in `DB.token` (readable by its owner only).
"""

from __future__ import annotations

import hmac
import ipaddress
import os
from collections.abc import Mapping

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
PASSWORD_ENV = "RUNWATCH_DASHBOARD_PASSWORD"
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
    """The name in a `Host` header, without its port (`[::1]:8501` -> `::1`)."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].split("]", 1)[0]
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def allowed_hosts(bind_address: str | None, env: Mapping[str, str]) -> frozenset[str]:
    """Names a browser may use for this dashboard: loopback names, the bound address, and the user's extras."""
    extra = {h.strip().lower() for h in env.get(ALLOWED_HOSTS_ENV, "").split(",") if h.strip()}
    bound = {bind_address.lower()} if bind_address and bind_address not in ("0.0.0.0", "::") else set()
    return LOOPBACK_NAMES | bound | extra


def host_refusal(header: str | None, bind_address: str | None, env: Mapping[str, str]) -> str | None:
    """Why a request with this `Host` header is refused, or None when it may proceed.

    On a non-loopback address every name is allowed (the login guards it); on loopback only the names above.
    """
    if header is None or not is_loopback(bind_address):
        return None
    name = host_name(header)
    if name in allowed_hosts(bind_address, env):
        return None
    return (
        f"This dashboard answers to {', '.join(sorted(allowed_hosts(bind_address, env)))} only, not to "
        f"{name!r} (a page of another site that points its name at this machine is refused). "
        f"To use another name, set {ALLOWED_HOSTS_ENV}."
    )


def expected_password(env: Mapping[str, str], token: str | None) -> str | None:
    """The password a non-loopback dashboard asks for: the user's own, else the API token."""
    return env.get(PASSWORD_ENV) or token


def password_matches(given: str, expected: str | None) -> bool:
    return bool(expected) and hmac.compare_digest(given.encode(), expected.encode())


def environment() -> Mapping[str, str]:
    return os.environ
