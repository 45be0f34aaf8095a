"""Which machine and folder a remote root names, what its listing says of each file, and what is said when
it cannot be reached.

`ssh://[user@]host[:port]/path`: the host may be an alias of the user's `~/.ssh/config` (HostName, User, Port,
IdentityFile, ProxyJump apply as `ssh` applies them). No password is taken from a root: keys and the agent only.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shlex
from collections.abc import Iterable
from urllib.parse import unquote, urlsplit


class HostUnreachable(ConnectionError):
    """The host could not be reached or the link dropped; the message says which host and why."""


class HostKeyUnknown(HostUnreachable):
    """The host's key is not in known_hosts (or differs): refused, with the command that accepts it."""


@dataclasses.dataclass(frozen=True, slots=True)
class Target:
    """A parsed `ssh://[user@]host[:port]/path`: `label` is the part before the path, as typed."""

    label: str
    host: str
    user: str | None
    port: int | None
    path: str


def parse_root(text: str) -> Target | None:
    """The target of an `ssh://` root, None for a local path; ValueError for an ssh URL without a path."""
    if not text.startswith("ssh://"):
        return None
    parts = urlsplit(text)
    if not parts.hostname or not parts.path or parts.path == "/" and not text.endswith("/"):
        raise ValueError(f"{text}: a remote root is ssh://[user@]host[:port]/path/to/runs")
    if parts.password is not None:
        raise ValueError(
            f"ssh://{parts.username}:***@{parts.hostname}{parts.path}: no password in a root (it would be kept in"
            " logs and the database); use a key (ssh-agent, IdentityFile in ~/.ssh/config)"
        )
    path = unquote(parts.path).rstrip("/") or "/"
    return Target(parts.netloc, parts.hostname, parts.username, parts.port, path)


def reason(e: BaseException) -> str:
    if isinstance(e, TimeoutError | asyncio.TimeoutError):
        return "timed out"
    text = str(e) or type(e).__name__
    return text.splitlines()[0][:200]


def unknown_key_message(t: Target, e: BaseException) -> str:
    host, port = resolved(t)
    login = f"{t.user}@" if t.user else ""
    keyscan = f"ssh-keyscan {f'-p {port} ' if port != 22 else ''}{host}"
    return (
        f"{t.label}: host key not verified ({reason(e)}); runwatch accepts no host key silently. "
        f"Check the key, then accept it with `ssh {login}{t.host}` once (answer yes), "
        f"or `{keyscan} >> ~/.ssh/known_hosts`"
    )


def resolved(t: Target) -> tuple[str, int]:
    """The HostName and Port that ~/.ssh/config gives the target (what ssh-keyscan needs: it reads no config)."""
    try:
        from pathlib import Path

        from asyncssh.config import SSHClientConfig

        paths = [p for p in (Path("~/.ssh/config").expanduser(),) if p.is_file()]
        config = SSHClientConfig.load(
            None, paths, False, False, False, "", t.user or (), t.host, t.port or ()
        )
        return str(config.get("Hostname", t.host)), int(t.port or config.get("Port", 22))
    except Exception:  # asyncssh's config reader is not a public API: the message falls back to the label
        return t.host, t.port or 22


@dataclasses.dataclass(frozen=True, slots=True)
class RemoteStat:
    """The fields of `os.stat_result` that ingest reads, for a remote file."""

    st_size: int
    st_mtime: float
    st_ino: int
    st_dev: int
    kind: str  # "f" file, "d" folder, "l" link to neither, "?" other

    @property
    def st_mtime_ns(self) -> int:
        return round(self.st_mtime * 1e9)


def find_printf(paths: Iterable[str], depth0: bool = False) -> str:
    quoted = " ".join(shlex.quote(p) for p in paths)
    depth = "-maxdepth 0 " if depth0 else ""
    return f"find {quoted} {depth}-printf '%y\\t%Y\\t%s\\t%T@\\t%i\\t%D\\t%p\\0' 2>/dev/null; true"


def parse_listing(body: bytes, roots: list[str] | None = None) -> dict[str, RemoteStat]:
    """The stats of a `find -printf` listing: full paths (`%p`), or with `roots`, paths relative to them
    (`%P`) with each root's records ended by an empty record."""
    found: dict[str, RemoteStat] = {}
    bases = [(r.rstrip("/") + "/").encode("utf-8", "surrogateescape") for r in roots or ()]
    at = 0  # the root whose records these are
    for record in body.split(b"\0"):
        if roots is not None and record == b"":
            at += 1
            continue
        fields = record.split(b"\t", 6)
        if len(fields) != 7 or roots is not None and at >= len(roots):
            continue
        kind, target, size, mtime, ino, dev, path = fields
        if roots is not None:
            path = bases[at] + path if path else bases[at][:-1] or b"/"
        try:
            # A link is listed as what it points to (discovery reads only links that stay inside the root).
            k = kind.decode()
            if k == "l":
                k = "f" if target == b"f" else "d" if target == b"d" else "l"
            found[path.decode("utf-8", "surrogateescape")] = RemoteStat(
                int(size), float(mtime), int(ino), int(dev), k if k in "fdl" else "?"
            )
        except ValueError:
            continue
    return found
