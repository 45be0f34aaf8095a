"""Run ids and roots: a run's id is its folder's path under its root (see `discover.find_runs`)."""

from __future__ import annotations

from pathlib import Path, PurePath


def rel_id(path: Path, root: Path) -> str:
    rel = path.relative_to(root)
    return root.name if rel == Path(".") else rel.as_posix()


def root_name(root: Path) -> str:
    return root.stem if root.is_file() else root.name


def distinct_root_name(root: Path, others: set[Path]) -> str:
    """The prefix that tells `root`'s runs from same-id runs of the `others` roots: the root's name
    (`root_name`), with as many of its parent folders before it as it takes to differ from every other root's
    (`/data/a/outputs` and `/data/b/outputs` give `a/outputs` and `b/outputs`, two `metrics.jsonl` file roots
    `a/metrics` and `b/metrics`). The name alone when it already differs, as it mostly does."""

    def tail(path: Path, n: int) -> tuple[str, ...]:
        return (*path.parent.parts, root_name(path))[-n:]

    depth = len(root.parts)
    for n in range(1, depth + 1):
        mine = tail(root, n)
        if all(tail(other, n) != mine for other in others if other != root):
            return "/".join(part.strip("/") or "root" for part in mine)
    return root.as_posix().strip("/") or "root"


def root_of(path: Path, roots: list[Path]) -> Path | None:
    best: Path | None = None
    for root in roots:
        root = as_path(root)
        same_machine = getattr(path, "host", None) is getattr(root, "host", None)  # (a remote path's host)
        if (
            same_machine
            and (path == root or path.is_relative_to(root))
            and (best is None or len(root.parts) > len(best.parts))
        ):
            best = root
    return best


def as_path(path) -> Path:
    """`path` as a Path; a path object of another machine (a remote root's `RemotePath`) is kept as it is."""
    return path if isinstance(path, PurePath) else Path(path)
