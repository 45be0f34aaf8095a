"""Team mode's compaction as the lake grows (issue 26): what one merge of `point_rows` costs beside a large table,
DuckLake 0.3's default against the cap a collector now gives it (`lake_compaction.MERGE_UP_TO_BYTES`, the merge's
`max_file_size`) and against the lake option `target_file_size` of the same size. Runs
under the team venv (DuckDB 1.4.4 + DuckLake), on a throwaway Postgres catalog (`tests/pg_support.py`):

    .venv-team/bin/python bench/lake_merge.py [--rows 10000000] [--merges 3]

For each way, in turns: a lake whose `point_rows` holds `--rows` points (one INSERT: a few large files, as
earlier merges leave them), then `--merges` times: 40 batches of 2,000 points (a batch each of 1,000 runs, two
series, at 4 x 250 live runs about 20 s of lines) and one `ducklake_merge_adjacent_files` of the table, as a
collector compacts (the collectors' writes wait for it), then snapshots expired and old files removed. Prints
each merge's seconds and the MB it wrote, and the table's live files after it; the rows are checked unchanged.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import gen  # noqa: E402

from collector.store.lake import LakeSpec, attach, load_extensions  # noqa: E402
from collector.store.lake_compaction import MERGE_UP_TO_BYTES  # noqa: E402
from tests.pg_support import PgServer  # noqa: E402

NAME = "lake_merge"
# The merge's own cap (landed), DuckLake's default, and the lake option `target_file_size` (kept in the catalog).
WAYS = {"default": "", "capped": f", max_file_size => {MERGE_UP_TO_BYTES}", "target_file_size": ""}
COLUMNS = "series BIGINT, step BIGINT, value DOUBLE, wall_time DOUBLE, source_id BIGINT, segment BIGINT"


def parquet(folder: Path) -> dict[str, int]:
    return {str(p): p.stat().st_size for p in folder.rglob("*.parquet")}


def one_way(pg: PgServer, work: Path, way: str, rows: int, merges: int) -> list[dict]:
    import duckdb

    data = work / way
    database = f"{work.name}_{way}"
    data.mkdir(parents=True)
    con = duckdb.connect()
    load_extensions(con)
    attach(con, LakeSpec.parse(f"ducklake:postgres:{pg.new_database(database)}", str(data)))
    con.execute(f"CREATE TABLE lake.point_rows ({COLUMNS})")
    if way == "target_file_size":
        con.execute(f"CALL lake.set_option('target_file_size', '{MERGE_UP_TO_BYTES // 2**20}MiB')")
    con.execute(
        "INSERT INTO lake.point_rows SELECT i % 2000, i // 2000, random(), 0, 1, 0 FROM range(?) t(i)", [rows]
    )
    out = []
    step = rows // 2000
    for _ in range(merges):
        for _ in range(40):
            con.execute(
                "INSERT INTO lake.point_rows SELECT i, ?, random(), 0, 1, 0 FROM range(2000) t(i)", [step]
            )
            step += 1
        before, load = parquet(data), os.getloadavg()[0]
        t0 = time.perf_counter()
        con.execute(f"CALL ducklake_merge_adjacent_files('lake', 'point_rows'{WAYS[way]})")
        merge_s = time.perf_counter() - t0
        for fn in ("ducklake_expire_snapshots", "ducklake_cleanup_old_files"):
            con.execute(f"SELECT count(*) FROM {fn}('lake', older_than => now())").fetchall()
        after = parquet(data)
        (count,) = con.execute("SELECT count(*) FROM lake.point_rows").fetchone()
        assert count == rows + (step - rows // 2000) * 2000, (count, step)  # (a merge changes no row)
        out.append(
            {
                "way": way,
                "merge_s": merge_s,
                "written_mb": sum(size for p, size in after.items() if p not in before) / 1e6,
                "live_files": len(after),
                "largest_mb": max(after.values()) / 1e6,
                "rows": count,
                "load_1min": load,
            }
        )
    con.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=10_000_000, help="points in the table before the merges")
    ap.add_argument("--merges", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2, help="each way this many times, in turns")
    args = ap.parse_args()
    work = gen.OUT / NAME
    shutil.rmtree(work, ignore_errors=True)
    pg = PgServer().start()
    results = []
    try:
        for r in range(args.rounds):
            for way in list(WAYS) if r % 2 == 0 else reversed(WAYS):
                results += [
                    x | {"round": r + 1} for x in one_way(pg, work / f"r{r}", way, args.rows, args.merges)
                ]
    finally:
        pg.remove()
    gen.print_table(
        f"one merge of point_rows beside {args.rows:,} points (cap {MERGE_UP_TO_BYTES / 2**20:.0f} MiB)",
        ["round", "way", "merge s", "MB written", "live files", "largest MB", "load 1 min"],
        [[x["round"], x["way"], f"{x['merge_s']:.2f}", f"{x['written_mb']:.1f}", x["live_files"],
          f"{x['largest_mb']:.1f}", f"{x['load_1min']:.1f}"] for x in results],
    )  # fmt: skip
    print(
        f"wrote {gen.write_json(NAME, {'rows': args.rows, 'cap_bytes': MERGE_UP_TO_BYTES, 'merges': results})}"
    )


if __name__ == "__main__":
    main()
