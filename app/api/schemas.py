"""Request and response shapes of the HTTP API, with the examples the OpenAPI docs show.

`RerankRequest` documents the whole `/rerank` body; the service validates only the envelope
with pydantic (`RerankEnvelope`, everything but `candidates`) and turns the candidates into a
float32 matrix in bulk (`app.api.request_matrix`). Responses are serialised with orjson
straight from dicts; the response models here document them.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_core import PydanticCustomError

from app.api.query_values import checked_query_features
from app.api.request_matrix import LOC_MOST
from app.artifacts.manifest import NAME_PATTERN
from app.errors import clipped

_PROFILE_TYPES = frozenset({str, int, float, bool, type(None)})


def _profile_value(value: Any) -> Any:
    """One error for a value of none of the union's types, not one per type (874 bytes of
    "should be a valid string / integer / number / boolean" for one nested object)."""
    if type(value) not in _PROFILE_TYPES:
        raise PydanticCustomError(
            "profile_value_type", "must be a string, a number, a boolean or null"
        )
    return value


ProfileValue = Annotated[str | int | float | bool | None, BeforeValidator(_profile_value)]
_PROFILE_BAD_MOST = 4  # a few bad values are named by pydantic, one by one
REQUEST_ID_PATTERN = r"^[A-Za-z0-9._:-]+$"

_ID_ONLY_EXAMPLE: dict[str, Any] = {
    "query": {"features": {"query_length": 3, "hour": 14}},
    "candidates": [{"id": "d1", "features": {"bm25": 12.1}}, {"id": "d2"}],
}
# Works as written against the demo model (`make run`, `docker compose up`: features f1..f300
# of the bundled data) and comes back reordered; tests/integration/test_examples.py checks it.
RERANK_EXAMPLE: dict[str, Any] = {
    "request_id": "3f2a9c",
    "query_id": "q-1842",
    "candidates": [
        {"id": "doc-1", "features": {"f69": 0.9, "f100": 0.1, "f212": 0.2, "f242": 0.6}},
        {"id": "doc-2", "features": {"f69": 0.5, "f100": 0.5, "f212": 0.5, "f247": 0.8}},
        {
            "id": "doc-3",
            "features": {"f69": 0.1, "f100": 0.95, "f111": 0.95, "f98": 0.95, "f212": 0.75},
        },
    ],
    "top_k": 10,
    "explain": False,
}


class UserInfo(BaseModel):
    """Who the results are for: an id (Redis may map it to a cluster) and profile fields."""

    model_config = ConfigDict(strict=True, extra="forbid")

    id: str | None = Field(None, max_length=256)
    profile: dict[str, ProfileValue] = Field(default_factory=dict)

    @field_validator("profile", mode="before")
    @classmethod
    def _few_errors(cls, value: Any) -> Any:
        # pydantic reports a bad value once per type of the union: a million of them were
        # four million errors. Many bad values are one error; a few are pydantic's own.
        if type(value) is dict:
            bad = [key for key, v in value.items() if type(v) not in _PROFILE_TYPES]
            if len(bad) > _PROFILE_BAD_MOST:
                raise PydanticCustomError(
                    "too_many_errors",
                    "{count} profile values are not a string, number, boolean or null "
                    "(the first: {first})",
                    {"count": f"{len(bad):,}", "first": clipped(bad[0], LOC_MOST)},
                )
        return value


class QueryInfo(BaseModel):
    """Query-level features, sent once and shared by every candidate (source `query` in the
    model's manifest): a name → value map, or a list in the model's query feature order
    (`GET /models`). null or an absent name is a missing value."""

    model_config = ConfigDict(strict=True, extra="forbid")

    features: dict[str, float | None] | list[float | None] = Field(default_factory=dict)

    @field_validator("features", mode="before")
    @classmethod
    def _one_error(cls, value: Any, info: ValidationInfo) -> Any:
        # One error naming the query feature, not one per branch of the union.
        return checked_query_features(value, info.context)


class ExplainOptions(BaseModel):
    """`explain` as an object: how many features to show per result."""

    model_config = ConfigDict(strict=True, extra="forbid")

    top: int = Field(5, ge=1, le=1000, description="Features per result, largest |contribution|.")


def _explain_json_schema(schema: dict[str, Any]) -> None:
    """`explain`'s documented types: null too, which the service takes for false (the schema
    only: validation, on the request's path, is _explain_shape's)."""
    schema["anyOf"] = [*schema["anyOf"], {"type": "null"}]


def _explain_shape(value: Any) -> Any:
    """One clear error for an `explain` that is neither a boolean nor an object; null is
    false, as null is "not given" for the body's other optional fields."""
    if value is None:
        return False
    if not isinstance(value, bool | dict | ExplainOptions):
        raise PydanticCustomError(
            "bool_type", 'Input should be a valid boolean or an object like {"top": 5}'
        )
    if type(value) is dict:
        # Validated here: the union reported an object's bad `top` twice, once as "not a
        # valid boolean" (the other branch).
        try:
            return ExplainOptions.model_validate(value, strict=True)
        except ValidationError as exc:
            first = exc.errors(include_url=False, include_context=False, include_input=False)[0]
            where = ".".join(str(part) for part in first["loc"])
            raise PydanticCustomError(
                first["type"], "{where}: {msg}", {"where": where, "msg": first["msg"]}
            ) from None
    return value


class RerankEnvelope(BaseModel):
    """Everything of a /rerank body except `candidates` (validated in bulk elsewhere)."""

    model_config = ConfigDict(strict=True, extra="forbid")

    request_id: str | None = Field(
        None,
        min_length=1,
        max_length=128,
        pattern=REQUEST_ID_PATTERN,
        description="Letters, digits and `._:-` (it is echoed in the `x-request-id` header).",
    )
    query_id: str | int | None = None
    model: str | None = Field(None, pattern=NAME_PATTERN)
    user: UserInfo | None = None
    query: QueryInfo | None = None
    top_k: int | None = Field(None, ge=1)
    explain: Annotated[bool | ExplainOptions, BeforeValidator(_explain_shape)] = Field(
        False,
        description='true or {"top": n}: per-feature contributions for each returned result '
        "(docs/API.md, Explanations); null is false.",
        json_schema_extra=_explain_json_schema,
    )


class Candidate(BaseModel):
    """One document: its id and its features, as a list in the model's candidate feature order
    or as a name → value map (names not given are missing). null is a missing value.

    `features` may be left out when the model takes item features from the item feature store
    (looked up by `id`), or none from the candidate; query and item features are never sent
    per candidate."""

    id: str | int = Field(examples=["doc-3"])
    features: list[float | None] | dict[str, float | None] | None = Field(
        None, examples=[{"f69": 0.1, "f100": 0.95, "f212": 0.75}]
    )


class RerankRequest(RerankEnvelope):
    """The /rerank body (documentation; see RerankEnvelope and request_matrix for checks)."""

    model_config = ConfigDict(json_schema_extra={"examples": [RERANK_EXAMPLE]})

    # min_length documents what request_matrix checks (an empty list is a 422 whatever
    # LTR_MIN_CANDIDATES says); this model validates nothing.
    candidates: list[Candidate] = Field(
        min_length=1,
        description="At least LTR_MIN_CANDIDATES (and 1) and at most LTR_MAX_CANDIDATES; "
        "unique ids.",
    )


class ModelRef(BaseModel):
    name: str
    version: str


class FeatureContribution(BaseModel):
    # Documentation of what app.explain.ranked sends (nothing is validated with it). Before,
    # `value` and `contribution` were plain numbers, which an infinite value (1e300 sent,
    # beyond float32) contradicted.
    name: str
    value: float | Literal["Infinity", "-Infinity"] | None = Field(
        description="The value used, as float32: sent, looked up, or null (missing); "
        '"Infinity" or "-Infinity" for a value beyond float32\'s range (JSON has no infinities).'
    )
    contribution: float | None = Field(
        description="null when it is not finite (a network's output overflowed on a huge value)."
    )


class Explanation(BaseModel):
    method: str = Field(description="treeshap (exact Shapley values) or occlusion (networks).")
    expected_value: float = Field(description="The model's average score (the baseline).")
    features: list[FeatureContribution] = Field(description="Largest |contribution| first.")
    rest: float | None = Field(
        description="score - expected_value - the shown contributions (the features not "
        "shown); null when that is not finite (with a null score or contribution)."
    )


class RankedItem(BaseModel):
    id: str | int
    score: float | None = Field(
        description="Model score; null if the model gave NaN or the request was not scored "
        "(`degraded` with reason `over_budget` or `shed`: retrieval order)."
    )
    rank: int = Field(ge=1, description="1-based position after reranking.")
    missing_features: int | None = Field(
        None, description="With `explain`: how many of this candidate's features were missing."
    )
    explanation: Explanation | None = Field(
        None, description="With `explain`: why this score (the top results only, see docs)."
    )
    team: Literal["control", "candidate", "both"] | None = Field(
        None,
        description="With `explain`, in an interleaving experiment: which version placed this "
        "result (`both`: the rankings' common top, credited to neither).",
    )


class RerankResponse(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "request_id": "3f2a9c",
                    "model": {"name": "demo", "version": "20261123T070927360555Z-0e2444"},
                    "results": [
                        {"id": "doc-3", "score": -0.5038, "rank": 1},
                        {"id": "doc-2", "score": -0.5491, "rank": 2},
                        {"id": "doc-1", "score": -1.0994, "rank": 3},
                    ],
                    "degraded": False,
                    "reasons": [],
                }
            ]
        }
    )

    request_id: str
    model: ModelRef
    results: list[RankedItem] = Field(
        description="Sorted by score, highest first; ties keep input order; cut to top_k."
    )
    degraded: bool = Field(
        description="True when user or item features fell back (e.g. Redis down) or the "
        "request was answered in retrieval order without scoring (over its latency budget, or "
        "shed)."
    )
    reasons: list[str] = Field(
        description="Why: user-, item- and query-feature reasons, or `over_budget` / `shed`."
    )
    item_features_missing: int | None = Field(
        None,
        description="Models with item features: candidates the item store did not know "
        "(scored with missing values; `reasons` then holds `item_features_missing`).",
    )
    query_features_missing: int | None = Field(
        None,
        description="Models with query features: how many of them the request left out of "
        "`query.features` or sent as null (scored as missing values; `reasons` then holds "
        "`query_features_missing`).",
    )
    user_cluster: str | None = Field(None, description="With `explain`: the user's cluster.")
    explanation_error: str | None = Field(
        None, description="With `explain`: why this model gives no contributions."
    )
    experiment: dict[str, Any] | None = Field(
        None,
        description="With `explain`, when the request is in an online experiment: its name, "
        "mode, control and candidate versions, and the A/B arm (docs/EXPERIMENTS.md).",
    )


class ErrorDetail(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class ValidationErrorResponse(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "detail": [
                        {
                            "loc": ["body", "candidates", 3, "features"],
                            "msg": "expected 136 values in the model's feature order, got 135",
                            "type": "feature_count",
                        }
                    ]
                }
            ]
        }
    )

    detail: list[ErrorDetail]


class MessageResponse(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"detail": "no model is loaded"}]})

    detail: str


# What the service middleware answers for any request body before a route sees it
# (app.api.middleware), for each route's OpenAPI responses. (A request the HTTP parser cannot
# read gets the server's own plain-text 400, before the app: not documented here.)
BODY_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {
        "model": MessageResponse,
        "description": "A body sent with `Upgrade` (curl --http2 offers h2c): send plain HTTP/1.1.",
    },
    408: {"model": MessageResponse, "description": "Body not received in time."},
    413: {"model": MessageResponse, "description": "Body larger than LTR_MAX_BODY_BYTES."},
    415: {
        "model": MessageResponse,
        "description": "A Content-Encoding other than identity: send the body uncompressed.",
    },
    501: {
        "model": MessageResponse,
        "description": "A Transfer-Encoding other than chunked (`gzip, chunked`): send the "
        "body with Content-Length or chunked alone, uncompressed.",
    },
}


class Health(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"status": "ok"}]})

    status: str
    detail: str | None = None


class ModelInfo(BaseModel):
    name: str
    version: str
    kind: str
    created_at: dt.datetime
    loaded_at: dt.datetime
    default: bool
    feature_names: list[str] = Field(description="What clients send per candidate, list order.")
    query_features: list[str] = Field(
        default_factory=list, description="What clients send once in `query.features`."
    )
    item_features: list[str] = Field(
        default_factory=list, description="Looked up by candidate id in the item feature store."
    )
    item_set: str | None = Field(None, description="The item feature set they come from.")
    item_set_version: str | None = Field(
        None, description="The version of that set the model was trained with."
    )
    item_set_live_version: str | None = Field(
        None,
        description="With items from Redis: the set's live version as this worker last read "
        "it there (null before its first item lookup, or with the snapshot as the store).",
    )
    user_clusters: bool
    metrics: dict[str, Any]
    experiment: dict[str, Any] | None = Field(
        None,
        description="The online experiment served beside this version (docs/EXPERIMENTS.md): "
        "its name, mode, traffic and candidate; or why it is not served.",
    )


class ModelsResponse(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "models": [
                        {
                            "name": "demo",
                            "version": "20261122T061500123456Z-1a2b3c",
                            "kind": "lambdamart",
                            "created_at": "2026-11-22T06:15:00Z",
                            "loaded_at": "2026-11-22T06:20:03Z",
                            "default": True,
                            "feature_names": ["bm25", "ctr_7d"],
                            "user_clusters": False,
                            "metrics": {"ndcg@10": 0.71},
                        }
                    ],
                    "errors": {},
                }
            ]
        }
    )

    models: list[ModelInfo]
    errors: dict[str, str] = Field(description="Last refused version per model, and why.")


class ReloadFailure(BaseModel):
    name: str
    version: str
    error: str


class ReloadResponse(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "loaded": [{"name": "demo", "version": "20261123T061500123456Z-9f8e7d"}],
                    "unchanged": [],
                    "failed": [],
                }
            ]
        }
    )

    loaded: list[ModelRef]
    unchanged: list[ModelRef]
    failed: list[ReloadFailure]
