"""The checks of a /rerank body's `query.features`, as one clean error each.

pydantic validates `query.features` against its union (a name → number map or a list of
numbers) and, when both branches fail, reports both: a wrong value came back as two errors,
one under a `dict[str,nullable[float]]` loc and a second "Input should be a valid list". These
checks run first and report the first problem once, as the candidates' own checks do
(app.api.request_matrix): the value and the query feature it was given for.

The model's query feature names are known only once the envelope has named the model: the
caller may pass, as validation context under QUERY_NAMES, a function that gives them (called
only on an error), so a value of the list form is named too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pydantic import ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

from app.api.request_matrix import not_a_number

QUERY_NAMES = "query_names"  # validation context: () -> the model's query feature names
_NUMERIC = frozenset({float, int, type(None)})  # bool is not a number; null is missing
FEATURES_TYPE = (
    "must be an object of query feature name → number, or a list of numbers in the model's "
    "query feature order (`query_features` in GET /models)"
)


def checked_query_features(value: Any, context: Any) -> Any:
    """`value` when it is a name → number map or a list of numbers (null a missing value);
    `null` is no query features. Else a ValidationError with one error, its loc relative to
    `features`."""
    if value is None:
        return {}
    if type(value) is dict:
        values: Sequence[Any] = list(value.values())
    elif type(value) is list:
        values = value
    else:
        raise _error((), PydanticCustomError("features_type", FEATURES_TYPE), value)
    if set(map(type, values)) <= _NUMERIC:
        return value
    j = next(j for j, v in enumerate(values) if type(v) not in _NUMERIC)
    bad = values[j]
    loc: tuple[str | int, ...]
    if type(value) is dict:
        name: str | None = list(value)[j]
        loc = (list(value)[j],)
    else:
        name, loc = _name_at(j, context), (j,)
    prefix = "" if name is None else f"query feature {name!r}: "
    problem = PydanticCustomError("float_type", "{msg}", {"msg": prefix + not_a_number(bad)})
    raise _error(loc, problem, bad)


def _name_at(j: int, context: Any) -> str | None:
    """The name of the model's query feature `j`, when the context can tell."""
    names_of: Callable[[], Sequence[str] | None] | None = (
        context.get(QUERY_NAMES) if isinstance(context, dict) else None
    )
    try:
        names = names_of() if names_of is not None else None
    except Exception:  # an unknown model, say: the model check reports that on its own
        return None
    return names[j] if names is not None and j < len(names) else None


def _error(loc: tuple[str | int, ...], problem: PydanticCustomError, value: Any) -> Exception:
    details = [InitErrorDetails(type=problem, loc=loc, input=value)]
    return ValidationError.from_exception_data("QueryInfo", details)
