"""The HTTP routes. `/rerank`: parse (body → matrix, request_matrix and assembly, with the
user vector from the resolver) → rank (the model's scorer, or the experiment's) → respond
(ranked JSON, explanations on request); everything else is a few lines."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from dataclasses import dataclass
from functools import partial
from pathlib import PurePath
from typing import Annotated, Any

import anyio.to_thread
import numpy as np
import orjson
from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from app import metrics
from app.api.admission import AdmissionDep, Slot
from app.api.answer import RankedResults, answer_json
from app.api.assembly import (
    Assembled,
    EarlyItems,
    abandon,
    assemble,
    discard_early,
    fetch_items_early,
    report_items,
    report_query,
)
from app.api.dependencies import (
    AdminDep,
    RegistryDep,
    ServicesDep,
    SettingsDep,
)
from app.api.errors import json_error
from app.api.exploration import EXPLORED, EXPLORED_ANSWERS, Exploration
from app.api.key_counts import check_envelope
from app.api.middleware import safe_request_id
from app.api.query_errors import envelope_and_model
from app.api.query_values import QUERY_NAMES
from app.api.retrieval_order import split_candidates
from app.api.schemas import (
    BODY_ERRORS,
    RERANK_EXAMPLE,
    Health,
    MessageResponse,
    ModelsResponse,
    ReloadResponse,
    RerankEnvelope,
    RerankResponse,
    ValidationErrorResponse,
)
from app.artifacts.manifest import NAME_PATTERN
from app.errors import LtrError
from app.experiments.score_both import SPARE_CORE, NativeBeside
from app.experiments.serving import (
    ExperimentRanking,
    Scored,
    candidate_inputs,
    explain_experiment,
    rank_in_experiment,
    served_experiment,
)
from app.features.item_store import ItemFeatureStore
from app.features.user_features import INFORMATIONAL, UserFeatureResolver, UserFeatures
from app.health import liveness, readiness
from app.impressions import log_impression
from app.registry import LoadedModel, ModelRegistry, sibling_reload
from app.scoring import beside
from app.scoring.cost import SCORING_COST
from app.scoring.cpu_headroom import HEADROOM
from app.settings import Settings
from app.thread_pools import thread_pool

router = APIRouter()
SCORES_NOT_FINITE = "scores_not_finite"
EARLY_ENVELOPE_MAX_BYTES = 64 * 1024  # the body without its candidates, walked on the loop

_ERRORS: dict[int | str, dict[str, Any]] = {
    **BODY_ERRORS,
    422: {"model": ValidationErrorResponse, "description": "Bad shape or values."},
    404: {"model": MessageResponse, "description": "Unknown `model`."},
    503: {
        "model": MessageResponse,
        "description": "No model loaded (yet); or overloaded, when LTR_OVERLOAD_RESPONSE=503 "
        "(with Retry-After).",
    },
}
_RERANK_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {"$ref": "#/components/schemas/RerankRequest"},
                "example": RERANK_EXAMPLE,
            }
        },
    }
}


def _json(content: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(content), status, headers, media_type="application/json")


@router.post(
    "/rerank",
    response_model=None,
    responses={200: {"model": RerankResponse}, **_ERRORS},
    openapi_extra=_RERANK_BODY,
    summary="Score and reorder candidates",
)
async def rerank(
    request: Request,
    services: ServicesDep,
    slot: AdmissionDep,
) -> Response:
    """Candidates come back sorted by score (highest first, ties in input order), cut to
    `top_k`. `features` is a list in the model's feature order (`GET /models`) or a name →
    value map; null or an absent name is a missing value. A request that cannot be scored
    within its latency budget comes back in its own order, `degraded` (docs/API.md)."""
    registry, resolver, settings = services.registry, services.resolver, services.settings
    parsed = await _parse(request, registry, resolver, settings, slot, services.item_store)
    body = await _rank(parsed, registry, resolver, settings, slot, services.exploration)
    rows, envelope = parsed.rows, parsed.envelope
    user = envelope.user
    log_impression(
        services.impressions,
        body,
        envelope.query_id,
        None if user is None else user.id,
        None if rows.user is None else rows.user.cluster,
        rows.ids,
        rows.features,
    )
    return await _respond(parsed, body, settings, services.limiter, slot)


@dataclass(frozen=True)
class ParsedRerank:
    """A /rerank request turned into what the model scores."""

    doc: dict[str, Any]  # the body's JSON object, without its candidates
    envelope: RerankEnvelope
    model: LoadedModel
    rows: Assembled  # candidate, query, item-store and user features in model column order
    request_id: str
    user_columns: int  # trailing columns of rows.features that are the user vector


async def _parse(
    request: Request,
    registry: ModelRegistry,
    resolver: UserFeatureResolver,
    settings: Settings,
    slot: Slot,
    item_store: ItemFeatureStore,
) -> ParsedRerank:
    started = time.perf_counter()
    raw = slot.body  # admitted within its latency budget (app.api.admission), else shed
    decoding = slot.decoding(raw)  # a large body's parse starts in its thread now
    early = None
    try:
        early = await _early_items(raw, slot, registry, settings, item_store)
        doc, candidates = await decoding
        _take_request_id(request, doc)
        # The model's query feature names, asked for only to name a bad value (error path).
        names = {QUERY_NAMES: partial(_query_names, registry, doc)} if "query" in doc else None
        # Before pydantic: one error, not one per unknown key.
        check_envelope(doc, candidates is not None)
        envelope, model, query_bad, bad = envelope_and_model(doc, names, registry)
        lookup = slot.lookup_time()
        args = (envelope, settings, resolver, item_store, lookup, early, query_bad, bad)
        rows = await assemble(model, doc, candidates, raw, *args)
    except BaseException:
        abandon(decoding)
        discard_early(early)
        raise
    metrics.DECODE_SECONDS.observe(time.perf_counter() - started)
    uc = model.manifest.user_clusters
    metrics.CANDIDATES.observe(rows.features.shape[0])
    return ParsedRerank(
        doc=doc,
        envelope=envelope,
        model=model,
        rows=rows,
        request_id=envelope.request_id or request.scope["state"]["request_id"],
        user_columns=uc.embedding_dim if uc is not None and uc.input == "features" else 0,
    )


def _take_request_id(request: Request, doc: object) -> None:
    """The body's `request_id`, when valid, as the one every answer to it carries, errors
    included (a 404 for an unknown model carried a generated id, which the client could not
    match to its request)."""
    given = doc.get("request_id") if isinstance(doc, dict) else None
    if type(given) is str and safe_request_id(given) is not None:
        request.scope["state"]["request_id"] = given


def _query_names(registry: ModelRegistry, doc: dict[str, Any]) -> list[str]:
    """The query feature names of the model `doc` names (LtrError for a model not served)."""
    name = doc.get("model")
    return registry.get(name if type(name) is str else None).manifest.names_from("query")


async def _early_items(
    raw: bytes,
    slot: Slot,
    registry: ModelRegistry,
    settings: Settings,
    item_store: ItemFeatureStore,
) -> EarlyItems | None:
    """For a body whose model takes item features: the item fetch, with the ids the shed
    path's byte walk finds (~0.1 ms for 1,000 candidates), before the parse is awaited: a
    Redis round trip is sent and its reply waits in the socket while the body is parsed (in
    its thread or on the loop); an in-process lookup is done here on the loop while the
    parse runs in its thread. None for an in-process lookup when the parse runs here (it is
    done in assembly), and whenever that walk is unsure; the parse then decides everything."""
    if item_store.redis is None and slot.parses_here(raw):
        return None
    # The walk costs every large request; only a served model that takes item features gains.
    if all(m.manifest.item_features is None for m in registry.models().values()):
        return None
    # A usual body's rest (model, user, query) is a few hundred bytes; one of megabytes (a
    # trial: 2,000,000 query features, 32 MB) decoded here took seconds of the event loop.
    split = split_candidates(raw, slot.marks, EARLY_ENVELOPE_MAX_BYTES)
    if split is None:
        return None
    doc, ids, tokens = split
    name = doc.get("model")
    try:
        model = registry.get(name if type(name) is str else None)
    except LtrError:  # the parse and validation report it
        return None
    return await fetch_items_early(model, ids, settings, item_store, slot.lookup_time(), tokens)


async def _rank(
    parsed: ParsedRerank,
    registry: ModelRegistry,
    resolver: UserFeatureResolver,
    settings: Settings,
    slot: Slot,
    exploration: Exploration | None = None,
) -> dict[str, Any]:
    """The ranked answer, with `_order` (input index of each result), `_explored` (the
    position swapped with the first, or None) and, in an experiment, `_experiment` (its log
    record) and `_trial` (its ranking): removed before it is sent. Answers in an experiment
    are not explored: interleaving already moves documents, and a swap would skew its credit."""
    doc, envelope, model, rows = parsed.doc, parsed.envelope, parsed.model, parsed.rows
    features, user_vector = rows.features, rows.user_vector
    score = ModelScoring(
        slot.inline_max_rows,
        settings.scoring_concurrency,
        settings.interleave_parallel_min_us / 1e6,
    )
    active = registry.experiment(model.name)
    trial = None
    if active is not None:  # the experiment hook (app.experiments.serving)
        trial = await slot.bounded(
            rank_in_experiment(
                active,
                model,
                getattr(envelope.user, "id", None),
                parsed.request_id,
                (features, user_vector),
                lambda m: candidate_inputs(
                    resolver, m, doc.get("user"), features, user_vector, parsed.user_columns
                ),
                score,
                envelope.top_k,
            )
        )
    if trial is None:
        scores = await slot.bounded(score(model, features, user_vector))
        body = _ranked(
            parsed.request_id, model, rows.ids, scores, envelope.top_k, rows.user, exploration
        )
    else:
        body = _ranked(
            parsed.request_id,
            trial.model,
            rows.ids,
            trial.scores,
            None,
            trial.answer_user(rows.user),  # the candidate's faults too, when it scored
            order=trial.order,
        )
        body["_experiment"] = trial.log
        body["_trial"] = trial
    if rows.items is not None:
        report_items(body, rows.items)
    report_query(body, rows.query_missing, model.name)
    return body


async def _respond(
    parsed: ParsedRerank,
    body: dict[str, Any],
    settings: Settings,
    limiter: anyio.CapacityLimiter,
    slot: Slot,
) -> Response:
    """The answer as JSON, with explanations when the request asked for them."""
    envelope, features, rows = parsed.envelope, parsed.rows.features, parsed.rows
    experiment = body.pop("_experiment", None)
    trial: ExperimentRanking | None = body.pop("_trial", None)
    body.pop("_explored", None)
    if envelope.explain:
        body["results"] = body["results"].dicts()
        extra = parsed.user_columns
        missing = np.isnan(features[:, : features.shape[1] - extra]).sum(axis=1).tolist()
        order = body.pop("_order")
        for item, i in zip(body["results"], order, strict=True):
            item["missing_features"] = missing[i]
        body["user_cluster"] = rows.user.cluster if rows.user else None
        top = 5 if envelope.explain is True else envelope.explain.top
        results = body["results"][: settings.explain_max_results]
        served = Scored(parsed.model, features, rows.user_vector)
        for scored, positions in _explained_by(served, trial, len(results)):
            picked = [order[p] for p in positions]
            error = await _explain(
                [results[p] for p in positions],
                scored.model,
                scored.features[picked],
                scored.user,
                top,
                settings,
                limiter,
                slot,
            )
            if error is not None:
                body["explanation_error"] = error
                break
        if experiment is not None:
            explain_experiment(body, experiment)
    else:
        del body["_order"]
    headers = {"x-request-id": parsed.request_id}
    return Response(answer_json(body), 200, headers, media_type="application/json")


@dataclass(frozen=True)
class ModelScoring:
    """A model's scores, float64 [n]; large requests in a worker thread so the event loop
    keeps answering (app.experiments.serving.Scoring)."""

    inline_max_rows: int
    threads: int  # at most this many requests scored in threads at once
    beside_min_seconds: float = 0.0

    def inline(self, rows: int) -> bool:
        return rows <= self.inline_max_rows

    def now(
        self,
        model: LoadedModel,
        features: np.ndarray,
        user: np.ndarray | None,
        learn: bool = False,
    ) -> np.ndarray:
        started = time.perf_counter()
        scores = model.scorer.score(features, user)
        elapsed = time.perf_counter() - started
        metrics.SCORING_SECONDS.labels(model.name).observe(elapsed)
        if learn:
            SCORING_COST.observe(model.scorer, features.shape[0], elapsed)
        return np.asarray(scores, dtype=np.float64)

    def prepare_beside(
        self, model: LoadedModel, features: np.ndarray, user: np.ndarray | None
    ) -> NativeBeside | None:
        worker = beside.ready()
        prepare = getattr(model.scorer, "prepare", None)
        if worker is None or prepare is None or user is not None:
            return None
        prepared = prepare(features)
        if prepared is None:
            return None
        scorer, rows, name = model.scorer, features.shape[0], model.name

        def observe(seconds: float) -> None:
            metrics.SCORING_SECONDS.labels(name).observe(seconds)
            SCORING_COST.observe(scorer, rows, seconds)

        return NativeBeside(worker, prepared, observe)

    def beside_pays(self, model: LoadedModel, rows: int) -> bool:
        expected = SCORING_COST.expected(model.scorer, rows)
        return expected >= self.beside_min_seconds and HEADROOM.spare_cores() >= SPARE_CORE

    async def __call__(
        self, model: LoadedModel, features: np.ndarray, user: np.ndarray | None
    ) -> np.ndarray:
        if self.inline(features.shape[0]):
            return self.now(model, features, user)
        # Handed over at once (anyio's to_thread would yield to a busy loop twice first, as
        # app.api.admission.parse_pool says); the pool's size bounds the threads scoring.
        pool = thread_pool("ltr-score-request", self.threads)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(pool, self.now, model, features, user)


def _explained_by(
    served: Scored, trial: ExperimentRanking | None, count: int
) -> list[tuple[Scored, list[int]]]:
    """The first `count` served results' positions, grouped by the version whose score each
    shows (in an experiment, the arm's or its team's), that version first seen first."""
    if trial is None:
        return [(served, list(range(count)))]
    groups: dict[int, tuple[Scored, list[int]]] = {}
    for position in range(count):
        scored = trial.scored_by(position)
        groups.setdefault(id(scored), (scored, []))[1].append(position)
    return list(groups.values())


async def _explain(
    results: list[dict[str, Any]],
    model: LoadedModel,
    rows: np.ndarray,
    user: np.ndarray | None,
    top: int,
    settings: Settings,
    limiter: anyio.CapacityLimiter,
    slot: Slot,
) -> str | None:
    """Adds `explanation` to `results` (rows: their features, float32 [len(results), k]) by
    `model`, in a worker thread and within what is left of the request's latency budget; past
    it, the error to answer with instead (the thread finishes on its own, warming the
    explainer)."""
    from app.explain.ranked import ExplainUnavailable, explain_rows

    scores = np.array([r["score"] for r in results], dtype=np.float64)
    work = asyncio.ensure_future(
        anyio.to_thread.run_sync(explain_rows, model, rows, user, top, scores, limiter=limiter)
    )
    if slot.controller.enabled:
        left = slot.budget.due - slot.controller.clock()
        done, _ = await asyncio.wait({work}, timeout=max(left, 0.0))
        if work not in done:
            work.add_done_callback(lambda task: task.cancelled() or task.exception())
            budget_ms = slot.budget.seconds * 1000
            return (
                f"explanations did not fit in the request's {budget_ms:g} ms latency budget; "
                "send a larger x-request-timeout-ms (the first explanation also loads the "
                "explainer)"
            )
    try:
        explanations = await work
    except ExplainUnavailable as exc:
        return str(exc)
    for item, explanation in zip(results, explanations, strict=True):
        item["explanation"] = explanation
    return None


def _ranked(
    request_id: str,
    model: LoadedModel,
    ids: list[Any],
    scores: np.ndarray,
    top_k: int | None,
    user: UserFeatures | None,
    exploration: Exploration | None = None,
    order: list[int] | None = None,
) -> dict[str, Any]:
    explored = None
    if order is None:
        # NaN (only a broken network could give it) sorts last; stable sort keeps input order.
        key = np.where(np.isnan(scores), -np.inf, scores)
        ranked = np.argsort(-key, kind="stable")[:top_k]
        if exploration is not None:
            explored = exploration.swap(ranked)
    else:
        ranked = np.asarray(order, dtype=np.int64)
    degraded = bool(user and user.degraded)
    reasons = list(user.reasons) if user else []
    if explored is not None:
        reasons.append(EXPLORED)
        EXPLORED_ANSWERS.labels(model.name).inc()
    if not np.isfinite(scores).all():
        # A network fed values far beyond its training data overflows (an infinity, or NaN):
        # its order is no ranking, and the answer says so rather than showing null scores.
        degraded = True
        reasons.append(SCORES_NOT_FINITE)
    if degraded:
        for reason in reasons:
            if reason not in INFORMATIONAL:
                metrics.DEGRADED.labels(reason).inc()
    return {
        "request_id": request_id,
        "model": {"name": model.name, "version": model.version},
        "results": RankedResults(ids, scores, ranked),
        "degraded": degraded,
        "reasons": reasons,
        "_order": ranked.tolist(),  # input index of each result; removed before sending
        "_explored": explored,  # the position swapped with the first; removed before sending
    }


@router.get("/livez", response_model=Health, summary="The process is up")
async def livez(request: Request, settings: SettingsDep) -> Response:
    status, body = liveness(request.app.state.admission.loop_lag, settings)
    return _json(body, status)


@router.get(
    "/readyz",
    response_model=Health,
    responses={
        503: {"model": Health, "description": "No model loaded and warmed yet, or shedding."}
    },
    summary="A model is loaded and warmed",
)
async def readyz(registry: RegistryDep, request: Request, settings: SettingsDep) -> Response:
    status, body = readiness(registry, request.app.state.admission, settings)
    return _json(body, status)


@router.get("/metrics", summary="Prometheus metrics (all workers)", response_class=Response)
async def prometheus_metrics() -> Response:
    body, content_type = metrics.exposition()
    return Response(body, media_type=content_type)


@router.get("/models", response_model=ModelsResponse, summary="The models serving now")
async def models(request: Request, registry: RegistryDep, settings: SettingsDep) -> Response:
    loaded = registry.models()
    default = settings.default_model or (next(iter(loaded)) if len(loaded) == 1 else None)
    store: ItemFeatureStore | None = getattr(request.app.state, "item_store", None)
    infos = [
        {
            "name": m.name,
            "version": m.version,
            "kind": m.manifest.kind,
            "created_at": m.manifest.created_at,
            "loaded_at": dt.datetime.fromtimestamp(m.loaded_at, dt.UTC),
            "default": m.name == default,
            "feature_names": m.manifest.candidate_feature_names,
            "query_features": m.manifest.names_from("query"),
            "item_features": m.manifest.names_from("item"),
            **_item_set(m, store),
            "user_clusters": m.manifest.user_clusters is not None,
            "metrics": _public_metrics(m.manifest.metrics),
            "experiment": served_experiment(registry, m.name),
        }
        for m in sorted(loaded.values(), key=lambda m: m.name)
    ]
    return _json({"models": infos, "errors": registry.errors()})


def _public_metrics(metrics: dict[str, Any]) -> dict[str, Any]:
    """The manifest's metrics with each data set's file names only: the full paths are the
    trainer machine's (an operations trial read them from /models, which needs no token), and
    stay in the manifest on disk."""
    return {
        key: {
            **entry,
            "dataset": "+".join(PurePath(p).name or p for p in entry["dataset"].split("+")),
        }
        if isinstance(entry, dict) and isinstance(entry.get("dataset"), str)
        else entry
        for key, entry in metrics.items()
    }


def _item_set(model: LoadedModel, store: ItemFeatureStore | None) -> dict[str, str | None]:
    """The item set a model reads, the version it was trained with, and the live one this
    worker last read from Redis (what it knows already: /models sends Redis nothing)."""
    items = model.manifest.item_features
    if items is None:
        return {"item_set": None, "item_set_version": None, "item_set_live_version": None}
    live = store.live_version(items.set) if store is not None else None
    return {"item_set": items.set, "item_set_version": items.version, "item_set_live_version": live}


@router.post(
    "/admin/reload",
    response_model=ReloadResponse,
    responses={
        401: {"model": MessageResponse},
        403: {"model": MessageResponse},
        404: {"model": MessageResponse, "description": "`model` is not in the registry."},
        503: {"model": MessageResponse, "description": "The registry cannot be read."},
    },
    dependencies=[AdminDep],
    summary="Re-read CURRENT now (retries refused versions)",
)
async def admin_reload(
    registry: RegistryDep,
    model: Annotated[str | None, Query(pattern=NAME_PATTERN)] = None,
) -> Response:
    unreadable = "the registry cannot be read (the service log says why)"
    try:
        report = await registry.reload(model, force=True)
    except OSError:  # logged with the path by the registry; the served versions stay
        return json_error(503, unreadable)
    missing = registry.registry_missing()
    if missing is not None:  # a script reading the status must not see success
        return json_error(503, f"{missing}; the served versions stay")
    if model is not None:
        # A name with no directory was a 200 with nothing loaded, failed or kept: a typo
        # looked like a reload of a model already up to date.
        try:
            absent = await anyio.to_thread.run_sync(_not_in_registry, registry, model)
        except OSError:
            return json_error(503, unreadable)
        if absent is not None:
            if model in registry.models():  # its directory went away while it serves
                absent += f"; {model}/{registry.models()[model].version} still serves"
            return json_error(404, absent)
    sibling_reload.announce(model)  # this worker's siblings reload within CHECK_SECONDS
    return _json(
        {
            "loaded": [{"name": n, "version": v} for n, v in report.loaded],
            "unchanged": [{"name": n, "version": v} for n, v in report.unchanged],
            "failed": [{"name": n, "version": v, "error": e} for n, v, e in report.failed],
        }
    )


def _not_in_registry(registry: ModelRegistry, name: str, most: int = 10) -> str | None:
    """Why `POST /admin/reload?model=name` reloads nothing: the registry has no directory
    `name` (with the models it has, up to `most`); None when it has one. OSError when the
    registry cannot be read (read in a worker thread: the registry may be on a network disk)."""
    import re

    from app.artifacts.store import list_models

    if (registry.root / name).is_dir():
        return None
    names = [n for n in list_models(registry.root) if re.fullmatch(NAME_PATTERN, n)]
    if not names:
        held = "it holds no model"
    elif len(names) <= most:
        held = f"it holds: {', '.join(names)}"
    else:
        held = f"it holds {len(names)} models ({', '.join(names[:most])}, ...)"
    return f"no model {name!r} in the registry; {held}"
