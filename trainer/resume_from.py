"""Where a run resumes from: the latest checkpoint (verl's `trainer.resume_mode=auto`), or one named by
`python -m trainer.launch --resume-from STEP` (`resume_mode=resume_path`: the last good checkpoint before a
spike, as runwatch's alert action says)."""

from __future__ import annotations

from pathlib import Path


def resume_overrides(out: Path, step: int | None) -> dict[str, str]:
    """The verl overrides that resume from RUN_DIR/global_step_STEP (none when `step` is None)."""
    if step is None:
        return {}
    return {
        "trainer.resume_mode": "resume_path",
        "trainer.resume_from_path": str(out / f"global_step_{step}"),
    }


def resume_problems(out: Path, step: int | None) -> list[str]:
    """Pre-flight for `--resume-from STEP`: the checkpoint folder must be there (verl would otherwise assert
    deep inside its workers)."""
    if step is None:
        return []
    folder = out / f"global_step_{step}"
    if folder.is_dir():
        return []
    there = sorted(int(p.name[12:]) for p in out.glob("global_step_*") if p.name[12:].isdigit())
    have = ", ".join(str(s) for s in there) if there else "none"
    return [f"--resume-from {step}: no checkpoint folder {folder} (checkpoints in {out}: {have})"]


def latest_checkpoint(out: Path) -> int:
    """The step in RUN_DIR/latest_checkpointed_iteration.txt, 0 when there is none."""
    try:
        return int((out / "latest_checkpointed_iteration.txt").read_text().strip())
    except (OSError, ValueError):
        return 0
