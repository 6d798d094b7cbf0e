"""Every error of a /rerank body's `query.features`, reported with the candidates' errors.

pydantic checks the envelope (the body but its candidates) before the model is known, and an
error there ended the request: one bad query value hid the other query errors and every
candidate error (a held-out trial). When `query.features` is all that is wrong with the
envelope, its errors wait: the envelope is taken without the query, and once the model is
known, its query features are checked whole, in body order, and then the candidates, for one
422 that names them all (query errors first, within the 422's MAX_ERRORS).
"""

from __future__ import annotations

from itertools import islice
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from app.api.errors import validation_detail
from app.api.query_values import (
    FEATURES_TYPE,
    bad_positions,
    more_message,
    shown,
    value_message,
)
from app.api.request_matrix import RequestError, RequestErrors
from app.api.schemas import RerankEnvelope
from app.errors import LtrError, counted
from app.registry import LoadedModel, ModelRegistry

if TYPE_CHECKING:
    from app.api.assembly import FeatureLayout

_QUERY_FEATURES = ("query", "features")
_WHERE = ("body", *_QUERY_FEATURES)


def envelope_and_model(
    doc: dict[str, Any], context: dict[str, Any] | None, registry: ModelRegistry
) -> tuple[RerankEnvelope, LoadedModel, bool, list[RequestError]]:
    """The body's envelope and model, whether its `query.features` are bad (their errors are
    `every_query_error`'s, once the model is known), and the envelope's other errors (a bad
    `top_k`, an unknown key): reported with the query's and the candidates' in one 422, the
    envelope checked without the keys that hold them. pydantic's ValidationError when the
    model itself is bad or not served, or when no model can check the rest."""
    try:
        envelope = RerankEnvelope.model_validate(doc, context=context)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_context=False, include_input=False)
        if any(not e["loc"] or e["loc"][0] == "model" for e in errors):
            raise
        query_bad = any(tuple(e["loc"][:2]) == _QUERY_FEATURES for e in errors)
        others = [e for e in errors if tuple(e["loc"][:2]) != _QUERY_FEATURES]
        rest = _without(doc, others)
        try:
            if query_bad:
                rest = {**rest, "query": None}
            envelope = RerankEnvelope.model_validate(rest, context=context)
            model = registry.get(envelope.model)
        except (ValidationError, LtrError):
            raise exc from None  # as before: a 422 for the values rather than a 404
        found = [
            RequestError(tuple(d["loc"]), d["msg"], d["type"])
            for d in validation_detail(others, ("body",))
        ]
        return envelope, model, query_bad, found
    return envelope, registry.get(envelope.model), False, []


def _without(doc: dict[str, Any], errors: list[Any]) -> dict[str, Any]:
    """`doc` without the top-level keys `errors` are about (for `query`, only its bad keys
    when it is an object: its features are checked on their own)."""
    rest = dict(doc)
    for error in errors:
        loc = error["loc"]
        query = rest.get("query")
        if loc[0] == "query" and len(loc) > 1 and type(query) is dict:
            rest["query"] = {k: v for k, v in query.items() if k != loc[1]}
        else:
            rest.pop(loc[0], None)
    return rest


def every_query_error(
    features: object, layout: FeatureLayout, ignore_unknown: bool
) -> list[RequestError]:
    """Each bad value or unknown name of `features` (a body's `query.features`, as sent) in
    body order; the first few, then one error counting the others."""
    if features is None:
        return []
    if type(features) is list:
        return _list_errors(features, layout.query)
    if type(features) is not dict:
        return [RequestError(_WHERE, FEATURES_TYPE, "features_type")]
    takes = set(layout.query)
    known = None if ignore_unknown else map(takes.__contains__, features)
    bad = bad_positions(features.values(), known)
    named, more = shown(len(bad))
    entries = list(islice(features.items(), bad[named - 1] + 1)) if bad else []
    found = []
    for name, value in (entries[j] for j in bad[:named]):
        if name not in takes and not ignore_unknown:
            msg = not_a_query_feature(name, layout)
            found.append(RequestError((*_WHERE, name), msg, "unknown_feature"))
        else:
            found.append(RequestError((*_WHERE, name), value_message(name, value), "float_type"))
    return _counting(found, more)


def not_a_query_feature(name: str, layout: FeatureLayout) -> str:
    if name in layout.candidate:
        return f"{name!r} is a candidate feature: send it in each candidate's `features`"
    if name in layout.item:
        return f"{name!r} is an item feature: the service looks it up by candidate id"
    if not layout.query:
        return f"unknown query feature {name!r}: this model takes no query features"
    return f"unknown query feature {name!r}"


def _list_errors(features: list[Any], query: list[str]) -> list[RequestError]:
    found = []
    if len(features) != len(query):
        shown_names = ", ".join(query[:5]) + (" ..." if len(query) > 5 else "")
        msg = (
            f"expected {counted(len(query), 'value')} in the model's query feature order "
            f"({shown_names}), got {len(features)}"
        )
        found.append(RequestError(_WHERE, msg, "feature_count"))
    bad = bad_positions(features)
    named, more = shown(len(found) + len(bad))
    for j in bad[: named - len(found)]:
        name = query[j] if j < len(query) else None
        found.append(RequestError((*_WHERE, j), value_message(name, features[j]), "float_type"))
    return _counting(found, more)


def _counting(found: list[RequestError], more: int) -> list[RequestError]:
    if more:
        found.append(RequestError(_WHERE, more_message(more), "too_many_errors"))
    return found


def with_query_errors(query: list[RequestError], candidates: RequestError | None) -> RequestError:
    """The query's errors, then the candidates' (if any), as one 422."""
    if candidates is None:
        return query[0] if len(query) == 1 else RequestErrors(query)
    if not query:
        return candidates
    if isinstance(candidates, RequestErrors):
        return RequestErrors([*query, *candidates.errors], candidates.unchecked_after)
    return RequestErrors([*query, candidates])
