"""How long the lake's compactions hold the team's writes (for `team.py`): a thread asks the catalog's Postgres every
`every_s` whether a session holds the lake's write lock exclusively (`store/lake_compaction.LAKE_LOCK`, taken by a
compaction while it merges; every batch takes it shared), and adds up those times. Seen from outside the
collectors, so it times any checkout's compactions alike (the lock exists since 6c49a1d)."""

from __future__ import annotations

import threading
import time

from tests.pg_support import PgServer

# pg_advisory_xact_lock(0x72770002, 1): runwatch's lake write lock (collector/store/lake_compaction.py)
HELD = (
    "SELECT count(*) FROM pg_locks WHERE locktype = ''advisory'' AND classid = 1920401410 AND objid = 1 "
    "AND objsubid = 2 AND mode = ''ExclusiveLock'' AND granted"
)


class CompactionWatch:
    """`start()`, then `stop()` returns {"compactions", "held_s", "max_s"}: the exclusive holds seen, their
    seconds in all and the longest (each to within `every_s`)."""

    def __init__(self, pg: PgServer, database: str, every_s: float = 0.05) -> None:
        import duckdb

        from collector.store.lake import load_extensions

        self.con = duckdb.connect()
        load_extensions(self.con)  # (the Postgres scanner among them)
        self.con.execute(
            f"ATTACH 'dbname={database} host=127.0.0.1 port={pg.port} user={pg.user}' AS pg (TYPE postgres)"
        )
        self.every_s = every_s
        self.holds: list[float] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="compaction-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> dict:
        self._done.set()
        self._thread.join()
        return {
            "compactions": len(self.holds),
            "held_s": sum(self.holds),
            "max_s": max(self.holds, default=0.0),
        }

    def _watch(self) -> None:
        since = None
        while not self._done.wait(self.every_s):
            (held,) = self.con.execute(f"SELECT * FROM postgres_query('pg', '{HELD}')").fetchone()
            now = time.perf_counter()
            if held and since is None:
                since = now
            elif not held and since is not None:
                self.holds.append(now - since)
                since = None
