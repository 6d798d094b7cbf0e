"""A /rerank body → candidate ids and a float32 feature matrix, in bulk.

The body is decoded once with orjson; feature values are never validated one by one in
Python. Per candidate there is a handful of dict/len operations; the values are converted with
one `np.asarray(..., dtype=float32)`. That conversion would quietly accept booleans and numeric
strings, so they are ruled out first: cheaply when `token_budget` shows the raw body has no
string or true/false literal left over for the feature values (counting quotes and literals is
a memchr-speed scan), else by collecting the values' types with `set(map(type, ...))`. Only
when a check fails is the offending value searched for, to name it in the error. Name → value
maps are grouped by their key order (clients usually send the same order for every candidate)
so each group is one bulk assignment. The usual request (every candidate exactly an id and a
list of the right length) is recognised with a few set(map(...)) passes and skips the
per-candidate loop; anything else takes the loop, which names the first problem.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain
from typing import Any

import numpy as np
import orjson

from app.errors import LtrError, clipped, counted

Loc = tuple[str | int, ...]
_NUMERIC = frozenset({float, int, type(None)})  # bool is not a number; null is missing
_CANDIDATE_KEYS = frozenset({"id", "features"})
# The types an id may have (bool is a subclass of int, not an int: refused).
ID_TYPES = frozenset({str, int})
# JSON parsers read an integer past 64 bits as a float: the id then fails this check.
ID_TYPE_MESSAGE = "must be a string or an integer of at most 64 bits (send larger ids as strings)"


class RequestError(LtrError, ValueError):
    """Bad request content, reported as HTTP 422 `{"detail": [{"loc", "msg", "type"}]}`."""

    def __init__(self, loc: Loc, msg: str, type_: str = "value_error") -> None:
        super().__init__(msg)
        self.loc = loc
        self.msg = msg
        self.type = type_

    def detail(self) -> list[dict[str, Any]]:
        return [
            {"loc": clipped_loc(self.loc), "msg": clipped(self.msg, MSG_MOST), "type": self.type}
        ]


# A 422 lists this many errors and then one saying how many more there were: a 10 MB body of
# unknown keys made a million entries, an 89 MB answer built in 5.5 s.
MAX_ERRORS = 20


class RequestErrors(RequestError):
    """Several errors, in body order (app.api.candidate_errors): the first MAX_ERRORS, then
    how many more."""

    def __init__(self, errors: list[RequestError], unchecked_after: int | None = None) -> None:
        first = errors[0]
        super().__init__(first.loc, first.msg, first.type)
        self.errors = errors
        # The search stopped with more errors than are shown: candidates from this index on
        # were not all checked, so how many more is not known.
        self.unchecked_after = unchecked_after

    def detail(self) -> list[dict[str, Any]]:
        detail = [d for e in self.errors[:MAX_ERRORS] for d in e.detail()]
        more = len(self.errors) - MAX_ERRORS
        if more > 0:
            msg = f"... and {more:,} more error{'s' if more > 1 else ''}"
            if self.unchecked_after is not None:
                msg = msg.replace("and", "and at least", 1)
                msg += f" (candidates from [{self.unchecked_after}] on not checked)"
            detail.append({"loc": ["body"], "msg": msg, "type": "too_many_errors"})
        return detail


# What a 422 echoes of the client's own text (a feature name, a key) is cut to this many
# characters: a 30 MB unknown name came back twice, a 60 MB answer built in seconds.
LOC_MOST, MSG_MOST = 256, 2048


def clipped_loc(loc: Loc) -> list[str | int]:
    return [clipped(part, LOC_MOST) if isinstance(part, str) else part for part in loc]


@dataclass(frozen=True)
class TokenBudget:
    """JSON strings and true/false literals of the raw body not accounted for by the envelope:
    what the candidates may hold. Feature values are numbers only when the candidates' own
    strings (keys, string ids, feature names) use up `strings` exactly and `bools` is 0."""

    strings: int
    bools: int


def token_budget(body: bytes, envelope: dict[str, Any]) -> TokenBudget | None:
    """The budget of `body` once `envelope` (the body without `candidates`) is paid for.

    None when the body has a backslash: an escaped quote is not a string delimiter.
    """
    if b"\\" in body:
        return None
    data = np.frombuffer(body, dtype=np.uint8)
    strings = _occurrences(data, b'"') // 2 - 1  # - 1: the "candidates" key
    bools = _occurrences(data, b"true") + _occurrences(data, b"false")
    stack: list[Any] = [envelope]
    while stack:  # iterative: the envelope may be nested deeply by a hostile client
        value = stack.pop()
        kind = type(value)
        if kind is dict:
            strings -= len(value)
            stack.extend(value.values())
        elif kind is list:
            stack.extend(value)
        elif kind is str:
            strings -= 1
        elif kind is bool:
            bools -= 1
    return TokenBudget(strings, bools)


def _occurrences(data: np.ndarray, word: bytes) -> int:
    """`bytes.count(word)` for a `word` that cannot overlap itself, over uint8 [n_bytes]:
    vectorised, a few times faster than bytes.count on a megabyte body."""
    starts = np.flatnonzero(data[: max(len(data) - len(word) + 1, 0)] == word[0])
    for j in range(1, len(word)):
        starts = starts[data[starts + j] == word[j]]
    return len(starts)


@dataclass(frozen=True)
class CandidateMatrix:
    ids: list[str | int]
    features: np.ndarray  # float32 [n_candidates, n_features + extra_columns], NaN = missing


def decode_body(body: bytes) -> dict[str, Any]:
    """The JSON object of a request body."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise RequestError(("body",), _json_error(body, exc), "json_invalid") from None
    if type(doc) is not dict:
        raise RequestError(("body",), "the body must be a JSON object", "object_type")
    return doc


def _json_error(body: bytes, exc: orjson.JSONDecodeError) -> str:
    """orjson's message, but for bytes that are not UTF-8 (orjson says "surrogates not
    allowed" at char 0, whatever the byte): where they are, and that the charset is UTF-8."""
    if "not valid UTF-8" not in str(exc):
        return f"invalid JSON: {exc}"
    try:
        body.decode()
    except UnicodeDecodeError as bad:
        return (
            f"invalid JSON: the body is not UTF-8 (byte {bad.start}: 0x{body[bad.start]:02x}); "
            "a JSON body is UTF-8 (RFC 8259), whatever charset its Content-Type names"
        )
    return f"invalid JSON: {exc}"


@lru_cache(maxsize=64)
def _column_index(names: tuple[str, ...]) -> dict[str, int]:
    return {name: i for i, name in enumerate(names)}


def not_a_list(candidates: object, where: Loc) -> RequestError:
    """The error for a `candidates` that is not a list, the same scored or shed (a trial:
    null was "field required" scored, "must be a list of candidates" shed)."""
    if candidates is None:
        return RequestError(where, "field required", "missing")
    return RequestError(where, "must be a list of candidates", "list_type")


def candidate_id(cand: Any, at: Loc) -> str | int:
    """The id of candidate `cand` (at `at`), or the error a scored request gets for it: the
    shed path answered a candidate without one "must be a string or an integer" where the
    scored path said "field required" (a trial)."""
    if type(cand) is not dict:
        raise RequestError(at, "must be an object with `id` and `features`")
    if "id" not in cand:
        raise RequestError((*at, "id"), "field required", "missing")
    cid = cand["id"]
    if type(cid) is not str and type(cid) is not int:
        raise RequestError((*at, "id"), ID_TYPE_MESSAGE, "id_type")
    return cid


def build_matrix(
    candidates: object,
    feature_names: Sequence[str],
    *,
    min_candidates: int = 1,
    max_candidates: int = 10_000,
    ignore_unknown: bool = False,
    extra_columns: int = 0,
    budget: TokenBudget | None = None,
    features_optional: bool = False,
    check_duplicates: bool = True,
) -> CandidateMatrix:
    """Validate `candidates` and lay their features out in `feature_names` order.

    `extra_columns` NaN columns are appended (for the user embedding the caller fills in).
    `budget` (from `token_budget`) lets the value type scan be skipped when it proves the
    values hold no strings or booleans; without it every value's type is checked.
    `features_optional`: a candidate may be just `{"id": ...}` (its features all missing),
    for models whose other features come from the query or the item store.
    `check_duplicates`: off only for app.api.candidate_errors, which checks ids across parts.
    """
    where: Loc = ("body", "candidates")
    if type(candidates) is not list:
        raise not_a_list(candidates, where)
    n = len(candidates)
    check_count(n, min_candidates, max_candidates, where)
    width = len(feature_names)
    plain = _plain_lists(candidates, width)
    if plain is not None:
        return _plain_matrix(*plain, where, budget, extra_columns, check_duplicates)
    if features_optional:
        bare_ids = _ids_only(candidates)
        if bare_ids is not None:
            if check_duplicates and len(set(bare_ids)) != n:
                duplicate_id(bare_ids, where)
            missing = np.full((n, width + extra_columns), np.nan, np.float32)
            return CandidateMatrix(bare_ids, missing)
    ids: list[Any] = []
    list_pos: list[int] = []
    list_rows: list[list[Any]] = []
    map_pos: list[int] = []
    map_rows: list[dict[str, Any]] = []
    strings = 0  # JSON strings the candidates hold outside their feature values
    for i, cand in enumerate(candidates):
        if type(cand) is not dict:
            raise RequestError((*where, i), "must be an object with `id` and `features`")
        bare = features_optional and len(cand) == 1 and "id" in cand
        if not bare and (len(cand) != 2 or cand.keys() != _CANDIDATE_KEYS):
            _bad_candidate_keys(cand, (*where, i), features_optional)
        cid = cand["id"]
        if type(cid) is not str and type(cid) is not int:
            raise RequestError((*where, i, "id"), ID_TYPE_MESSAGE, "id_type")
        ids.append(cid)
        strings += 3 if type(cid) is str else 2
        if bare:
            strings -= 1  # no `features` key
            continue
        feats = cand["features"]
        if feats is None and features_optional:
            continue
        if type(feats) is list:
            if len(feats) != width:
                raise RequestError(
                    (*where, i, "features"),
                    f"expected {counted(width, 'value')} in the model's feature order, "
                    f"got {len(feats)}",
                    "feature_count",
                )
            list_pos.append(i)
            list_rows.append(feats)
        elif type(feats) is dict:
            map_pos.append(i)
            map_rows.append(feats)
            strings += len(feats)
        else:
            raise RequestError(
                (*where, i, "features"),
                "must be a list of numbers or an object of feature name → number",
                "features_type",
            )
    if check_duplicates and len(set(ids)) != n:
        duplicate_id(ids, where)

    numbers = budget is not None and budget.bools == 0 and budget.strings == strings
    total = width + extra_columns
    if not map_rows and not extra_columns and len(list_pos) == n:
        matrix = _to_float32(list_rows, list_pos, where, numbers)
        return CandidateMatrix(ids, matrix)
    matrix = np.full((n, total), np.nan, dtype=np.float32)
    if list_rows:
        values = _to_float32(list_rows, list_pos, where, numbers)
        if len(list_pos) == n:
            matrix[:, :width] = values
        else:
            matrix[np.asarray(list_pos), :width] = values
    if map_rows:
        index = _column_index(tuple(feature_names))
        _fill_from_maps(matrix, map_rows, map_pos, index, ignore_unknown, where, numbers)
    return CandidateMatrix(ids, matrix)


def check_count(n: int, min_candidates: int, max_candidates: int, where: Loc) -> None:
    if n < min_candidates or n == 0:
        needed = max(min_candidates, 1)
        raise RequestError(where, f"at least {counted(needed, 'candidate')} needed", "too_short")
    if n > max_candidates:
        raise RequestError(where, f"{n} candidates; at most {max_candidates} allowed", "too_long")


def _plain_lists(candidates: list[Any], width: int) -> tuple[list[Any], list[Any], int] | None:
    """(ids, feature lists, JSON strings outside the values) when every candidate is exactly
    `{"id": str | int, "features": [width values]}`, the usual request: checked with a few
    C-speed passes instead of a Python loop. None sends the request down the per-candidate
    path, which also finds and names the first problem."""
    if set(map(type, candidates)) != {dict} or set(map(len, candidates)) != {2}:
        return None
    try:  # two keys, both present: exactly `id` and `features`
        ids = [c["id"] for c in candidates]
        rows = [c["features"] for c in candidates]
    except KeyError:
        return None
    id_types = set(map(type, ids))
    if not id_types <= ID_TYPES or set(map(type, rows)) != {list}:
        return None
    if set(map(len, rows)) != {width}:
        return None
    if str not in id_types:
        n_str = 0
    elif int not in id_types:
        n_str = len(ids)
    else:
        n_str = sum(type(cid) is str for cid in ids)
    return ids, rows, 2 * len(ids) + n_str  # two keys each, plus the id when a string


def _ids_only(candidates: list[Any]) -> list[Any] | None:
    """The ids when every candidate is exactly `{"id": str | int}`, else None."""
    if set(map(type, candidates)) != {dict} or set(map(len, candidates)) != {1}:
        return None
    try:
        ids = [c["id"] for c in candidates]
    except KeyError:
        return None
    return ids if set(map(type, ids)) <= ID_TYPES else None


def _plain_matrix(
    ids: list[Any],
    rows: list[list[Any]],
    strings: int,
    where: Loc,
    budget: TokenBudget | None,
    extra_columns: int,
    check_duplicates: bool = True,
) -> CandidateMatrix:
    """The matrix of `_plain_lists`'s output, with `extra_columns` NaN columns appended."""
    n = len(ids)
    if check_duplicates and len(set(ids)) != n:
        duplicate_id(ids, where)
    numbers = budget is not None and budget.bools == 0 and budget.strings == strings
    return with_extra_columns(ids, _to_float32(rows, range(n), where, numbers), extra_columns)


def with_extra_columns(ids: list[Any], values: np.ndarray, extra_columns: int) -> CandidateMatrix:
    """`values` (float32 [n, width]) with `extra_columns` NaN columns appended."""
    if not extra_columns:
        return CandidateMatrix(ids, values)
    width = values.shape[1]
    matrix = np.empty((len(ids), width + extra_columns), dtype=np.float32)
    matrix[:, :width] = values
    matrix[:, width:] = np.nan
    return CandidateMatrix(ids, matrix)


def _flat_float32(rows: list[list[Any]]) -> np.ndarray | None:
    """float32 [len(rows), width] of equally long rows of numbers and nulls (NaN), in one pass
    over the values (np.fromiter: about 40 % less than np.asarray of the nested lists); None
    when the rows differ in length (the caller then reports the ragged row)."""
    width = len(rows[0]) if rows else 0
    if any(len(row) != width for row in rows):
        return None
    flat = np.fromiter(chain.from_iterable(rows), np.float32, len(rows) * width)
    return flat.reshape(len(rows), width)


def _to_float32(
    rows: list[list[Any]],
    positions: Sequence[int],
    where: Loc,
    numbers: bool,
    keys: Sequence[str] | None = None,
) -> np.ndarray:
    """float32 [len(rows), row length]; RequestError naming the first non-number.

    `numbers`: the token budget proved there are no strings or booleans among the values.
    `keys`: the feature names of the row entries, when the rows came from name → value maps.
    """
    if not numbers and not set(map(type, chain.from_iterable(rows))) <= _NUMERIC:
        _first_non_number(rows, positions, where, keys)
    try:
        with np.errstate(over="ignore"):  # beyond float32's range is ±inf, still ordered
            out = _flat_float32(rows) if numbers else np.asarray(rows, dtype=np.float32)
    except (TypeError, ValueError):  # a nested list or object, which the budget cannot see
        out = None
    if out is None or out.ndim != 2:
        _first_non_number(rows, positions, where, keys)
        raise RequestError(where, "feature values must be numbers or null", "float_type")
    return out


def _fill_from_maps(
    matrix: np.ndarray,
    rows: list[dict[str, Any]],
    positions: list[int],
    index: dict[str, int],
    ignore_unknown: bool,
    where: Loc,
    numbers: bool,
) -> None:
    groups: dict[tuple[str, ...], list[int]] = {}
    last_keys: list[str] | None = None
    last_group: list[int] = []
    for k, row in enumerate(rows):
        row_keys = list(row)
        if row_keys != last_keys:  # usually every row has the same key order: one group
            last_keys = row_keys
            last_group = groups.setdefault(tuple(row_keys), [])
        last_group.append(k)
    for keys, members in groups.items():
        cols: list[int] = [index.get(name, -1) for name in keys]
        keep = None
        if -1 in cols:
            unknown = [name for name, c in zip(keys, cols, strict=True) if c < 0]
            if not ignore_unknown:
                pos = positions[members[0]]
                shown = ", ".join(repr(u) for u in unknown[:5])
                raise RequestError(
                    (*where, pos, "features", unknown[0]),
                    f"unknown feature {'name' if len(unknown) == 1 else 'names'} {shown}"
                    f"{' ...' if len(unknown) > 5 else ''}",
                    "unknown_feature",
                )
            keep = [j for j, c in enumerate(cols) if c >= 0]
            cols = [cols[j] for j in keep]
        if not cols:
            continue
        values = _to_float32(
            [list(rows[k].values()) for k in members],
            [positions[k] for k in members],
            where,
            numbers,
            keys,
        )
        if keep is not None:
            values = values[:, keep]
        row_idx = np.asarray([positions[k] for k in members])
        if len(members) == matrix.shape[0]:
            matrix[:, cols] = values
        else:
            matrix[np.ix_(row_idx, np.asarray(cols))] = values


def _bad_candidate_keys(cand: dict[str, Any], loc: Loc, features_optional: bool = False) -> None:
    for key in ("id",) if features_optional else ("id", "features"):
        if key not in cand:
            raise RequestError((*loc, key), "field required", "missing")
    extra = sorted(str(k) for k in cand.keys() - _CANDIDATE_KEYS)
    raise RequestError((*loc, extra[0]), "unknown field (a candidate has `id` and `features`)")


def duplicate_id(ids: list[Any], where: Loc) -> None:
    first: dict[Any, int] = {}
    for i, cid in enumerate(ids):
        if cid in first:
            raise RequestError(
                (*where, i, "id"),
                f"duplicate id {cid!r} (also candidates[{first[cid]}])",
                "duplicate_id",
            )
        first[cid] = i


def _first_non_number(
    rows: list[list[Any]], positions: Sequence[int], where: Loc, keys: Sequence[str] | None
) -> None:
    for row, pos in zip(rows, positions, strict=True):
        for j, value in enumerate(row):
            if type(value) not in _NUMERIC:
                raise RequestError(
                    (*where, pos, "features", j if keys is None else keys[j]),
                    not_a_number(value),
                    "float_type",
                )


def not_a_number(value: object) -> str:
    return f"not a number: {describe_value(value)} (use null for a missing value)"


def describe_value(value: object) -> str:
    """A short, safe rendering of a JSON value (deeply nested input must not recurse)."""
    if type(value) is bool:
        return "true" if value else "false"
    if type(value) is str:
        return repr(value[:40]) + ("..." if len(value) > 40 else "")
    if type(value) is list:
        return "a list"
    if type(value) is dict:
        return "an object"
    return type(value).__name__
