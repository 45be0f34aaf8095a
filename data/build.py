"""Build the local SFT data set, tokenizer and tiny model: `python -m data.build --out data/build`.

Offline and deterministic: the same seed gives byte-identical parquet files. Layout under OUT:

    sft_train.parquet, sft_val.parquet   `messages` column (list of {role, content}), 98/2 split
    rl_train.parquet, rl_val.parquet     small sums in verl's RL format (data/rl_tasks.py), 84/16 prompts
    tokenizer/                           byte-level BPE, ChatML chat template
    model/                               tiny Qwen2 (save_pretrained) with the tokenizer beside it
    rl_model/                            the same model warm-started on some sums (the GRPO presets' start)
    .done                                written last; its presence means the build is complete
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from data.conversations import make_conversations, split_train_val
from data.rl_tasks import make_rows, split_pairs
from data.tiny_model import make_tiny_qwen2, train_tokenizer, warm_start

MESSAGES_TYPE = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))


def write_messages_parquet(rows: list[list[dict[str, str]]], path: Path) -> None:
    """Write one `messages` column to `path` with fixed writer settings, so equal rows give equal bytes."""
    table = pa.table({"messages": pa.array(rows, type=MESSAGES_TYPE)})
    tmp = path.with_suffix(".parquet.tmp")
    pq.write_table(table, tmp, compression="zstd", row_group_size=len(rows) or 1, write_statistics=False)
    tmp.replace(path)


def write_rl_parquet(rows: list[dict], path: Path) -> None:
    """verl RL rows (data_source, prompt, ability, reward_model, extra_info) to `path`, fixed writer settings."""
    table = pa.Table.from_pylist(rows)
    tmp = path.with_suffix(".parquet.tmp")
    pq.write_table(table, tmp, compression="zstd", row_group_size=len(rows) or 1, write_statistics=False)
    tmp.replace(path)


# The warm start sees 40 of the 84 train sums for 150 steps: it learns to answer with a number and stop, and gets
# about one sum in ten right; GRPO has the rest to learn.
WARM_START_PAIRS = 40
WARM_START_STEPS = 150


def build_rl(out: Path, tokenizer, seed: int) -> dict:
    """The RL data and the warm-started model under `out` (rl_train/rl_val parquet, rl_model/)."""
    import torch

    train_pairs, val_pairs = split_pairs(seed)
    train_rows, val_rows = make_rows("train", train_pairs), make_rows("test", val_pairs)
    write_rl_parquet(train_rows, out / "rl_train.parquet")
    write_rl_parquet(val_rows, out / "rl_val.parquet")
    model = make_tiny_qwen2(tokenizer, seed=seed)
    examples = [(r["prompt"], r["reward_model"]["ground_truth"]) for r in train_rows[:WARM_START_PAIRS]]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # same result on every machine, and no fight over a shared CPU
    try:
        loss = warm_start(model, tokenizer, examples, steps=WARM_START_STEPS, seed=seed)
    finally:
        torch.set_num_threads(threads)
    shutil.rmtree(out / "rl_model", ignore_errors=True)
    model.save_pretrained(out / "rl_model")
    tokenizer.save_pretrained(out / "rl_model")
    return {
        "rl_train_rows": len(train_rows),
        "rl_val_rows": len(val_rows),
        "rl_warm_start_loss": round(loss, 4),
    }


def build(out: Path, rows: int, seed: int, vocab_size: int) -> dict:
    """Build everything under `out`; returns a summary (row counts, vocabulary and parameter sizes)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / ".done").unlink(missing_ok=True)

    conversations = make_conversations(rows, seed)
    train, val = split_train_val(conversations, val_fraction=0.02, seed=seed)
    write_messages_parquet(train, out / "sft_train.parquet")
    write_messages_parquet(val, out / "sft_val.parquet")

    texts = (m["content"] for conv in train for m in conv)
    tokenizer = train_tokenizer(texts, vocab_size=vocab_size)
    for sub in ("tokenizer", "model"):
        shutil.rmtree(out / sub, ignore_errors=True)
    tokenizer.save_pretrained(out / "tokenizer")

    model = make_tiny_qwen2(tokenizer, seed=seed)
    model.save_pretrained(out / "model")
    # Beside the weights too, so `model.path` alone is enough for verl and for plain transformers.
    tokenizer.save_pretrained(out / "model")

    rl_summary = build_rl(out, tokenizer, seed)

    summary = {
        "seed": seed,
        "rows": rows,
        "train_rows": len(train),
        "val_rows": len(val),
        "vocab_size": len(tokenizer),
        "parameters": sum(p.numel() for p in model.parameters()),
        **rl_summary,
    }
    (out / "build.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / ".done").write_text("ok\n")
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("data/build"))
    parser.add_argument("--rows", type=int, default=4000, help="conversations in all (train + val)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--vocab-size", type=int, default=512)
    args = parser.parse_args(argv)
    if args.rows < 50:
        print(
            f"data.build: --rows {args.rows} is too small (need at least 50 for a 98/2 split)",
            file=sys.stderr,
        )
        return 2
    summary = build(args.out, args.rows, args.seed, args.vocab_size)
    print(f"data.build: wrote {args.out}: {json.dumps(summary)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
