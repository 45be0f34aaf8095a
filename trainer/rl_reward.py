"""The rule-based reward of the GRPO presets, loaded by verl from this file
(`reward.custom_reward_function.path=trainer/rl_reward.py`, `name=compute_score`).

verl calls `compute_score(data_source, solution_str, ground_truth, extra_info, **reward_kwargs)` once per
response, in its reward worker process. For our small sums the score is 1.0 when the response is exactly the
expected number, partial credit for a number close to it (`score_sum`); other data sources get verl's
`default_compute_score`.

`collapse_after_step=S` with `samples_per_step=N` (reward_kwargs, preset `grpo_collapse`) switches the reward
off for real after S training steps: from the (S*N+1)-th training response on, every score is 0.0.
Validation responses (`extra_info["split"] != "train"`) are not counted and always scored. The count lives in
the reward worker, so it needs `reward.num_workers=1`, and it restarts when a run resumes.
"""

from __future__ import annotations

DATA_SOURCE = "runwatch/small_sums"  # the rows data.build writes (data/rl_tasks.py)

_train_responses = 0


def score_sum(solution_str: str, ground_truth: str) -> float:
    """1.0 if the response (stripped of whitespace and end-of-turn markers) is the expected number; a number
    off by d scores 0.5 * (1 - d/10) (0 from 10 away); anything else 0.0. The partial credit gives every group
    of samples rewards that differ, so GRPO has a signal from the first step."""
    answer = solution_str.replace("<|im_end|>", "").replace("<|endoftext|>", "").strip()
    expected = str(ground_truth).strip()
    if answer == expected:
        return 1.0
    if not answer.isdigit() or not expected.lstrip("-").isdigit():
        return 0.0
    return 0.5 * max(0.0, 1.0 - abs(int(answer) - int(expected)) / 10)


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: str,
    extra_info: dict | None = None,
    collapse_after_step: int | None = None,
    samples_per_step: int | None = None,
    **_: object,
) -> float:
    global _train_responses
    if data_source != DATA_SOURCE:
        # Any other data set (GSM8K, MATH... prepared with verl's scripts, e.g. on GPUs): verl's own rules.
        from verl.utils.reward_score import default_compute_score

        return default_compute_score(data_source, solution_str, ground_truth, extra_info)
    if (extra_info or {}).get("split") == "train":
        _train_responses += 1
        switched_off = collapse_after_step is not None and bool(samples_per_step)
        if switched_off and _train_responses > int(collapse_after_step) * int(samples_per_step):
            return 0.0
    return score_sum(solution_str, ground_truth)
