"""One clear line and a non-zero exit for every expected failure of a command."""

from __future__ import annotations

import contextvars
import functools
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

import orjson
import typer

from app.errors import LtrError, error_text


class CommandError(LtrError):
    """An expected failure whose message is the whole story (file, line, what is wrong)."""


def fail(message: str, code: int = 2) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    if _json_requested():
        # A script reading `--json` from stdout gets an object on failure too, not nothing.
        print_json_failure(message, code)
    raise typer.Exit(code)


def print_json_failure(message: str, code: int) -> None:
    typer.echo(orjson.dumps({"status": "error", "error": message, "exit_code": code}).decode())


_JSON_OUTPUT: contextvars.ContextVar[bool] = contextvars.ContextVar("ltr_json", default=False)


def _json_requested() -> bool:
    return _JSON_OUTPUT.get()


def json_aware(callback: Callable[..., Any]) -> Callable[..., Any]:
    """The command `callback`, noting for `fail` whether it was given `--json` (every command
    names that option `as_json`). The signature stays the callback's, which typer reads."""

    @functools.wraps(callback)
    def run(*args: Any, **kwargs: Any) -> Any:
        token = _JSON_OUTPUT.set(bool(kwargs.get("as_json")))
        try:
            return callback(*args, **kwargs)
        finally:
            _JSON_OUTPUT.reset(token)

    return run


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
        fail(os_error_text(exc) if isinstance(exc, OSError) else error_text(exc))


def os_error_text(exc: OSError) -> str:
    """`<path>: <what>` for an error about a path (a traceback's NotADirectoryError read
    "[Errno 20] Not a directory: '/srv/registry/m'"), else the error's own text."""
    if exc.filename is not None and exc.strerror:
        return f"{exc.filename}: {exc.strerror[:1].lower()}{exc.strerror[1:]}"
    return str(exc)


def echo_err(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
