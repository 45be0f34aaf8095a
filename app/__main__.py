"""`python -m app [--host H] [--port P] [-- --db DB --root ROOT ...]`: the dashboard with its server options set.

Streamlit reads `app/.streamlit/config.toml` wherever it is started (127.0.0.1, no usage statistics), and
this launcher passes the same options as flags, so no other config file can open the dashboard to the
network by accident. Binding another address is an explicit choice: the dashboard then asks for a password
(`RUNWATCH_DASHBOARD_PASSWORD`, else the API token in `DB.token`).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from app.door import PASSWORD_ENV, is_loopback

SCRIPT = Path(__file__).resolve().parent / "streamlit_app.py"


def command(argv: list[str]) -> list[str]:
    """The `streamlit run` command line for these launcher arguments (the rest goes to the app)."""
    ap = argparse.ArgumentParser(prog="python -m app", description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1", help="address to listen on (default: this machine only)")
    ap.add_argument("--port", type=int, default=8501)
    own, rest = ap.parse_known_args(argv)
    if rest[:1] == ["--"]:
        rest = rest[1:]
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(SCRIPT),
        "--server.address",
        own.host,
        "--server.port",
        str(own.port),
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
        "--",
        *rest,
    ]


def main(argv: list[str] | None = None) -> None:
    cmd = command(sys.argv[1:] if argv is None else argv)
    host = cmd[cmd.index("--server.address") + 1]
    if not is_loopback(host):
        print(
            f"runwatch: listening on {host}: the dashboard will ask for a password "
            f"({PASSWORD_ENV} if set, else the token in DB.token).",
            file=sys.stderr,
        )
    os.execv(sys.executable, cmd)


if __name__ == "__main__":
    main()
