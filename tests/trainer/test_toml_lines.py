"""The line of a key path in TOML text, for errors about its value."""

from __future__ import annotations

import tomllib

import pytest

from trainer.toml_lines import at_key, key_line

TEXT = '''separator = "_"   # between tokens
# a comment = not a key
[[fields]]  # the first
name = "a"
doc = """
kind = "not a key"
"""
values = [
  "US",
  "GB",
]
[[fields]]
"na.me" = 'b'
edges = [1, 2]
inline = { x = 1 }

[other . "sub table"]
num-trees = 5
[[other.list]]
[[other.list]]
deep = true
'''


@pytest.mark.parametrize(
    ("loc", "line"),
    [
        (("separator",), 1),
        (("fields",), 3),
        (("fields", 0), 3),
        (("fields", 0, "kind"), 3),  # not written: its [[fields]] header
        (("fields", 0, "values", 1), 8),  # inside an array: the key holding it
        (("fields", 1), 12),
        (("fields", 1, "na.me"), 13),
        (("fields", 1, "edges", 1), 14),
        (("fields", 1, "inline", "x"), 15),
        (("other",), 17),
        (("other", "sub table", "num_trees"), 18),  # written with a dash
        (("other", "sub table", "num-trees"), 18),
        (("other", "list", 1, "deep"), 21),
        (("other", "list", 1), 20),
        (("nothing",), None),
        ((), None),
    ],
)
def test_key_line(loc: tuple[str | int, ...], line: int | None) -> None:
    tomllib.loads(TEXT)  # the text is valid TOML
    assert key_line(TEXT, loc) == line


def test_at_key() -> None:
    assert at_key("s.toml", TEXT, ("fields", 1, "edges", 1)) == "s.toml:14: fields.1.edges.1"
    assert at_key("s.toml", TEXT, ("nothing",)) == "s.toml: nothing"
    assert at_key("s.toml", None, ("fields", 0)) == "s.toml: fields.0"
    assert at_key("s.toml", TEXT, ()) == "s.toml"
