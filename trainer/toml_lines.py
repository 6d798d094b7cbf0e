"""The line of a key in a TOML file, for errors about its value: tomllib reports lines for
syntax errors only, and pydantic knows a bad value's key path (`fields.0.edges.1`), not where
the file wrote it.

A line scan, not a parser: it follows `[table]` and `[[array of tables]]` headers (counting
the latter, so `fields.0` is the first `[[fields]]`), `key = value` lines (bare, quoted and
dotted keys; a dash reads as an underscore too, as the params files allow) and skips
multi-line strings. A path inside an inline table or array resolves to the key that holds it.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence

Path = tuple[str | int, ...]

_PART = r"""(?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|'[^']*')"""
_DOTTED = rf"{_PART}(?:\s*\.\s*{_PART})*"
_ARRAY_HEADER = re.compile(rf"\[\[\s*({_DOTTED})\s*\]\]\s*(?:#.*)?")
_TABLE_HEADER = re.compile(rf"\[\s*({_DOTTED})\s*\]\s*(?:#.*)?")
_KEY = re.compile(rf"({_DOTTED})\s*=(.*)")
_MULTILINE = ('"""', "'''")


def key_line(text: str, loc: Sequence[str | int]) -> int | None:
    """The 1-based line of the key or `[[header]]` at `loc`, or of the nearest enclosing
    one the text writes; None when it writes none of them."""
    lines = _key_lines(text)
    for end in range(len(loc), 0, -1):
        line = lines.get(tuple(loc[:end]))
        if line is not None:
            return line
    return None


def at_key(source: object, text: str | None, loc: Sequence[str | int]) -> str:
    """`file:line: a.0.b`, the start of an error about the value at `loc` (without `:line`
    when the text is unknown or does not write the key)."""
    line = None if text is None else key_line(text, loc)
    where = f"{source}:{line}" if line is not None else f"{source}"
    return f"{where}: {'.'.join(map(str, loc))}" if loc else where


def _key_lines(text: str) -> dict[Path, int]:
    found: dict[Path, int] = {}
    arrays: dict[Path, int] = {}  # resolved header path → how many [[...]] so far
    table: Path = ()
    closing: str | None = None  # the delimiter of the multi-line string being skipped
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if closing is not None:
            if closing in line:
                closing = None
            continue
        if match := _ARRAY_HEADER.fullmatch(line):
            parts = _parts(match.group(1))
            key = (*_resolve(parts[:-1], arrays), parts[-1])
            arrays[key] = arrays.get(key, 0) + 1
            table = (*key, arrays[key] - 1)
            _record(found, table, number)
        elif match := _TABLE_HEADER.fullmatch(line):
            table = _resolve(_parts(match.group(1)), arrays)
            _record(found, table, number)
        elif match := _KEY.match(line):
            _record(found, (*table, *_parts(match.group(1))), number)
            closing = next((d for d in _MULTILINE if match.group(2).count(d) % 2), None)
    return found


def _record(found: dict[Path, int], path: Path, number: int) -> None:
    """`path` and each path enclosing it (`[a.b]` also writes `a`) at `number`, unless
    written before; also with dashes read as underscores."""
    plain = tuple(p.replace("-", "_") if isinstance(p, str) else p for p in path)
    for end in range(1, len(path) + 1):
        found.setdefault(path[:end], number)
        found.setdefault(plain[:end], number)


def _resolve(parts: Sequence[str], arrays: dict[Path, int]) -> Path:
    """A header's path with the current index after each array of tables in it."""
    out: list[str | int] = []
    for part in parts:
        out.append(part)
        count = arrays.get(tuple(out))
        if count is not None:
            out.append(count - 1)
    return tuple(out)


def _parts(dotted: str) -> list[str]:
    return [_unquote(p) for p in re.findall(_PART, dotted)]


def _unquote(part: str) -> str:
    if part[:1] not in {'"', "'"}:
        return part
    try:
        return str(tomllib.loads(f"k = {part}")["k"])
    except tomllib.TOMLDecodeError:
        return part
