"""One clear line and a non-zero exit for every expected failure of a command."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

import typer

from app.errors import LtrError, error_text


class CommandError(LtrError):
    """An expected failure whose message is the whole story (file, line, what is wrong)."""


def fail(message: str, code: int = 2) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


@contextmanager
def clear_errors(*expected: type[BaseException]) -> Iterator[None]:
    """Turn expected exceptions into `error: <message>` on stderr and exit code 2: every
    LtrError (the project's own), what the operating system refuses (a missing file, a
    registry path that is a file, no permission, a full disk), and whatever else a command
    names."""
    catch: tuple[type[BaseException], ...] = (LtrError, OSError, *expected)
    try:
        yield
    except catch as exc:
        fail(_os_text(exc) if isinstance(exc, OSError) else error_text(exc))


def _os_text(exc: OSError) -> str:
    """`<path>: <what>` for an error about a path (a traceback's NotADirectoryError read
    "[Errno 20] Not a directory: '/srv/registry/m'"), else the error's own text."""
    if exc.filename is not None and exc.strerror:
        return f"{exc.filename}: {exc.strerror[:1].lower()}{exc.strerror[1:]}"
    return str(exc)


def echo_err(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
