"""Multi-turn SFT conversations about small coding tasks, generated locally from a seed.

Pure: `make_conversations(n, seed)` returns the same list for the same arguments, with no I/O. Each
conversation is a list of `{"role", "content"}` messages (system, user, assistant, and sometimes a second
user/assistant exchange). Names, constants and example inputs are drawn at random so that a small train set
holds details a tiny model can memorise, which is what makes the `overfit` scenario overfit for real.
"""

from __future__ import annotations

import random
from collections.abc import Callable

SYSTEM_PROMPTS = [
    "You are a helpful coding assistant.",
    "You are a concise Python tutor. Answer with code first.",
    "You write small, correct Python functions.",
]

VARIABLE_NAMES = ["xs", "items", "values", "nums", "data", "seq", "arr", "vals", "elems", "parts"]
TEXT_NAMES = ["s", "text", "word", "line", "name", "msg", "label", "token"]
NUMBER_NAMES = ["n", "k", "x", "count", "limit", "size", "width", "depth"]
WORDS = ["apple", "river", "stone", "cloud", "ember", "maple", "orbit", "pixel", "quartz", "tiger", "violet"]


def _task_sum(rng: random.Random) -> tuple[str, str, str, str]:
    name = rng.choice(["total", "sum_all", "add_up", "list_sum"])
    arg = rng.choice(VARIABLE_NAMES)
    xs = [rng.randint(-9, 30) for _ in range(rng.randint(2, 5))]
    request = f"Write a function `{name}` that returns the sum of a list of numbers."
    code = f"def {name}({arg}):\n    result = 0\n    for v in {arg}:\n        result += v\n    return result"
    return name, request, code, f"{name}({xs}) returns {sum(xs)}."


def _task_max(rng: random.Random) -> tuple[str, str, str, str]:
    name = rng.choice(["largest", "max_of", "biggest", "find_max"])
    arg = rng.choice(VARIABLE_NAMES)
    xs = [rng.randint(0, 99) for _ in range(rng.randint(2, 5))]
    request = f"Write `{name}` returning the largest element of a non-empty list."
    code = (
        f"def {name}({arg}):\n    best = {arg}[0]\n    for v in {arg}[1:]:\n"
        f"        if v > best:\n            best = v\n    return best"
    )
    return name, request, code, f"{name}({xs}) returns {max(xs)}."


def _task_reverse(rng: random.Random) -> tuple[str, str, str, str]:
    name = rng.choice(["reverse", "backwards", "flip", "rev_text"])
    arg = rng.choice(TEXT_NAMES)
    word = rng.choice(WORDS)
    request = f"How do I reverse a string in Python? Call the function `{name}`."
    code = f"def {name}({arg}):\n    return {arg}[::-1]"
    return name, request, code, f'{name}("{word}") returns "{word[::-1]}".'


def _task_factorial(rng: random.Random) -> tuple[str, str, str, str]:
    name = rng.choice(["factorial", "fact", "prod_to"])
    arg = rng.choice(NUMBER_NAMES)
    n = rng.randint(0, 7)
    value = 1
    for i in range(2, n + 1):
        value *= i
    request = f"Please write `{name}({arg})` computing the factorial iteratively."
    code = f"def {name}({arg}):\n    result = 1\n    for i in range(2, {arg} + 1):\n        result *= i\n    return result"
    return name, request, code, f"{name}({n}) returns {value}."


def _task_count_char(rng: random.Random) -> tuple[str, str, str, str]:
    name = rng.choice(["count_char", "occurrences", "how_many"])
    arg = rng.choice(TEXT_NAMES)
    ch = rng.choice("aeiourst")
    word = rng.choice(WORDS)
    request = f"Write `{name}` that counts how many times '{ch}' appears in a string."
    code = f"def {name}({arg}):\n    return sum(1 for c in {arg} if c == '{ch}')"
    return name, request, code, f'{name}("{word}") returns {word.count(ch)}.'


def _task_is_even(rng: random.Random) -> tuple[str, str, str, str]:
    name = rng.choice(["is_even", "even", "divisible_by_two"])
    arg = rng.choice(NUMBER_NAMES)
    n = rng.randint(-20, 50)
    request = f"I need `{name}` that tells whether an integer is even."
    code = f"def {name}({arg}):\n    return {arg} % 2 == 0"
    return name, request, code, f"{name}({n}) returns {n % 2 == 0}."


def _task_scale(rng: random.Random) -> tuple[str, str, str, str]:
    name = rng.choice(["scale", "multiply_all", "times"])
    arg = rng.choice(VARIABLE_NAMES)
    factor = rng.randint(2, 9)
    xs = [rng.randint(0, 12) for _ in range(rng.randint(2, 4))]
    request = f"Write `{name}` that multiplies every number in a list by {factor}."
    code = f"def {name}({arg}):\n    return [v * {factor} for v in {arg}]"
    return name, request, code, f"{name}({xs}) returns {[v * factor for v in xs]}."


def _task_clamp(rng: random.Random) -> tuple[str, str, str, str]:
    name = rng.choice(["clamp", "bound", "limit_to"])
    arg = rng.choice(NUMBER_NAMES)
    low = rng.randint(-10, 5)
    high = low + rng.randint(3, 20)
    x = rng.randint(-30, 40)
    request = f"Write `{name}` that keeps a number between {low} and {high}."
    code = f"def {name}({arg}):\n    return max({low}, min({high}, {arg}))"
    return name, request, code, f"{name}({x}) returns {max(low, min(high, x))}."


def _task_fizzbuzz(rng: random.Random) -> tuple[str, str, str, str]:
    name = rng.choice(["fizzbuzz", "fizz", "fb"])
    arg = rng.choice(NUMBER_NAMES)
    n = rng.randint(1, 30)
    expected = "FizzBuzz" if n % 15 == 0 else "Fizz" if n % 3 == 0 else "Buzz" if n % 5 == 0 else str(n)
    request = f"Write the classic `{name}` for a single number."
    code = (
        f"def {name}({arg}):\n    if {arg} % 15 == 0:\n        return 'FizzBuzz'\n"
        f"    if {arg} % 3 == 0:\n        return 'Fizz'\n    if {arg} % 5 == 0:\n"
        f"        return 'Buzz'\n    return str({arg})"
    )
    return name, request, code, f'{name}({n}) returns "{expected}".'


TASKS: list[Callable[[random.Random], tuple[str, str, str, str]]] = [
    _task_sum,
    _task_max,
    _task_reverse,
    _task_factorial,
    _task_count_char,
    _task_is_even,
    _task_scale,
    _task_clamp,
    _task_fizzbuzz,
]

FOLLOW_UPS = ["example", "docstring", "test"]


def make_conversation(rng: random.Random) -> list[dict[str, str]]:
    """One conversation: system, user request, assistant code, and in about half of them a follow-up turn."""
    name, request, code, example = rng.choice(TASKS)(rng)
    messages = [
        {"role": "system", "content": rng.choice(SYSTEM_PROMPTS)},
        {"role": "user", "content": request},
        {"role": "assistant", "content": f"```python\n{code}\n```"},
    ]
    if rng.random() < 0.5:
        kind = rng.choice(FOLLOW_UPS)
        if kind == "example":
            messages.append({"role": "user", "content": "Can you show an example call?"})
            messages.append({"role": "assistant", "content": f"Sure: {example}"})
        elif kind == "docstring":
            first, _, rest = code.partition("\n")
            doc = f'    """{request.split("`")[0].strip() or "Does the task."}"""'
            messages.append({"role": "user", "content": "Add a docstring."})
            messages.append({"role": "assistant", "content": f"```python\n{first}\n{doc}\n{rest}\n```"})
        else:
            call, _, result = example.partition(" returns ")
            messages.append({"role": "user", "content": "Write a unit test for it."})
            messages.append(
                {
                    "role": "assistant",
                    "content": f"```python\ndef test_{name}():\n    assert {call} == {result[:-1]}\n```",
                }
            )
    return messages


def make_conversations(n: int, seed: int) -> list[list[dict[str, str]]]:
    """`n` conversations, identical for the same `n` and `seed`."""
    rng = random.Random(seed)
    return [make_conversation(rng) for _ in range(n)]


def split_train_val(rows: list, val_fraction: float, seed: int) -> tuple[list, list]:
    """Shuffle `rows` with `seed` and cut off `val_fraction` of them (at least one) as the validation set."""
    order = list(range(len(rows)))
    random.Random(seed + 1).shuffle(order)
    n_val = max(1, round(len(rows) * val_fraction))
    val_idx = set(order[:n_val])
    train = [rows[i] for i in sorted(set(order) - val_idx)]
    val = [rows[i] for i in sorted(val_idx)]
    return train, val
