"""The checks of a /rerank body's `query.features`, as one clean error per bad value.

pydantic validates `query.features` against its union (a name → number map or a list of
numbers) and, when both branches fail, reports both: a wrong value came back as two errors,
one under a `dict[str,nullable[float]]` loc and a second "Input should be a valid list". These
checks run first and report each bad value once, as the candidates' own checks do
(app.api.request_matrix): the value and the query feature it was given for.

The model's query feature names are known only once the envelope has named the model: the
caller may pass, as validation context under QUERY_NAMES, a function that gives them (called
only on an error), so a value of the list form is named too.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import compress, count
from typing import Any

from pydantic import ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

from app.api.request_matrix import MAX_ERRORS, not_a_number

QUERY_NAMES = "query_names"  # validation context: () -> the model's query feature names
NUMERIC = frozenset({float, int, type(None)})  # bool is not a number; null is missing
FEATURES_TYPE = (
    "must be an object of query feature name → number, or a list of numbers in the model's "
    "query feature order (`query_features` in GET /models)"
)


def checked_query_features(value: Any, context: Any) -> Any:
    """`value` when it is a name → number map or a list of numbers (null a missing value);
    `null` is no query features. Else a ValidationError naming each bad value (see
    `shown`), locs relative to `features`."""
    if value is None:
        return {}
    if type(value) is dict:
        values: Sequence[Any] = list(value.values())
    elif type(value) is list:
        values = value
    else:
        raise _error([((), PydanticCustomError("features_type", FEATURES_TYPE), value)])
    if set(map(type, values)) <= NUMERIC:
        return value
    keys: list[Any] = list(value) if type(value) is dict else []
    names = keys or _names(context)  # a map's values are named by their keys
    bad = bad_positions(values)
    named, more = shown(len(bad))
    found: list[tuple[tuple[str | int, ...], PydanticCustomError, Any]] = []
    for j in bad[:named]:
        msg = value_message(names[j] if j < len(names) else None, values[j])
        found.append(((keys[j] if keys else j,), _custom("float_type", msg), values[j]))
    if more:
        found.append(((), _custom("too_many_errors", more_message(more)), None))
    raise _error(found)


def bad_positions(values: Iterable[Any], known: Iterable[bool] | None = None) -> list[int]:
    """Where `values` has a value that is not a number or (`known` given) a name the model
    does not take. In C loops: Python's took a second over a 32 MB map of bad values."""
    good: Iterator[bool] = map(NUMERIC.__contains__, map(type, values))
    if known is not None:
        good = map(operator.and_, good, known)
    return list(compress(count(), map(operator.not_, good)))


def shown(errors: int) -> tuple[int, int]:
    """How many of `errors` found in `query.features` a 422 names one by one, and how many
    more one last error counts (0: none). Within the 422's own MAX_ERRORS, so that the count
    is said: a 32 MB map of bad values named a million of them."""
    if errors <= MAX_ERRORS:
        return errors, 0
    return MAX_ERRORS - 1, errors - (MAX_ERRORS - 1)


def more_message(more: int) -> str:
    return f"... and {more:,} more error{'s' if more > 1 else ''} in query.features"


def value_message(name: str | None, value: Any) -> str:
    """What is wrong with `value`, given for query feature `name` (None: not known)."""
    return ("" if name is None else f"query feature {name!r}: ") + not_a_number(value)


def _names(context: Any) -> Sequence[str]:
    """The model's query feature names, when the context can tell (else none)."""
    names_of: Callable[[], Sequence[str] | None] | None = (
        context.get(QUERY_NAMES) if isinstance(context, dict) else None
    )
    try:
        names = names_of() if names_of is not None else None
    except Exception:  # an unknown model, say: the model check reports that on its own
        return ()
    return names or ()


def _custom(type_: str, msg: str) -> PydanticCustomError:
    return PydanticCustomError(type_, "{msg}", {"msg": msg})


def _error(found: list[tuple[tuple[str | int, ...], PydanticCustomError, Any]]) -> Exception:
    details = [
        InitErrorDetails(type=problem, loc=loc, input=value) for loc, problem, value in found
    ]
    return ValidationError.from_exception_data("QueryInfo", details)
