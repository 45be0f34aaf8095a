"""Who may use the dashboard: the `Host` check (DNS rebinding) and the password of a dashboard opened to others.

The dashboard holds the API token: whoever reaches it can read every run and ack or resolve alerts. On
127.0.0.1 (the default, `app/.streamlit/config.toml`, wherever it is started) only this machine reaches it, and
only through a loopback name in the `Host` header: a page on another site that rebinds its own name to
127.0.0.1 gets nothing. A user who binds another address opts into a login: the password in
`RUNWATCH_DASHBOARD_PASSWORD`, else the API token in `DB.token` (readable by its owner only).
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Mapping

from collector.core.hosts import ALLOWED_HOSTS_ENV, allowed_names, host_name, is_loopback

PASSWORD_ENV = "RUNWATCH_DASHBOARD_PASSWORD"


def host_refusal(header: str | None, bind_address: str | None, env: Mapping[str, str]) -> str | None:
    """Why a request with this `Host` header is refused, or None when it may proceed.

    On a non-loopback address every name is allowed (the login guards it); on loopback only the names above.
    """
    if header is None or not is_loopback(bind_address):
        return None
    name = host_name(header)
    if name in allowed_names(bind_address, env):
        return None
    return (
        f"This dashboard answers to {', '.join(sorted(allowed_names(bind_address, env)))} only, not to "
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
