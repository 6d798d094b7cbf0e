"""`ltr`: the one console script. Each command lives in `trainer/commands/<name>.py` and
registers itself; heavy libraries are imported inside the commands, so `ltr serve` runs in
the serving image without torch or LightGBM."""

from __future__ import annotations

import importlib
import inspect
import signal
import sys
import typing
from collections.abc import Iterator
from typing import Any

import typer
from rich.markup import escape
from typer import rich_utils
from typer.models import ParameterInfo

from trainer.commands.errors import json_aware, print_json_failure

COMMAND_MODULES: tuple[str, ...] = (
    "train",
    "evaluate",
    "convert",
    "publish",
    "nightly",
    "simulate",
    "dataset",
    "serve",
    "features",
    "explain",
    "experiment",
    "redis",
)

app = typer.Typer(
    name="ltr",
    help="Learning-to-rank: train, evaluate, convert, simulate, publish and serve ranking models.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _parameter_infos(callback: Any) -> Iterator[ParameterInfo]:
    """The typer.Option / typer.Argument objects of a command, `Annotated` or as defaults.
    String annotations (`from __future__ import annotations`) are replaced by the objects they
    evaluate to, so that typer later reads these same objects rather than fresh ones."""
    hints = typing.get_type_hints(callback, include_extras=True)
    callback.__annotations__ = hints
    for hint in hints.values():
        yield from (m for m in getattr(hint, "__metadata__", ()) if isinstance(m, ParameterInfo))
    for param in inspect.signature(callback).parameters.values():
        if isinstance(param.default, ParameterInfo):
            yield param.default


def _commands(group: typer.Typer) -> Iterator[typer.models.CommandInfo]:
    yield from group.registered_commands
    for sub in group.registered_groups:  # `ltr features ...`, `ltr experiment ...`
        if sub.typer_instance is not None:
            yield from _commands(sub.typer_instance)


def show_help_as_written(cli: typer.Typer) -> None:
    """Help strings are plain text, but typer renders them as rich markup, where `[default: x]`
    or `[publish]` is a style tag and vanishes: escape every command's docstring and every
    option's help once (an option object may be shared by several commands)."""
    escaped: set[tuple[int, str]] = set()

    def plain(obj: Any, attr: str) -> None:
        text = getattr(obj, attr, None)
        if isinstance(text, str) and (id(obj), attr) not in escaped:
            setattr(obj, attr, escape(text))
            escaped.add((id(obj), attr))

    def walk(group: typer.Typer) -> None:
        plain(group.info, "help")
        for sub in group.registered_groups:
            if sub.typer_instance is not None:
                walk(sub.typer_instance)

    walk(cli)
    for command in _commands(cli):
        plain(command, "help")
        if command.callback is not None:
            plain(command.callback, "__doc__")
            if command.short_help is None and command.callback.__doc__:
                # The command list shows the docstring's first paragraph with its line
                # breaks, which broke two summaries mid-sentence: one line, wrapped by rich.
                first = inspect.cleandoc(command.callback.__doc__).split("\n\n")[0]
                command.short_help = " ".join(first.split())
            for info in _parameter_infos(command.callback):
                plain(info, "help")


def report_failures_as_json(cli: typer.Typer) -> None:
    """A command given `--json` prints its failure as a JSON object on stdout too."""
    for command in _commands(cli):
        if (
            command.callback is not None
            and "as_json" in inspect.signature(command.callback).parameters
        ):
            command.callback = json_aware(command.callback)


try:
    for _module in COMMAND_MODULES:
        importlib.import_module(f"trainer.commands.{_module}").register(app)
except KeyboardInterrupt:
    # Ctrl-C while the commands' modules load (the first second of any `ltr`): a traceback of
    # the import that was running (a held-out trial); answered as Ctrl-C anywhere else.
    sys.exit(130)
show_help_as_written(app)
report_failures_as_json(app)


PIPED_HELP_WIDTH = 120


def main(args: list[str] | None = None) -> None:
    """The console script. With `--json`, a command line that does not parse (an unknown
    option, `--keep abc`) prints its JSON failure on stdout too, beside typer's usage box."""
    args = sys.argv[1:] if args is None else args
    # SIGTERM (`timeout`, `docker stop`, `kill`) as an exception, so that what a command was
    # writing is cleaned up as after Ctrl-C (trainer.staged_dir; the version directories'
    # hidden temporaries): Python's default ended the process where it stood. `ltr serve`
    # sets its own.
    signal.signal(signal.SIGTERM, _terminated)
    width = rich_utils.MAX_WIDTH
    if width is None and not sys.stdout.isatty():
        # Piped or redirected, rich assumes 80 columns and cut long option names in `--help`
        # (`--combination-bucke…`): the names the docs tell users to pass. TERMINAL_WIDTH
        # still sets it. Restored after: a caller in the same process keeps its own.
        rich_utils.MAX_WIDTH = PIPED_HELP_WIDTH
    try:
        _run(args)
    except SystemError as exc:
        if not _interrupted(exc):
            raise
        # Ctrl-C inside compiled code (the native tree learner): numba hands the interrupt
        # back wrapped in a SystemError, which click does not take for one, and a 65-line
        # traceback was printed. Answered as Ctrl-C elsewhere.
        rich_utils.rich_abort_error()
        sys.exit(INTERRUPTED)
    finally:
        rich_utils.MAX_WIDTH = width


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _interrupted(exc: BaseException) -> bool:
    """Whether a KeyboardInterrupt is among `exc`'s causes."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


# Ctrl-C: the shell's 128 + SIGINT, as typer answers it. Inside compiled code it was 1, which
# `ltr nightly` documents as an unexpected crash (a held-out trial: train and nightly exited 1
# when interrupted in the tree learner, simulate 130).
INTERRUPTED = 130


def _run(args: list[str]) -> None:
    if "--json" not in args:
        app(args)  # typer answers a KeyboardInterrupt with exit 130
        return
    try:
        code = app(args, standalone_mode=False)  # returns exit codes instead of exiting
    except COMMAND_LINE_ERROR as exc:
        rich_utils.rich_format_error(exc)
        print_json_failure(exc.format_message(), exc.exit_code)
        sys.exit(exc.exit_code)
    except typer.Abort:
        rich_utils.rich_abort_error()
        sys.exit(INTERRUPTED)
    sys.exit(code if isinstance(code, int) else 0)


# Click's base of the errors it reports with a usage box: typer's public BadParameter derives
# from it, whether typer uses click or (typer 0.26 and later) its own copy of it.
COMMAND_LINE_ERROR: Any = next(
    base for base in typer.BadParameter.__mro__ if base.__name__ == "ClickException"
)
