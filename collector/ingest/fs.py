"""The file-system seam: what ingest does to files (stat, ranged read, listing), for local and remote roots.

A source is keyed by a string: a local absolute path (`/runs/a/metrics.jsonl`), or `label:/path` for a file
on an SSH host (`gpu1:/runs/a/metrics.jsonl`, where `gpu1` is the root's `ssh://gpu1/...` part). `Files` routes
each call: a local key goes straight to `os` (one string test more than before), a remote one to its `Host`.

Discovery and the checkpoint index walk folders with pathlib: a remote folder is a `RemotePath`, a
`PurePosixPath` whose `is_file`, `is_dir`, `glob`, `stat`, `open`, `read_text`, `scandir` and `walk` answer
from its host's listing and SFTP, so the same discovery code serves both.
"""

from __future__ import annotations

import fnmatch
import io
import os
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

from collector.ingest.remote import Host
from collector.ingest.remote_stream import fill_local, fill_remote
from collector.ingest.ssh_target import HostUnreachable, RemoteStat, Target, parse_root


def root_path(root: str | os.PathLike, watch: bool = True) -> Path | RemotePath:
    """A root as given on the command line: `ssh://[user@]host[:port]/path` or a local path (resolved).
    With `watch`, a remote path joins its host's listed roots (else it is only a path, e.g. to compare)."""
    if isinstance(root, RemotePath):
        return root
    text = str(root)
    target = parse_root(text)
    if target is None:
        return Path(text).expanduser().resolve()
    host = host_for(target, watch)
    return remote_class(host)(target.path)


def is_remote(key: str | os.PathLike) -> bool:
    return isinstance(key, RemotePath) or (isinstance(key, str) and not key.startswith("/") and ":/" in key)


def path_of(key: str) -> Path | RemotePath:
    """The path object of a source key (inverse of `str(path)`)."""
    if not is_remote(key):
        return Path(key)
    host, path = _split(key)
    return remote_class(host)(path)


def host_of(key: str | os.PathLike) -> Host | None:
    """The host of a remote key or path, None for a local one."""
    if isinstance(key, RemotePath):
        return key.host
    return _split(key)[0] if is_remote(key) else None


class Files:
    """The seam's operations on source keys. Local keys cost a plain `os` call."""

    @staticmethod
    def stat(key: str) -> os.stat_result | RemoteStat:
        if key.startswith("/"):
            return os.stat(key)
        host, path = _split(key)
        return host.stat(path)

    @staticmethod
    def read_range(key: str, start: int, size: int) -> bytes:
        if key.startswith("/"):
            with open(key, "rb") as f:
                f.seek(start)
                return f.read(size)
        host, path = _split(key)
        return host.read(path, start, size)

    @staticmethod
    def read_tail(key: str, size: int) -> bytes:
        """The last `size` bytes (all of a shorter file)."""
        end = Files.stat(key).st_size
        return Files.read_range(key, max(0, end - size), min(size, end))

    @staticmethod
    def open(key: str) -> io.BufferedIOBase:
        """A binary reader with `seek`, `read`, `readinto` (remote: ranged reads, nothing read ahead)."""
        if key.startswith("/"):
            return open(key, "rb")
        host, path = _split(key)
        return RemoteReader(host, path)

    @staticmethod
    def fill(key: str, start: int, size: int, buf: bytearray) -> Iterator[int]:
        """Read `size` bytes of `key` from `start` into `buf`, piece by piece (up to `len(buf)` each): yields
        each piece's length once it is in `buf[:n]`; stops early at the file's end. A remote file streams
        with the next pieces in flight while the caller works on this one."""
        if key.startswith("/"):
            return fill_local(key, start, size, buf)
        host, path = _split(key)
        return fill_remote(host, path, start, size, buf)

    @staticmethod
    def prefetch(starts: list[tuple[str, int]]) -> None:
        """Fetch the bytes after each (key, start) of remote files in one round trip per host, for the reads
        that follow; local keys are skipped (their reads cost no round trip)."""
        by_host: dict[Host, list[tuple[str, int]]] = {}
        for key, start in starts:
            if not key.startswith("/"):
                host, path = _split(key)
                by_host.setdefault(host, []).append((path, start))
        for host, items in by_host.items():
            if host.state == "connected":
                host.prefetch(items)

    @staticmethod
    def scandir(key: str) -> Iterable:
        """The entries of a folder (`os.DirEntry`, or look-alikes for a remote one: from its host's listing)."""
        if key.startswith("/"):
            return os.scandir(key)
        return path_of(key).scandir()

    @staticmethod
    def reachable(key: str) -> bool:
        """False while the key's host is known to be down (reads would only fail); True for local keys."""
        host = host_of(key)
        return host is None or host.state != "disconnected"


def _split(key: str) -> tuple[Host, str]:
    label, sep, path = key.partition(":/")
    for host in hosts():
        if host.label == label:
            return host, "/" + path
    raise HostUnreachable(f"{label}: not a host of the watched roots")


# ---- remote paths -----------------------------------------------------------------------------------------

_CLASSES: dict[str, type] = {}


def remote_class(host: Host) -> type[RemotePath]:
    """The `RemotePath` class bound to `host` (paths derived from one keep it: parent, joinpath, glob)."""
    cls = _CLASSES.get(host.label)
    if cls is None or cls.host is not host:
        cls = _CLASSES[host.label] = type("RemotePath", (RemotePath,), {"host": host, "__slots__": ()})
    return cls


class RemotePath(PurePosixPath):
    """A path on an SSH host. `str()` is `label:/path` (the source key); `os.fspath` refuses it, so a remote
    path can never be opened as a local file by mistake."""

    __slots__ = ()
    host: Host

    def __str__(self) -> str:
        text = super().__str__()
        return f"{self.host.label}:{text}" if self.is_absolute() else text

    def as_posix(self) -> str:
        return str(self)

    def __fspath__(self) -> str:
        raise TypeError(f"{self} is on another machine: read it through collector.ingest.fs")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RemotePath):
            return NotImplemented if not isinstance(other, PurePosixPath) else False
        return other.host is self.host and super().__eq__(other)

    def __hash__(self) -> int:
        return hash((self.host.label, super().__str__()))

    @property
    def url(self) -> str:
        """The root as a user writes it: `ssh://label/path`."""
        return f"ssh://{self.host.label}{self.remote}"

    @property
    def remote(self) -> str:
        """The path on the host."""
        return super().__str__()

    def _stat(self) -> RemoteStat | None:
        """The path's stat, None when absent: a path under a listed root that the listing lacks is absent
        (no round trip; nothing to ask while the host is down), else the host is asked."""
        st = self.host.listing.get(self.remote)
        if st is not None or self.host.covers(self.remote):
            return st
        try:
            return self.host.stat(self.remote)
        except FileNotFoundError:
            return None

    def stat(self) -> RemoteStat:
        return self.host.stat(self.remote)

    lstat = stat

    def exists(self) -> bool:
        return self._stat() is not None

    def is_file(self) -> bool:
        st = self._stat()
        return st is not None and st.kind == "f"

    def is_dir(self) -> bool:
        st = self._stat()
        return st is not None and st.kind == "d"

    def resolve(self, strict: bool = False) -> RemotePath:
        return self  # links are listed as what they point to (see remote._parse_listing)

    def open(self, mode: str = "rb") -> io.BufferedIOBase:
        if mode not in ("r", "rb"):
            raise PermissionError(f"{self}: runwatch only reads remote files")
        reader = RemoteReader(self.host, self.remote)
        return reader if mode == "rb" else io.TextIOWrapper(reader, errors="replace")

    def read_bytes(self) -> bytes:
        return self.host.read(self.remote, 0, self.stat().st_size)

    def read_text(self, encoding: str | None = None, errors: str | None = None) -> str:
        return self.read_bytes().decode(encoding or "utf-8", errors or "strict")

    def scandir(self) -> list[RemoteEntry]:
        """The folder's entries, from the host's listing (one level)."""
        prefix = self.remote.rstrip("/") + "/"
        self.host.ensure_listed()
        listing = self.host.listing
        if self.remote not in listing:
            self.host.stat(self.remote)  # not listed yet: ask, and FileNotFoundError when absent
        entries = []
        for path, st in list(listing.items()):
            if path.startswith(prefix) and "/" not in path[len(prefix) :]:
                entries.append(RemoteEntry(self / path[len(prefix) :], st))
        return sorted(entries, key=lambda e: e.name)

    def iterdir(self) -> Iterator[RemotePath]:
        return (e.path_obj for e in self.scandir())

    def walk(self) -> Iterator[tuple[RemotePath, list[str], list[str]]]:
        """Like `os.walk` (top-down, `dirnames` may be pruned in place), with the folder as a RemotePath."""
        stack = [self]
        while stack:
            folder = stack.pop()
            entries = folder.scandir()
            dirnames = [e.name for e in entries if e.kind == "d"]
            filenames = [e.name for e in entries if e.kind != "d"]
            yield folder, dirnames, filenames
            stack.extend(folder / d for d in reversed(dirnames))

    def glob(self, pattern: str) -> Iterator[RemotePath]:
        parts = pattern.split("/")
        found = [self]
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            found = [
                e.path_obj
                for folder in found
                if folder.is_dir()
                for e in folder.scandir()
                if fnmatch.fnmatchcase(e.name, part) and (last or e.kind == "d")
            ]
        return iter(found)

    def rglob(self, pattern: str) -> Iterator[RemotePath]:
        """Every path below this folder whose name matches `pattern`, from the listing."""
        prefix = self.remote.rstrip("/") + "/"
        self.host.ensure_listed()
        names = sorted(p for p in list(self.host.listing) if p.startswith(prefix))
        return (type(self)(p) for p in names if fnmatch.fnmatchcase(p.rsplit("/", 1)[-1], pattern))

    def total_bytes(self) -> int:
        """The size of every file under this folder, from the listing."""
        prefix = self.remote.rstrip("/") + "/"
        self.host.ensure_listed()
        return sum(
            st.st_size for p, st in list(self.host.listing.items()) if p.startswith(prefix) and st.kind == "f"
        )


class RemoteEntry:
    """An `os.DirEntry` look-alike for a remote folder's entry."""

    __slots__ = ("path_obj", "name", "path", "kind", "_st")

    def __init__(self, path: RemotePath, st: RemoteStat) -> None:
        self.path_obj, self.name, self.path, self.kind, self._st = path, path.name, str(path), st.kind, st

    def is_file(self, follow_symlinks: bool = True) -> bool:
        return self.kind == "f"

    def is_dir(self, follow_symlinks: bool = True) -> bool:
        return self.kind == "d"

    def is_symlink(self) -> bool:
        return False  # listed as what it points to

    def inode(self) -> int:
        return self._st.st_ino

    def stat(self, follow_symlinks: bool = True) -> RemoteStat:
        return self._st


class RemoteReader(io.RawIOBase):
    """A read-only, seekable file over ranged SFTP reads (for zipfile's check, headers, the bulk copy)."""

    def __init__(self, host: Host, path: str) -> None:
        self.host, self.path, self.pos = host, path, 0
        self.size = host.stat(path).st_size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.pos, 2: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def readinto(self, buffer) -> int:
        view = memoryview(buffer).cast("B")
        data = self.host.read_head(self.path, self.pos, len(view))[: len(view)] if len(view) else b""
        view[: len(data)] = data
        self.pos += len(data)
        return len(data)


def root_state(key: str | os.PathLike) -> dict:
    """Whether a root's (or a run's) files can be read now: `state` is "local", or for a remote one its
    host's "connected", "connecting" or "disconnected" ("unknown" when this process watches no such host),
    with `since` (when it became so) and `error` (why the last attempt failed; never a secret)."""
    text = key.url if isinstance(key, RemotePath) else str(key)
    if not is_remote(text) and not text.startswith("ssh://"):
        return {"root": text, "state": "local", "since": None, "error": None}
    label = urlsplit(text).netloc if text.startswith("ssh://") else text.partition(":/")[0]
    host = next((h for h in hosts() if h.label == label), None)
    if host is None:
        return {"root": text, "state": "unknown", "since": None, "error": None}
    return {"root": text} | {k: v for k, v in host.describe().items() if k != "host"}


# ---- the hosts of this process ----------------------------------------------------------------------

_HOSTS: dict[str, Host] = {}
_HOSTS_LOCK = threading.Lock()


def host_for(target: Target, watch: bool = True) -> Host:
    """The one `Host` of a label in this process (all roots and runs on it share its connection); with
    `watch`, the target's path is one of the roots its listing covers."""
    with _HOSTS_LOCK:
        host = _HOSTS.get(target.label)
        if host is None:
            host = _HOSTS[target.label] = Host(target)
        if watch and target.path not in host.roots:
            host.roots.append(target.path)
        return host


def hosts() -> list[Host]:
    with _HOSTS_LOCK:
        return list(_HOSTS.values())


def forget_hosts() -> None:
    """Close and forget every host (a collector closing; tests)."""
    with _HOSTS_LOCK:
        old = list(_HOSTS.values())
        _HOSTS.clear()
    for host in old:
        host.close()
