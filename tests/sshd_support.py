"""A real OpenSSH server on 127.0.0.1 for the remote-root tests and bench/remote_latency.py (no tests here).

`SshServer(tmp).start()` writes a throwaway host key and user key (ssh-keygen), an authorized_keys, and a home
folder whose `.ssh/` holds what a user would have: `config` (Host `rw-test` -> 127.0.0.1 and the port, User,
IdentityFile), `known_hosts` (the host key) and the user key. A client given `HOME=server.home` (and no agent)
connects as a user would, with `ssh://rw-test/...`. `stop()`/`start()` again keep the port and keys (a reboot).
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

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

    def url(self, path: Path | str) -> str:
        return f"ssh://{ALIAS}{Path(path).resolve()}"

    def start(self) -> SshServer:
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation folder
        self.proc = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(self.dir / "sshd_config"), "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=open(self.dir / "sshd.log", "ab"),  # noqa: SIM115 (the server's own log, kept for failures)
            start_new_session=True,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited: {(self.dir / 'sshd.log').read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    if s.recv(4).startswith(b"SSH-"):
                        return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("sshd did not answer within 30 s")

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
