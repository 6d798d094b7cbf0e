"""`ltr COMMAND --help` shows every help string as written (rich would read `[default: x]` or
`[publish]` as a style tag and drop it) and the default of every option that has one."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from trainer.cli import COMMAND_MODULES
from trainer.cli import app as cli_app

BOX = re.compile(r"[│╭╮╰╯─]")


def flat(text: str) -> str:
    """Help output as one line: no panel borders, runs of whitespace as one space."""
    return " ".join(BOX.sub(" ", text).split())


def help_of(*argv: str) -> str:
    result = CliRunner().invoke(cli_app, [*argv, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return flat(result.output)


def test_top_level_help_lists_every_command() -> None:
    shown = help_of()
    for name in COMMAND_MODULES:
        assert name in shown


def leaf_commands(group: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every runnable command's argv, `ltr features push` as ("features", "push")."""
    for name, command in group.commands.items():
        if hasattr(command, "commands"):  # a group (typer's own, not click.Group)
            yield from leaf_commands(command, (*path, name))
        else:
            yield (*path, name)


LEAVES = list(leaf_commands(typer.main.get_command(cli_app)))


def test_command_groups_are_walked() -> None:
    assert ("features", "push") in LEAVES and ("experiment", "start") in LEAVES


@pytest.mark.parametrize("argv", LEAVES, ids=" ".join)
def test_every_help_string_and_default_is_shown(argv: tuple[str, ...]) -> None:
    command: Any = typer.main.get_command(cli_app)
    for part in argv:
        command = command.commands[part]
    name = " ".join(argv)
    shown = help_of(*argv)
    for param in command.params:
        if param.param_type_name != "option" or param.hidden:
            continue
        # As written in the command's module (the CLI stores it escaped for rich).
        text = (getattr(param, "help", None) or "").replace("\\[", "[")
        if text:
            assert flat(text) in shown, f"ltr {name} {param.opts[0]}: help {text!r} not shown"
        default = param.default
        if param.show_default and default is not None and not param.is_flag and default != ():
            assert f"[default: {default}]" in shown, f"ltr {name} {param.opts[0]}: no default"


def test_bracketed_help_survives() -> None:
    assert "Override [publish] registry." in help_of("nightly")
    assert "[default: LTR_PORT or 8000]" in help_of("serve")
    assert "Redis URL [default: LTR_REDIS_URL]." in help_of("features", "push")


def test_command_lists_show_each_summary_as_one_sentence() -> None:
    """`ltr features --help` broke push's summary after "the live" (the docstring's line
    break); at 200 columns each summary is one line of the list."""
    for group in ((), ("features",), ("experiment",), ("redis",)):
        result = CliRunner().invoke(cli_app, [*group, "--help"], env={"COLUMNS": "200"})
        rows = [BOX.sub(" ", line).strip() for line in result.output.splitlines()]
        listed = [r for r in rows if r and not r.startswith(("-", "Usage", "Options"))]
        for leaf in (argv for argv in LEAVES if argv[: len(group)] == group):
            if len(leaf) != len(group) + 1:
                continue
            (row,) = [r for r in listed if r.split(" ", 1)[0] == leaf[-1]]
            assert row.rstrip().endswith((".", ")")), (leaf, row)


def test_piped_help_shows_long_option_names_whole() -> None:
    """Before: piped (`ltr train --help | grep ...`), rich assumed 80 columns and printed
    `--combination-bucke…`, the name the docs tell users to pass."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "TERMINAL_WIDTH")}
    code = "from trainer.cli import main; main(['train', '--help'])"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False
    ).stdout
    for name in ("--combination-buckets", "--combination-max-fields", "--user-embeddings-from"):
        assert name in out, out
