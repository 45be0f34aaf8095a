"""A marker left by a collector killed with -9, whose pid and port other programs took since (issue 24.3):
the CLI proves who answers on the port before it sends the token (a stranger's server never sees it, and
the command reads the database itself), and `serve` replaces the marker instead of refusing to start."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from collector.core.runtime import marker_path, token_path
from tests.collector.test_daemon_support import REPO, Daemon, cli, cli_json, wait_for

# Another program's web server on the port the dead collector had: it logs the headers of every request.
IMPOSTOR = textwrap.dedent(
    """
    import http.server, json, sys
    port, log = int(sys.argv[1]), sys.argv[2]
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            with open(log, "a") as f:
                f.write(json.dumps({"path": self.path, "headers": dict(self.headers)}) + "\\n")
            body = b"<html>another program's page</html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        do_POST = do_GET
        def log_message(self, *args):
            pass
    server = http.server.HTTPServer(("127.0.0.1", port), Handler)
    print("listening", flush=True)
    server.serve_forever()
    """
)


def test_a_reused_pid_and_port_get_no_token_and_serve_replaces_the_marker(tmp_path):
    root, db = tmp_path / "runs", tmp_path / "rw.duckdb"
    (root / "a").mkdir(parents=True)
    (root / "a" / "metrics.jsonl").write_text('{"step":1,"data":{"train/loss":1.0}}\n')
    first = Daemon(db, [root]).start()
    wait_for(lambda: cli_json(db, "runs"), "the run through the first collector")
    stale = json.loads(marker_path(db).read_text())
    first.kill9()
    assert marker_path(db).exists()  # a kill -9 leaves the marker behind

    log = tmp_path / "impostor.log"
    impostor = subprocess.Popen(
        [sys.executable, "-c", IMPOSTOR, str(stale["port"]), str(log)], stdout=subprocess.PIPE, text=True
    )
    second = Daemon(db, [root])
    try:
        assert impostor.stdout.readline().strip() == "listening"
        # The marker's pid now belongs to that other program (the kernel handed the number out again).
        marker_path(db).write_text(json.dumps(stale | {"pid": impostor.pid}))

        runs = cli(db, "runs", "--json")
        assert [r["id"] for r in json.loads(runs.stdout)] == ["a"]  # read from the database itself
        asked = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        assert all("authorization" not in {k.lower() for k in r["headers"]} for r in asked), (
            f"the token went to another program: {asked}"
        )

        second.start()  # replaces the stale marker rather than refusing
        assert json.loads(marker_path(db).read_text())["pid"] == second.proc.pid
        assert "replacing the stale marker" in second.log.read_text()
        assert [r["id"] for r in cli_json(db, "runs")] == ["a"]
        assert second.stop() == 0
    finally:
        second.ensure_stopped()
        impostor.kill()
        impostor.wait()


def test_a_live_collector_still_refuses_a_second_serve(tmp_path):
    root, db = tmp_path / "runs", tmp_path / "rw.duckdb"
    root.mkdir()
    first = Daemon(db, [root]).start()
    try:
        out = subprocess.run(
            [sys.executable, "-m", "collector", "serve", "--db", str(db), str(root), "--port", "0"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode != 0 and "already serving" in out.stderr
        assert json.loads(marker_path(db).read_text())["pid"] == first.proc.pid
        assert first.stop() == 0
    finally:
        first.ensure_stopped()


def test_a_marker_of_a_collector_killed_under_its_parent_is_replaced_once_saying_it_exited(tmp_path):
    # The demo's collector killed with -9 while the demo still ran: its pid is a zombie until the demo reaps
    # it (no command line). `serve` said it twice (it checks before it starts and as it starts), and that
    # "that process is now `unknown`".
    root, db = tmp_path / "runs", tmp_path / "rw.duckdb"
    root.mkdir()
    zombie = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    zombie.kill()
    stat = Path(f"/proc/{zombie.pid}/stat")
    wait_for(lambda: stat.read_text().split(")")[-1].split()[0] == "Z", "the killed child to be a zombie")
    token_path(db).write_text("the dead collector's token")  # it had served this database
    token_path(db).chmod(0o600)
    marker_path(db).write_text(json.dumps({"pid": zombie.pid, "host": "127.0.0.1", "port": 9, "roots": []}))
    daemon = Daemon(db, [root])
    try:
        daemon.start()
        said = [line for line in daemon.log.read_text().splitlines() if "replacing the stale marker" in line]
        assert len(said) == 1, said
        assert said[0].endswith(f"(pid {zombie.pid}, http://127.0.0.1:9): it has exited"), said
        assert daemon.stop() == 0
    finally:
        daemon.ensure_stopped()
        zombie.wait()
