"""Objects with far more keys than their model has fields, refused before pydantic sees them.

The body models forbid extra keys, and pydantic reports each unknown key as its own error: a
32 MB body of 3,000,000 unknown keys built 3,000,000 errors and a 269 MB 422 in 32 s, stalling
the worker. An object with more than its fields + KEY_SLACK keys is one 422 naming the count
and the accepted keys (a few misspelt keys are still named one by one by pydantic).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from app.api.request_matrix import Loc, RequestError
from app.api.schemas import ExplainOptions, QueryInfo, RerankEnvelope, UserInfo

KEY_SLACK = 8
# A profile's fields are the cluster scheme's, a few dozen at most; 100,000 keys held a worker
# until the budget answered over_budget (a trial) where other objects are refused at once.
MAX_PROFILE_FIELDS = 1024
# Query features are per-request signals (length, device, hour, locale): a handful. A map of
# 2,000,000 unknown ones built as many errors over 2.5-4 s of the event loop (a trial).
MAX_QUERY_FEATURES = 1024


def check_keys(obj: Any, accepted: Sequence[str], loc: Loc, set_apart: int = 0) -> None:
    """RequestError when `obj` is a dict of more than len(accepted) + KEY_SLACK keys, counting
    `set_apart` keys its reader took out of it."""
    if type(obj) is dict and len(obj) + set_apart > len(accepted) + KEY_SLACK:
        unknown = len(obj) - sum(1 for key in accepted if key in obj)
        raise RequestError(
            loc,
            f"{unknown:,} unknown keys; accepted: {', '.join(accepted)}",
            "too_many_keys",
        )


def fields(model: type[BaseModel]) -> tuple[str, ...]:
    return tuple(model.model_fields)


_ENVELOPE = ("candidates", *fields(RerankEnvelope))
_USER, _QUERY, _EXPLAIN = fields(UserInfo), fields(QueryInfo), fields(ExplainOptions)


def check_envelope(doc: dict[str, Any], had_candidates: bool = True) -> None:
    """The /rerank body's object, its `candidates` taken out (`had_candidates`: it had them),
    and its user, query and explain."""
    # Counted without the candidates, 17 keys were 16 errors where the limit is 16.
    check_keys(doc, _ENVELOPE, ("body",), int(had_candidates))
    user, query = doc.get("user"), doc.get("query")
    check_keys(user, _USER, ("body", "user"))
    _check_size(user, ("body", "user", "profile"), MAX_PROFILE_FIELDS, "profile fields")
    check_keys(query, _QUERY, ("body", "query"))
    _check_size(query, ("body", "query", "features"), MAX_QUERY_FEATURES, "query features")
    check_keys(doc.get("explain"), _EXPLAIN, ("body", "explain"))


def _check_size(outer: Any, loc: tuple[str, str, str], limit: int, what: str) -> None:
    """RequestError when the map at `loc` (in `outer`, the object at loc[:2]) has more than
    `limit` entries."""
    inner = outer.get(loc[2]) if type(outer) is dict else None
    if type(inner) is dict and len(inner) > limit:
        raise RequestError(loc, f"{len(inner):,} {what}; at most {limit:,}", "too_many_keys")


def check_feedback(doc: Any, request_fields: Sequence[str], event_fields: Sequence[str]) -> None:
    """The /feedback body's object and each of its events."""
    check_keys(doc, request_fields, ("body",))
    events = doc.get("events") if type(doc) is dict else None
    if type(events) is list:
        limit = len(event_fields) + KEY_SLACK
        for i, event in enumerate(events):
            if type(event) is dict and len(event) > limit:
                check_keys(event, event_fields, ("body", "events", i))
