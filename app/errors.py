"""The base of every failure the project raises on purpose, so one `except LtrError` (the CLI's)
catches all of them; each subclass also keeps the builtin type it was (ValueError, LookupError…),
so callers that catch those are unaffected."""


class LtrError(Exception):
    """An expected failure whose message says what is wrong and where (file, line, field)."""


def counted(n: int, noun: str) -> str:
    """`1 value`, `2 values`: a count with its noun in the right number, for messages."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def clipped(text: str, most: int) -> str:
    """`text`, cut to `most` characters with its full length said: for what a message echoes
    of a client's own text (a 30 MB feature name came back whole in a 422, twice)."""
    return text if len(text) <= most else f"{text[:most]}... ({len(text):,} characters)"


def error_text(exc: BaseException) -> str:
    """The exception's text; a pydantic validation error's problems on one line, without its
    model name, error-type tags and documentation links."""
    from pydantic import ValidationError  # here: importing this module stays free

    if not isinstance(exc, ValidationError):
        return str(exc)
    problems = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"])
        what = str(error["msg"]).removeprefix("Value error, ")
        problems.append(f"{where}: {what}" if where else what)
    return "; ".join(problems)
