"""A real OpenSSH server on 127.0.0.1 for the remote-root tests and bench/remote_latency.py (no tests here).

`SshServer(tmp).start()` writes a throwaway host key and user key (ssh-keygen), an authorized_keys, and a home
folder whose `.ssh/` holds what a user would have: `config` (Host `rw-test` -> 127.0.0.1 and the port, User,
IdentityFile), `known_hosts` (the host key) and the user key. A client given `HOME=server.home` (and no agent)
connects as a user would, with `ssh://rw-test/...`. `stop()`/`start()` again keep the port and keys (a reboot).

`StallingProxy(server)` is a real TCP relay in front of it (alias `rw-stall`) that can stop forwarding while
keeping every connection open: a network that stalls, with no reset and no FIN for the client to see.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import signal
import socket
import subprocess
import threading
from pathlib import Path

from tests.waiting import wait_for

SSHD = "/usr/sbin/sshd"
ALIAS = "rw-test"


def sshd_missing() -> str | None:
    """Why the server cannot run here, or None (`make test` installs Debian's openssh-server)."""
    if not Path(SSHD).exists() or shutil.which("ssh-keygen") is None:
        return f"{SSHD} or ssh-keygen is missing: `apt-get install openssh-server` (make test does)"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SshServer:
    """`/usr/sbin/sshd -D -f CONFIG -p PORT` with keys and a client home made under `base`."""

    def __init__(self, base: Path) -> None:
        self.base = Path(base)
        self.dir = self.base / "sshd"
        self.home = self.base / "home"
        self.user = getpass.getuser()
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self._write_files()

    def _keygen(self, path: Path) -> None:
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "runwatch-test", "-f", str(path)],
            check=True,
        )

    def _write_files(self) -> None:
        ssh = self.home / ".ssh"
        ssh.mkdir(parents=True)
        self.dir.mkdir(parents=True)
        self._keygen(self.dir / "host_key")
        self._keygen(ssh / "id_ed25519")
        (self.dir / "authorized_keys").write_text((ssh / "id_ed25519.pub").read_text())
        sftp = next(
            (p for p in ("/usr/lib/openssh/sftp-server", "/usr/libexec/sftp-server") if Path(p).exists()),
            "internal-sftp",
        )
        (self.dir / "sshd_config").write_text(
            f"ListenAddress 127.0.0.1\nHostKey {self.dir / 'host_key'}\nPidFile {self.dir / 'sshd.pid'}\n"
            f"AuthorizedKeysFile {self.dir / 'authorized_keys'}\nPermitRootLogin prohibit-password\n"
            "StrictModes no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
            f"Subsystem sftp {sftp}\nLogLevel ERROR\nMaxSessions 100\nMaxStartups 100\n"
            # bash sources ~/.bashrc for ssh sessions only at shell level 1: this machine's user's .bashrc
            # (pyenv init, a lock that a killed session can leave behind) is not part of what is tested.
            "SetEnv SHLVL=2\n"
        )
        (ssh / "config").write_text(
            f"Host {ALIAS}\n  HostName 127.0.0.1\n  Port {self.port}\n  User {self.user}\n"
            f"  IdentityFile {ssh / 'id_ed25519'}\n  IdentitiesOnly yes\n"
        )
        host_pub = (self.dir / "host_key.pub").read_text().split()
        (ssh / "known_hosts").write_text(f"[127.0.0.1]:{self.port} {host_pub[0]} {host_pub[1]}\n")
        for p in (ssh / "id_ed25519", self.dir / "host_key"):
            p.chmod(0o600)

    def env(self, base: dict | None = None) -> dict:
        """An environment whose ssh client finds this server's config, key and known_hosts (no agent)."""
        env = dict(os.environ if base is None else base)
        env["HOME"] = str(self.home)
        env.pop("SSH_AUTH_SOCK", None)
        return env

    def url(self, path: Path | str, alias: str = ALIAS) -> str:
        return f"ssh://{alias}{Path(path).resolve()}"

    def add_alias(self, alias: str, port: int) -> None:
        """A second name for this server reached through `port` (a relay), with its known_hosts line."""
        ssh = self.home / ".ssh"
        with open(ssh / "config", "a") as f:
            f.write(
                f"Host {alias}\n  HostName 127.0.0.1\n  Port {port}\n  User {self.user}\n"
                f"  IdentityFile {ssh / 'id_ed25519'}\n  IdentitiesOnly yes\n"
            )
        host_pub = (self.dir / "host_key.pub").read_text().split()
        with open(ssh / "known_hosts", "a") as f:
            f.write(f"[127.0.0.1]:{port} {host_pub[0]} {host_pub[1]}\n")

    def start(self) -> SshServer:
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation folder
        self.proc = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(self.dir / "sshd_config"), "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=open(self.dir / "sshd.log", "ab"),  # noqa: SIM115 (the server's own log, kept for failures)
            start_new_session=True,
        )

        def greets() -> bool:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                return s.recv(4).startswith(b"SSH-")

        wait_for(greets, f"sshd to answer on port {self.port}", 30, proc=self.proc, log=self.dir / "sshd.log")
        return self

    def stop(self) -> None:
        """Kill the server and every session it forked, by their ids (a host going down: links drop)."""
        if self.proc is None:
            return
        for pid in [*_descendants(self.proc.pid), self.proc.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        self.proc = None


def _descendants(pid: int) -> list[int]:
    """Every process below `pid` (children first found, deepest last), read from /proc."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        children = parents.get(todo.pop(), [])
        found.extend(children)
        todo.extend(children)
    return found


class StallingProxy:
    """A TCP relay on 127.0.0.1 to `server`, reachable as the ssh alias `rw-stall`. `stall_after(n)` stops
    forwarding once `n` more bytes went from the server to the client (mid-transfer), `stall()` at once;
    while stalled, connections stay open and new ones are accepted but get nothing. `flow()` forwards again
    (what was held is sent). A side that closes closes its peer."""

    ALIAS = "rw-stall"

    def __init__(self, server: SshServer) -> None:
        self.server = server
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        server.add_alias(self.ALIAS, self.port)
        self._flowing = threading.Event()
        self._flowing.set()
        self._budget: int | None = None  # bytes the server may still send before the stall
        self._lock = threading.Lock()
        self._closed = False
        self.sent_to_client = 0
        self.open_links = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, path: Path | str) -> str:
        return self.server.url(path, self.ALIAS)

    def stall(self) -> None:
        self._flowing.clear()

    def stall_after(self, n: int) -> None:
        with self._lock:
            self._budget = n

    def flow(self) -> None:
        with self._lock:
            self._budget = None
        self._flowing.set()

    @property
    def stalled(self) -> bool:
        return not self._flowing.is_set()

    def close(self) -> None:
        self._closed = True
        self._flowing.set()
        self._listener.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.server.port), timeout=10)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self.open_links += 1
            done = threading.Event()
            for src, dst, down in ((client, upstream, False), (upstream, client, True)):
                threading.Thread(target=self._pump, args=(src, dst, down, done), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, down: bool, done: threading.Event) -> None:
        try:
            while not done.is_set():
                data = src.recv(65536)
                if not data:
                    break
                while data:
                    while not self._flowing.wait(0.2):  # stalled: hold the bytes, keep the link open
                        if done.is_set():
                            return
                    n = len(data)
                    if down:
                        with self._lock:
                            if self._budget is not None:
                                n = min(n, self._budget)
                                self._budget -= n
                                if self._budget <= 0:
                                    self._budget = None
                                    self._flowing.clear()
                            self.sent_to_client += n
                    dst.sendall(data[:n])
                    data = data[n:]
        except OSError:
            pass
        finally:
            if not done.is_set():
                done.set()
                with self._lock:
                    self.open_links -= 1
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    sock.close()
