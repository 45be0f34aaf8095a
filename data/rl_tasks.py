"""The RL task: small sums, with a rule-based reward, generated locally from a seed. Pure (no I/O).

Each row is one prompt in verl's RL data format: `data_source` (routes the row to our reward function),
`prompt` (chat messages), `ability`, `reward_model` (`{"style": "rule", "ground_truth": "<the sum>"}`) and
`extra_info` (`split`, `index`). The tiny model is warm-started on part of the train prompts
(`data.tiny_model.warm_start`) so that it answers in the right shape (a number, then end of turn) and gets
some sums right: the GRPO run then has rewards that differ within a group to learn from.
"""

from __future__ import annotations

import random

DATA_SOURCE = "runwatch/small_sums"
MAX_TERM = 9  # a + b with 0 <= a, b <= MAX_TERM: 100 distinct prompts


def question(a: int, b: int) -> str:
    return f"What is {a} + {b}?"


def make_rows(split: str, pairs: list[tuple[int, int]]) -> list[dict]:
    """verl RL rows for the given (a, b) pairs."""
    return [
        {
            "data_source": DATA_SOURCE,
            "prompt": [{"role": "user", "content": question(a, b)}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(a + b)},
            "extra_info": {"split": split, "index": index},
        }
        for index, (a, b) in enumerate(pairs)
    ]


def split_pairs(seed: int, val_count: int = 16) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Every (a, b) pair, shuffled with `seed`, split into train and validation (no pair in both)."""
    pairs = [(a, b) for a in range(MAX_TERM + 1) for b in range(MAX_TERM + 1)]
    random.Random(seed).shuffle(pairs)
    return pairs[val_count:], pairs[:val_count]
