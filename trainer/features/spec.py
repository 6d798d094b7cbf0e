"""The feature sources `ltr train` joins: from `--features-spec` (TOML or JSON) and the flags,
which override it. Every key is documented, with examples, in docs/FEATURES.md:

    query = ["query_length", "hour"]     # --query-features: columns of the data, one per query
    [item]
    table = "items.parquet"               # --items: relative to the spec file
    set = "catalog"                       # --item-set: the item feature set's name
    id_column = "doc_id"                  # --id-column: the data's document id column
    items_id_column = "item_id"           # --items-id-column: the table's (default id_column)

A spec is read strictly: an unknown key, a value of the wrong type or an `[item]` section with
no table is refused with the file, the section and the key, rather than trained without it.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.artifacts.manifest import NAME_PATTERN
from app.errors import LtrError

DEFAULT_SET = "items"
DEFAULT_ID_COLUMN = "doc_id"
EXAMPLE = '["hour", "device"]'
TOP_KEYS = ("query", "item")
ITEM_KEYS = ("table", "set", "id_column", "items_id_column")


class SpecError(LtrError, ValueError):
    """A features spec or flag combination that cannot be used (names the file or flag)."""


@dataclass(frozen=True)
class FeatureSpec:
    query: list[str]
    items: Path | None
    item_set: str
    id_column: str  # the data's document id column (recorded in the manifest's item set)
    items_id_column: str | None = None  # the item table's id column; None: id_column

    @property
    def table_id_column(self) -> str:
        return self.items_id_column or self.id_column


@dataclass(frozen=True)
class SpecValues:
    """What a spec file gives; None: not given (the flag or the default decides)."""

    query: list[str] | None = None
    table: Path | None = None
    item_set: str | None = None
    id_column: str | None = None
    items_id_column: str | None = None
    item_section: bool = False


def build_spec(
    spec_file: Path | None,
    query_features: str | None,
    items: Path | None,
    item_set: str | None,
    id_column: str | None,
    items_id_column: str | None = None,
) -> FeatureSpec | None:
    """The spec from the file and the flags (a flag wins); None when neither names a source."""
    given = read_spec(spec_file) if spec_file is not None else SpecValues()
    query = given.query or []
    if query_features is not None:
        query = _query_flag(query_features)
    table = items or given.table
    if given.item_section and table is None:
        raise SpecError(
            f"{spec_file}: [item] has no 'table' (the item table, Parquet, relative to the "
            "spec file; or give --items)"
        )
    set_name = item_set or given.item_set or DEFAULT_SET
    if not re.fullmatch(NAME_PATTERN, set_name):  # the spec's was checked as it was read
        raise SpecError(f"--item-set {set_name!r}: a set name must match {NAME_PATTERN}")
    for flag, value in (("--item-set", item_set), ("--items-id-column", items_id_column)):
        if value is not None and table is None:
            # Without a table the value would be recorded nowhere and used for nothing.
            raise SpecError(f"{flag} {value}: no item table to apply it to (give --items)")
    for flag, value in (("--id-column", id_column), ("--items-id-column", items_id_column)):
        if value is not None and not value:
            raise SpecError(f"{flag}: a column name cannot be empty")
    if not query and table is None:
        if spec_file is not None:
            raise SpecError(f"{spec_file}: names no query columns and no item table")
        return None
    column = id_column or given.id_column or DEFAULT_ID_COLUMN
    table_column = items_id_column or given.items_id_column
    return FeatureSpec(list(query), table, set_name, column, table_column)


def _query_flag(text: str) -> list[str]:
    """`--query-features`'s columns; blank is none, as the spec's `query = []` is. An empty
    entry (`hour,,qlen`, `hour,`) is refused as the spec's `""` is: a typo, not a column."""
    if not text.strip():
        return []
    query = [q.strip() for q in text.split(",")]
    if not all(query):
        raise SpecError(
            f"--query-features: a column name is empty in {text!r} (expected comma-separated "
            "column names like hour,device)"
        )
    _check_unique(query, "--query-features")
    return query


def read_spec(path: Path) -> SpecValues:
    """The values of a spec file, each checked: unknown keys and wrong types are refused."""
    doc = _parse(path)
    _check_keys(path, "", doc, TOP_KEYS)
    query = doc.get("query")
    if query is not None:
        if not isinstance(query, list) or not all(isinstance(q, str) and q for q in query):
            got = _shown(query)
            raise SpecError(
                f"{path}: query: expected a list of column names like {EXAMPLE}, got {got}"
            )
        _check_unique(query, f"{path}: query")
    if "item" not in doc:
        return SpecValues(query=query)
    item = doc["item"]
    if not isinstance(item, dict):
        raise SpecError(
            f"{path}: item: expected a section ([item] in TOML, an object in JSON) with "
            f"{', '.join(ITEM_KEYS)}, got {_shown(item)}"
        )
    _check_keys(path, "[item] ", item, ITEM_KEYS)
    text = {key: _text(path, key, item.get(key)) for key in ITEM_KEYS}
    if text["set"] is not None and not re.fullmatch(NAME_PATTERN, text["set"]):
        raise SpecError(f"{path}: [item] set: {text['set']!r} must match {NAME_PATTERN}")
    return SpecValues(
        query=query,
        # Relative to the spec file, so a spec works from any directory.
        table=None if text["table"] is None else Path(path).parent / text["table"],
        item_set=text["set"],
        id_column=text["id_column"],
        items_id_column=text["items_id_column"],
        item_section=True,
    )


def _parse(path: Path) -> dict[str, Any]:
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise SpecError(f"{path}: cannot read ({exc.strerror})") from None
    # `GOOD.JSON` was read as TOML, failing with "Invalid statement (at line 1, column 1)".
    as_json = Path(path).suffix.lower() == ".json"
    try:
        doc = json.loads(raw) if as_json else tomllib.loads(raw.decode("utf-8-sig"))
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        read_as = "JSON" if as_json else "TOML"
        raise SpecError(
            f"{path}: not a valid features spec, read as {read_as} (the file name chooses: "
            f"one ending in .json is read as JSON, any other as TOML): {exc}"
        ) from None
    if not isinstance(doc, dict):
        raise SpecError(f"{path}: expected a table of `query` and `[item]`")
    return doc


def _check_keys(path: Path, section: str, doc: dict[str, Any], expected: tuple[str, ...]) -> None:
    unknown = sorted(set(doc) - set(expected))
    if unknown:
        raise SpecError(
            f"{path}: {section}unknown key(s) {unknown} (expected {', '.join(expected)}; "
            "see docs/FEATURES.md)"
        )


def _text(path: Path, key: str, value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        what = "a file name" if key == "table" else "a name"
        raise SpecError(f"{path}: [item] {key}: expected {what} (text), got {_shown(value)}")
    return value


def _check_unique(names: list[str], where: str) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise SpecError(f"{where}: {name!r} is listed twice")
        seen.add(name)


def _shown(value: object) -> str:
    """A wrong value as the user wrote it, kept short (one error line)."""
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."
