"""`runwatch COMMAND`: every command of `python -m collector` is one of runwatch's too (the two lists are kept
apart for their help lines; `runwatch incidents` was once missing)."""

from __future__ import annotations

import argparse

import pytest

from collector.cli import _parser
from runwatch.cli import _help, main


def collector_commands() -> list[str]:
    (sub,) = [a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return sorted(sub.choices)


@pytest.mark.parametrize("command", collector_commands())
def test_every_collector_command_is_a_runwatch_command(command, capsys):
    with pytest.raises(SystemExit) as done:
        main([command, "--help"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: runwatch {command}")
    assert f"  {command} " in _help()
