"""Run folders on another machine, over SSH: one connection per host, the tree listed in one round trip.

A remote root is written `ssh://[user@]host[:port]/path`. Host, user, port, keys and jump hosts come from the
user's `~/.ssh/config` and agent, as `ssh` would use them (asyncssh reads both); the host key must be in
`known_hosts` (an unknown host is refused with the command that accepts it). Nothing secret is kept: the
connection is described by its label (`user@host:port` as typed) and the remote path only.

What ingest needs of a remote file comes from the host's *listing*: one `find ... -printf` over its roots (size,
mtime, inode, device, type per path), refreshed by the poller; between two listings a stat is answered from it.
Bytes come over SFTP (ranged reads, pipelined by asyncssh). A host that cannot be reached raises
`HostUnreachable` (an `OSError`, never `FileNotFoundError`: a dropped link is not a deleted file).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import secrets
import shlex
import threading
import time
from typing import TYPE_CHECKING

from collector.ingest.ssh_loop import Loop
from collector.ingest.ssh_target import (
    HostKeyUnknown,
    HostUnreachable,
    RemoteStat,
    Target,
    find_printf,
    parse_listing,
    reason,
    unknown_key_message,
)

if TYPE_CHECKING:
    import asyncssh

log = logging.getLogger("collector.ingest.remote")

CONNECT_TIMEOUT_S = 10.0
OP_TIMEOUT_S = 20.0  # one remote operation; a stalled network fails it, the next cycle retries
BACKOFF_S = (1.0, 2.0, 4.0, 8.0, 15.0, 30.0)  # waits between reconnect attempts
READ_AHEAD_BYTES = 4 << 20  # a small read near a file's end fetches up to this much, to serve the next read
# Channel packets this big (asyncssh's default is 32 KiB): a fifth of the per-packet work on a long read.
MAX_PACKET = 240 << 10
HEAD_BYTES = 128 << 10  # the first bytes of each file kept for sniffing (discovery reads 64 KiB heads)
# Folders whose contents no run reads (discovery skips them too).
PRUNED = (".git", "node_modules", "__pycache__")


class Host:
    """One SSH host: its connection (made on first use, remade with backoff), listing and byte counters.

    Thread-safe: the ingest thread reads while the poller lists. `state` is "connected", "connecting" or
    "disconnected"; `error` says why the last attempt failed (never a secret).
    """

    def __init__(self, target: Target) -> None:
        self.label = target.label
        self.target = target
        self.state = "connecting"
        self.error: str | None = None
        self.since = time.time()  # when `state` last changed
        self.roots: list[str] = []
        self.listing: dict[str, RemoteStat] = {}
        self.listed = False  # whether a full listing was taken
        self.bytes_read = 0  # file bytes over SFTP
        self.bytes_listed = 0  # listing and stat output over exec
        self.round_trips = 0
        self._conn: asyncssh.SSHClientConnection | None = None
        self._sftp: asyncssh.SFTPClient | None = None
        self._lock = threading.RLock()
        self._failures = 0
        self._next_try = 0.0
        self._ahead: dict[str, tuple[int, int, bytes]] = {}  # path -> (inode, start, bytes) read ahead
        self._heads: dict[str, tuple[int, bytes]] = {}  # path -> (inode, its first bytes) for sniffing

    # ---- connection -------------------------------------------------------------------------------

    def describe(self) -> dict:
        """The host's state for the API: label, state, since, error, and what this process moved over its
        link (`read_bytes`: file bytes over SFTP, `listing_bytes`: listing output); no secret."""
        keys = ("state", "since", "error")
        return {"host": self.label, **{k: getattr(self, k) for k in keys}, "read_bytes": self.bytes_read,
                "listing_bytes": self.bytes_listed}  # fmt: skip

    def _set_state(self, state: str, error: str | None = None) -> None:
        if state != self.state:
            self.since = time.time()
            if state == "disconnected":
                log.warning("%s: disconnected (%s); reconnecting with backoff", self.label, error)
            elif state == "connected":
                log.info("%s: connected", self.label)
        self.state, self.error = state, error

    def _connected(self) -> tuple[asyncssh.SSHClientConnection, asyncssh.SFTPClient]:
        import asyncssh  # here, not at the top: a collector of local roots never pays for loading it

        with self._lock:
            if self._conn is not None and self._sftp is not None:
                return self._conn, self._sftp
            if time.monotonic() < self._next_try:
                raise HostUnreachable(f"{self.label}: unreachable ({self.error}); will retry")
            try:
                self._conn, self._sftp = Loop.run(self._connect(), CONNECT_TIMEOUT_S + 5)
            except HostKeyUnknown as e:
                self._failed(str(e))
                raise
            except (OSError, asyncssh.Error, TimeoutError) as e:
                self._failed(reason(e))
                raise HostUnreachable(f"{self.label}: cannot connect ({self.error}); will retry") from None
            self._failures = 0
            self._set_state("connected")
            return self._conn, self._sftp

    async def _connect(self) -> tuple[asyncssh.SSHClientConnection, asyncssh.SFTPClient]:
        """The connection, its SFTP session and a shell kept open for listings: a command per poll costs
        a line on its stdin, not a new session (whose login shell may run a slow `.bashrc`: conda, pyenv)."""
        import asyncssh

        t = self.target
        options = {"username": t.user} if t.user else {}
        if t.port:
            options["port"] = t.port
        try:
            conn = await asyncio.wait_for(
                asyncssh.connect(
                    t.host,
                    connect_timeout=CONNECT_TIMEOUT_S,
                    keepalive_interval=5,
                    max_pktsize=MAX_PACKET,
                    **options,
                ),
                CONNECT_TIMEOUT_S,
            )
        except asyncssh.HostKeyNotVerifiable as e:
            raise HostKeyUnknown(unknown_key_message(t, e)) from None
        try:
            sftp = await conn.start_sftp_client()
            self._shell = await conn.create_process("exec /bin/sh", encoding=None)
            self._shell_lock = asyncio.Lock()
            await self._shell_run(":")  # what the login shell printed at start is read and dropped here
        except BaseException:
            conn.close()
            raise
        return conn, sftp

    async def _shell_run(self, command: str) -> bytes:
        """`command`'s standard output, run by the kept shell (one command at a time)."""
        end = f"\n{secrets.token_hex(8)}\n".encode()
        async with self._shell_lock:
            self._shell.stdin.write(command.encode() + b"\nprintf '" + end.replace(b"\n", b"\\n") + b"'\n")
            out = await self._shell.stdout.readuntil(end)
        out = out[: -len(end)]
        if command == ":":
            return b""
        return out

    def _failed(self, reason: str) -> None:
        self._failures += 1
        self._next_try = time.monotonic() + BACKOFF_S[min(self._failures, len(BACKOFF_S)) - 1]
        self._set_state("disconnected", reason)

    def _dropped(self, e: BaseException) -> HostUnreachable:
        """Forget a connection that failed mid-operation; the next use reconnects (after backoff)."""
        with self._lock:
            conn, self._conn, self._sftp = self._conn, None, None
            self._ahead.clear()
            self._failed(reason(e))
        if conn is not None:
            conn.abort()
        return HostUnreachable(f"{self.label}: connection lost ({self.error}); will retry")

    def close(self) -> None:
        with self._lock:
            conn, self._conn, self._sftp = self._conn, None, None
        if conn is not None:
            conn.close()

    def _run(self, make_coro, timeout: float = OP_TIMEOUT_S):
        """Run one remote operation; a dropped or stalled link becomes HostUnreachable."""
        conn, sftp = self._connected()
        self.round_trips += 1
        try:
            return Loop.run(make_coro(conn, sftp), timeout)
        except Exception as e:
            raise self._failure(e) from None

    def _failure(self, e: Exception) -> Exception:
        """What a failed remote operation raises: FileNotFoundError, OSError (the server refused), or
        HostUnreachable (the link dropped or stalled: it is forgotten, the next use reconnects)."""
        import asyncssh

        if isinstance(e, asyncssh.SFTPNoSuchFile | FileNotFoundError):
            return FileNotFoundError(2, "No such file on the remote host", getattr(e, "filename", None))
        if isinstance(e, asyncssh.SFTPError):
            return OSError(f"{self.label}: {e.reason}")
        if isinstance(e, asyncssh.Error | OSError | EOFError | TimeoutError | asyncio.CancelledError):
            return self._dropped(e)
        return e

    # ---- listing ----------------------------------------------------------------------------------

    def list_tree(self, since: float | None = None) -> tuple[float, dict[str, RemoteStat]]:
        """(the host's clock now, every path under its roots with its stat), in one round trip. With
        `since` (a time from the host's clock), only what changed (written, renamed) after it; the listing is updated with it
        (a full listing replaces it). Skips `.git`, `node_modules`, `__pycache__`."""
        if not self.roots:
            return time.time(), {}
        prune = " -o ".join(f"-name {shlex.quote(n)}" for n in PRUNED)
        newer = f"-newerct @{since:.6f} " if since is not None else ""  # ctime: renames too
        roots = list(self.roots)
        # Paths relative to their root (%P), each root's records ended by an empty one: a record costs its
        # run's folder and file name, not the root's path again (listed several times a second).
        command = "date +%s.%N; " + "".join(
            f"find {shlex.quote(r)} \\( {prune} \\) -prune -o {newer}"
            r"-printf '%y\t%Y\t%s\t%T@\t%i\t%D\t%P\0' 2>/dev/null; printf '\0'; "
            for r in roots
        )
        output = self._exec(command + "true")
        head, _, body = output.partition(b"\n")
        now = float(head)
        found = parse_listing(body, roots)
        with self._lock:
            for path, st in found.items():
                old = self.listing.get(path)
                # Bytes read ahead stay good while the file only grew (appended); else they may be of its
                # older life (replaced, truncated).
                if old != st and (
                    old is None
                    or (old.st_ino, old.st_dev) != (st.st_ino, st.st_dev)
                    or st.st_size < old.st_size
                ):
                    self._ahead.pop(path, None)
                    self._heads.pop(path, None)
            if since is None:
                self.listed = True
                gone = self.listing.keys() - found.keys()
                for path in gone:
                    self._ahead.pop(path, None)
                    self._heads.pop(path, None)
                self.listing = found
            else:
                self.listing.update(found)
        return now, found

    def ensure_listed(self) -> None:
        """Take a full listing when none was taken since this process started (the poller keeps it fresh)."""
        if not self.listed:
            self.list_tree()

    def covers(self, path: str) -> bool:
        """Whether a full listing was taken and `path` lies under one of the roots it lists (outside the
        folders it prunes): then the listing knows whether `path` exists."""
        if not self.listed:
            return False
        for root in self.roots:
            if path.startswith(root.rstrip("/") + "/"):
                return not any(part in PRUNED for part in path[len(root) :].split("/"))
        return False

    def stat(self, path: str) -> RemoteStat:
        """The file's stat from the listing, else asked (one round trip); FileNotFoundError when absent."""
        st = self.listing.get(path)
        if st is None:
            found = parse_listing(self._exec(find_printf([path], depth0=True)))
            st = found.get(path)
            if st is None:
                raise FileNotFoundError(2, "No such file on the remote host", f"{self.label}:{path}")
            with self._lock:
                self.listing[path] = st
        return st

    def forget(self, path: str) -> None:
        """Drop what is known of `path` (it was found gone): the next stat asks the host."""
        with self._lock:
            self.listing.pop(path, None)
            self._ahead.pop(path, None)

    def _exec(self, command: str) -> bytes:
        async def go(conn, sftp):
            return await self._shell_run(command)

        out = self._run(go)
        self.bytes_listed += len(out)
        return out

    # ---- bytes ------------------------------------------------------------------------------------

    def read(self, path: str, start: int, size: int) -> bytes:
        """`size` bytes of `path` from `start` (fewer at its end). A small read also fetches what follows,
        up to the listed size, so the next read of the same cycle (the new lines after the check of the
        bytes before the offset) costs no round trip."""
        st = self.listing.get(path)
        cached = self._ahead.get(path)
        if cached is not None and st is not None and cached[0] == st.st_ino:
            _, at, data = cached
            if at <= start and start + size <= at + len(data):
                return data[start - at : start - at + size]
        want = size
        if st is not None and st.kind == "f" and size < READ_AHEAD_BYTES:
            want = max(size, min(st.st_size - start, READ_AHEAD_BYTES))
        # A whole small document (status.json, trainer_state.json) is replaced, not appended: it is read as
        # it is now, whole, even when it changed since the listing (a cut copy would read as half-written).
        whole = start == 0 and st is not None and size == st.st_size and size < READ_AHEAD_BYTES

        async def go(conn, sftp):
            async with sftp.open(path, "rb") as f:
                return await f.read(-1 if whole else want, start)

        data = self._run(go)
        self.bytes_read += len(data)
        if whole:
            if len(data) > size:  # it grew since the listing: never let a stat say less than was read
                with self._lock:
                    self.listing[path] = dataclasses.replace(st, st_size=len(data))
            return data
        if st is not None:
            self._extend_head(path, st.st_ino, start, data)
            if want > size:
                with self._lock:
                    self._ahead[path] = (st.st_ino, start, data)
        return data[:size]

    def _extend_head(self, path: str, ino: int, start: int, data: bytes) -> None:
        """Keep the bytes just read that continue the file's kept head (up to HEAD_BYTES): the next
        rescan's sniffing then fetches none of what ingest already read."""
        with self._lock:
            kept = self._heads.get(path)
            have = kept[1] if kept is not None and kept[0] == ino else b""
            if start <= len(have) < min(start + len(data), HEAD_BYTES):
                self._heads[path] = (ino, have + data[len(have) - start : HEAD_BYTES - start])

    def read_head(self, path: str, start: int, size: int) -> bytes:
        """Like `read`, for the first HEAD_BYTES of a file (discovery's sniffing, checkpoint headers, read
        again at every rescan): kept per file while it only grows, so a rescan fetches only new bytes."""
        st = self.listing.get(path)
        if st is None or start + size > HEAD_BYTES:
            return self.read(path, start, size)
        ino, data = self._heads.get(path, (st.st_ino, b""))
        if ino != st.st_ino:
            data = b""
        want = min(start + size, st.st_size)
        if len(data) < want:
            data += self.read(path, len(data), want - len(data))
            with self._lock:
                self._heads[path] = (st.st_ino, data)
        return data[start : start + size]

    def prefetch(self, starts: list[tuple[str, int]]) -> None:
        """Read what is new in many files at once (pipelined: one round trip for all), from each `start` up
        to its listed size; the reads that follow are served from it. Errors are left to those reads."""
        wanted = []
        for path, start in starts:
            st = self.listing.get(path)
            if st is not None and st.kind == "f" and st.st_size > start:
                # (from `start` always, cached or not: the bytes before an offset are checked afresh)
                wanted.append((path, st.st_ino, start, min(st.st_size - start, READ_AHEAD_BYTES)))
        if not wanted:
            return

        async def one(sftp, path: str, start: int, size: int) -> bytes:
            async with sftp.open(path, "rb") as f:
                return await f.read(size, start)

        async def go(conn, sftp):
            return await asyncio.gather(
                *(one(sftp, p, at, n) for p, _, at, n in wanted), return_exceptions=True
            )

        results = self._run(go)
        with self._lock:
            for (path, ino, start, _), data in zip(wanted, results, strict=True):
                if isinstance(data, bytes):
                    self.bytes_read += len(data)
                    self._ahead[path] = (ino, start, data)
                    self._extend_head(path, ino, start, data)
