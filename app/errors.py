"""The base of every failure the project raises on purpose, so one `except LtrError` (the CLI's)
catches all of them; each subclass also keeps the builtin type it was (ValueError, LookupError…),
so callers that catch those are unaffected."""


class LtrError(Exception):
    """An expected failure whose message says what is wrong and where (file, line, field)."""
