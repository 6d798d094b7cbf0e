"""A /rerank request's feature rows, assembled from the sources the manifest names.

`candidate` features come with each candidate (`request_matrix.build_matrix`), `query` features
once in `query.features` (one vector broadcast to every row), `item` features from the item
feature store by candidate id (`app.features.item_store`), and `user` features are the cluster
embedding (`app.features.user_features`). The result is one float32 matrix in the model's
column order: what is scored, what the impression log records, and so what `ltr dataset
--from-logs` trains on. The user lookup runs while the rest is built.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from app import metrics
from app.api.body_scan import ScannedCandidates, scanned_matrix
from app.api.candidate_errors import every_candidate_error
from app.api.query_errors import every_query_error, with_query_errors
from app.api.request_matrix import (
    CandidateMatrix,
    RequestError,
    RequestErrors,
    build_matrix,
    decode_body,
    token_budget,
)
from app.api.schemas import QueryInfo, RerankEnvelope
from app.artifacts.manifest import Manifest
from app.features.item_lookup import IdTokens
from app.features.item_store import NOT_DEGRADED, ItemFeatures, ItemFeatureStore
from app.features.redis_store import LookupTime
from app.features.user_features import UserFeatureResolver, UserFeatures
from app.registry import LoadedModel
from app.settings import Settings

Columns = slice | np.ndarray
# Loop turns the item fetch gets before the candidates' features are parsed: it reaches its
# Redis write on the third (the fetch's task, then the deadline's inner task, then the send),
# one to spare. 1,000 ids: 1.0-1.1 ms less per request than fetching after the parse.
SEND_TURNS = 4
_LAYOUTS_MAX = 64
QUERY_FEATURES_MISSING = "query_features_missing"  # some of the model's query features absent


@dataclass(frozen=True)
class FeatureLayout:
    """Which model columns each source fills."""

    width: int
    candidate: list[str]
    query: list[str]
    item: list[str]
    candidate_cols: Columns
    query_cols: Columns
    item_cols: Columns
    user_cols: Columns
    query_index: dict[str, int]
    sourced: bool  # some feature comes from the query or the item store
    # A candidate may be just its id: the item store has features for it, or the model takes
    # none from the candidate. With query features alone, a bare id scored every candidate
    # feature missing where a model without them answered 422.
    features_optional: bool


@dataclass(frozen=True)
class Assembled:
    ids: list[Any]
    features: np.ndarray  # float32 [n_candidates, n_model_features], NaN = missing
    user_vector: np.ndarray | None  # float32 [embedding_dim] for `onnx_input` models
    user: UserFeatures | None
    items: ItemFeatures | None
    # How many of the model's query features the request left out or sent as null; None for
    # a model without query features.
    query_missing: int | None = None


_layouts: dict[int, tuple[Manifest, FeatureLayout]] = {}


def layout_of(manifest: Manifest) -> FeatureLayout:
    """The manifest's layout, computed once per loaded manifest."""
    cached = _layouts.get(id(manifest))
    if cached is not None and cached[0] is manifest:
        return cached[1]
    sources = [manifest.source(name) for name in manifest.feature_names]

    def cols(source: str) -> Columns:
        return _columns([j for j, s in enumerate(sources) if s == source])

    query = manifest.names_from("query")
    layout = FeatureLayout(
        width=len(sources),
        candidate=manifest.candidate_feature_names,
        query=query,
        item=manifest.names_from("item"),
        candidate_cols=cols("candidate"),
        query_cols=cols("query"),
        item_cols=cols("item"),
        user_cols=cols("user"),
        query_index={name: j for j, name in enumerate(query)},
        sourced=manifest.has_sources,
        features_optional=bool(manifest.names_from("item")) or not manifest.candidate_feature_names,
    )
    if len(_layouts) >= _LAYOUTS_MAX:
        _layouts.pop(next(iter(_layouts)))
    _layouts[id(manifest)] = (manifest, layout)
    return layout


@dataclass(frozen=True)
class EarlyItems:
    """An item-store fetch already on its way for these candidate ids."""

    model: LoadedModel
    ids: list[Any]
    task: asyncio.Future[ItemFeatures]


async def fetch_items_early(
    model: LoadedModel,
    ids: list[Any] | None,
    settings: Settings,
    item_store: ItemFeatureStore,
    lookup: LookupTime | None,
    tokens: IdTokens | None = None,
) -> EarlyItems | None:
    """The item features of `ids` before their features are parsed: the Redis round trip is
    sent and its reply waits in the socket meanwhile; an in-process lookup is done now. None
    when the model takes no item features, or for a count the request will be refused for
    (422: the store is not asked for them)."""
    manifest = model.manifest
    if manifest.item_features is None or ids is None:
        return None
    if not settings.min_candidates <= len(ids) <= settings.max_candidates:
        return None
    names = layout_of(manifest).item
    snapshot = model.item_snapshot
    fetch = item_store.fetch(manifest.item_features, names, snapshot, ids, lookup, tokens)
    if item_store.redis is None:  # no await inside: done before the next line
        done: asyncio.Future[ItemFeatures] = asyncio.get_running_loop().create_future()
        done.set_result(await fetch)
        return EarlyItems(model, ids, done)
    task = asyncio.ensure_future(fetch)
    for _ in range(SEND_TURNS):
        if task.done():
            break
        await asyncio.sleep(0)
    return EarlyItems(model, ids, task)


async def assemble(
    model: LoadedModel,
    doc: dict[str, Any],
    candidates: object,
    raw: bytes,
    envelope: RerankEnvelope,
    settings: Settings,
    resolver: UserFeatureResolver,
    item_store: ItemFeatureStore,
    lookup: LookupTime | None = None,
    early: EarlyItems | None = None,
    query_bad: bool = False,
    envelope_errors: Sequence[RequestError] = (),
) -> Assembled:
    """The request's rows in model column order; RequestError (422) for bad content, query
    errors (`query_bad`: pydantic found some), the envelope's other errors and candidate
    errors together. Store lookups
    (Redis) stay within the request's budget (`lookup`); `early`: the item fetch, if the
    caller started it before the body was parsed (it is used when the parsed ids are the
    same)."""
    manifest = model.manifest
    layout = layout_of(manifest)
    uc = manifest.user_clusters
    user_task = (
        asyncio.ensure_future(resolver.resolve(manifest, doc.get("user"), lookup)) if uc else None
    )
    item_task = None
    early_ids = None
    if early is not None and early.model is model:
        item_task, early_ids = early.task, early.ids
    elif item_store.redis is not None:  # the round trip overlaps the candidates' parse
        discard_early(early)
        ids = _plain_ids(candidates)
        tokens = _id_tokens(candidates)
        started = await fetch_items_early(model, ids, settings, item_store, lookup, tokens)
        if started is not None:
            item_task, early_ids = started.task, started.ids
    else:  # in-process, on this thread: looked up once the candidates are known good
        discard_early(early)
    try:
        query, query_errors = _query_of(envelope, doc, layout, settings, query_bad)
        query_errors = [*envelope_errors, *query_errors]
        # Per request, not per candidate: a few query features.
        query_missing = int(np.isnan(query).sum()) if layout.query else None
        extra = 0 if layout.sourced else layout.width - len(layout.candidate)
        try:
            matrix = _candidate_matrix(candidates, raw, doc, layout, settings, extra)
        except RequestError as exc:
            raise with_query_errors(query_errors, _explained(exc, manifest)) from None
        if query_errors:
            raise with_query_errors(query_errors, None)
        items = None
        if layout.sourced:
            features = np.empty((len(matrix.ids), layout.width), dtype=np.float32)
            features[:, layout.candidate_cols] = matrix.features
            features[:, layout.query_cols] = query
            if manifest.item_features is not None:
                if item_task is not None and matrix.ids == early_ids:
                    items = await item_task
                else:
                    if item_task is not None:
                        item_task.add_done_callback(_discard)
                    items = await item_store.fetch(
                        manifest.item_features,
                        layout.item,
                        model.item_snapshot,
                        matrix.ids,
                        lookup,
                        _id_tokens(candidates),
                    )
                features[:, layout.item_cols] = items.matrix
        else:
            features = matrix.features
    except BaseException:
        if user_task is not None:
            user_task.cancel()
        if item_task is not None:
            # Left to finish (within its deadline): a Redis call cancelled mid-reply costs
            # its connection, and a client sending bad bodies must not churn connections.
            item_task.add_done_callback(_discard)
        raise
    user = await user_task if user_task is not None else None
    user_vector = None
    if user is not None and user.vector is not None:
        if uc is not None and uc.input == "features":
            features[:, layout.user_cols] = user.vector
        else:
            user_vector = user.vector
    return Assembled(matrix.ids, features, user_vector, user, items, query_missing)


def _candidate_matrix(
    candidates: object,
    raw: bytes,
    doc: dict[str, Any],
    layout: FeatureLayout,
    settings: Settings,
    extra: int,
) -> CandidateMatrix:
    """The candidates' own features (and `extra` NaN columns); RequestError if bad."""
    options: dict[str, Any] = {
        "min_candidates": settings.min_candidates,
        "max_candidates": settings.max_candidates,
        "extra_columns": extra,
        "features_optional": layout.features_optional,
        "ignore_unknown": settings.ignore_unknown_features,
    }
    if isinstance(candidates, ScannedCandidates):
        matrix = scanned_matrix(candidates, layout.candidate, **options)
        if matrix is not None:
            return matrix
        # Features the model does not take: the whole body decoded names the problem.
        candidates = decode_body(raw).get("candidates")
    try:
        return build_matrix(candidates, layout.candidate, budget=token_budget(raw, doc), **options)
    except RequestError as first:
        raise every_candidate_error(candidates, layout.candidate, first, options) from None


def _plain_ids(candidates: object) -> list[Any] | None:
    """The candidate ids when every candidate is an object with a string or integer id (what
    build_matrix takes), else None."""
    if isinstance(candidates, ScannedCandidates):
        return candidates.ids
    if type(candidates) is not list:
        return None
    try:
        ids = [c["id"] for c in candidates]
    except (TypeError, KeyError, IndexError):
        return None
    return ids if set(map(type, ids)) <= {str, int} else None


def _id_tokens(candidates: object) -> IdTokens | None:
    """The ids' bytes as the body scan copied them, for the compiled item lookup."""
    return candidates.id_tokens if isinstance(candidates, ScannedCandidates) else None


def discard_early(early: EarlyItems | None) -> None:
    """An early fetch nobody will use is left to finish within its deadline (a Redis call
    cancelled mid-reply costs its connection)."""
    if early is not None:
        early.task.add_done_callback(_discard)


def abandon(work: Awaitable[Any]) -> None:
    """Work nobody will await (a parse already under way, or not started): its outcome is
    dropped without a warning."""
    if asyncio.iscoroutine(work):
        work.close()
    elif asyncio.isfuture(work):
        work.add_done_callback(_discard)


def _discard(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: no "exception was never retrieved" warning


def query_vector(
    query: QueryInfo | None, layout: FeatureLayout, ignore_unknown: bool
) -> np.ndarray | None:
    """float32 [n_query_features] from `query.features`, NaN where not given; None when they
    have an error (every_query_error names them all)."""
    with np.errstate(over="ignore"):  # beyond float32's range is ±inf, still ordered
        return _query_vector(query, layout, ignore_unknown)


def _query_vector(
    query: QueryInfo | None, layout: FeatureLayout, ignore_unknown: bool
) -> np.ndarray | None:
    vector = np.full(len(layout.query), np.nan, dtype=np.float32)
    given = query.features if query is not None else {}
    if isinstance(given, list):
        if len(given) != len(layout.query):
            return None
        vector[:] = [np.nan if v is None else v for v in given]
        return vector
    for name, value in given.items():
        j = layout.query_index.get(name)
        if j is None:
            if ignore_unknown:
                continue
            return None
        vector[j] = np.nan if value is None else value
    return vector


def _query_of(
    envelope: RerankEnvelope,
    doc: dict[str, Any],
    layout: FeatureLayout,
    settings: Settings,
    bad: bool,
) -> tuple[np.ndarray, list[RequestError]]:
    """The query vector, or NaNs and every error of the body's `query.features` (`bad`: the
    envelope was validated without them, app.api.query_errors)."""
    ignore_unknown = settings.ignore_unknown_features
    vector = None if bad else query_vector(envelope.query, layout, ignore_unknown)
    if vector is not None:
        return vector, []
    features = (doc.get("query") or {}).get("features")
    errors = every_query_error(features, layout, ignore_unknown)
    return np.full(len(layout.query), np.nan, dtype=np.float32), errors


def _explained(exc: RequestError, manifest: Manifest) -> RequestError:
    """An unknown candidate feature that another source supplies gets a message saying so."""
    if isinstance(exc, RequestErrors):
        return RequestErrors([_explained(e, manifest) for e in exc.errors], exc.unchecked_after)
    if exc.type != "unknown_feature" or not exc.loc:
        return exc
    name = exc.loc[-1]
    if not isinstance(name, str) or name not in manifest.feature_names:
        return exc
    source = manifest.source(name)
    hint = {
        "query": "a query feature: send it once in `query.features`",
        "item": "an item feature: the service looks it up by candidate id",
        "user": "a user embedding column: the service fills it in from `user`",
    }.get(source)
    if hint is None:
        return exc
    return RequestError(exc.loc, f"{name!r} is {hint}, not sent per candidate", exc.type)


def _columns(indices: Sequence[int]) -> Columns:
    """A slice when the columns are contiguous (a cheaper assignment), else an index array."""
    if not indices:
        return slice(0, 0)
    if list(indices) == list(range(indices[0], indices[-1] + 1)):
        return slice(indices[0], indices[-1] + 1)
    return np.asarray(indices, dtype=np.int64)


def report_query(body: dict[str, Any], missing: int | None, model: str) -> None:
    """Add the query features' outcome to a response body: the count and, when some were
    missing, the reason (not `degraded`: the model's missing-value rule scored them, but a
    client that stopped sending them must be seen) and the model's counter."""
    if missing is None:
        return
    body["query_features_missing"] = missing
    if missing:
        body["reasons"].append(QUERY_FEATURES_MISSING)
        metrics.QUERY_FEATURES_MISSING.labels(model).inc()


def report_items(body: dict[str, Any], items: ItemFeatures) -> None:
    """Add the item store's outcome to a response body: the count, reasons, `degraded`."""
    body["item_features_missing"] = items.missing
    body["reasons"].extend(items.reasons)
    if items.degraded:
        body["degraded"] = True
        for reason in items.reasons:
            if reason not in NOT_DEGRADED:
                metrics.DEGRADED.labels(reason).inc()
