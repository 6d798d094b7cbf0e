"""`POST /feedback`: clicks, purchases and dwell times on the candidates a /rerank served.

Include with `app.include_router(feedback_router)`; the lifespan puts an
`app.impressions.ImpressionLog` on `app.state.impressions`.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import orjson
from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from starlette.responses import Response

from app.api.dependencies import ImpressionsDep
from app.api.errors import json_error
from app.api.key_counts import check_feedback, fields
from app.api.request_matrix import decode_body
from app.api.schemas import (
    BODY_ERRORS,
    REQUEST_ID_PATTERN,
    MessageResponse,
    ValidationErrorResponse,
)
from app.impressions.feedback import LOGGING_OFF, FeedbackError, FeedbackUnavailable

feedback_router = APIRouter()

MAX_EVENTS = 10_000


class FeedbackEvent(BaseModel):
    # strict: "5" is not 5 and true is not 1 (an integer is still a number)
    model_config = ConfigDict(extra="forbid", strict=True)

    id: str | int = Field(description="A candidate id the request served.", examples=["d1"])
    type: Literal["click", "purchase", "dwell"]
    value: float | None = Field(
        None,
        description=(
            "A finite number >= 0: a dwell's seconds (required for a dwell), a purchase's "
            "amount (optional)."
        ),
        # In the schema (a schema-driven fuzzer sent -2.4e-25, valid by it): the check is
        # _finite's, whose message says what is wrong.
        json_schema_extra={"minimum": 0},
    )

    @field_validator("value")
    @classmethod
    def _finite(cls, value: float | None) -> float | None:
        # A dwell of -5 s was recorded, and became a training label's evidence.
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise ValueError("must be a finite number >= 0")
        return value

    @model_validator(mode="after")
    def _dwell_has_its_time(self) -> FeedbackEvent:
        # A dwell without one was kept as the candidate's dwell (value null), and the dwell
        # sent with the time was then a duplicate: the label's evidence lost.
        if self.type == "dwell" and self.value is None:
            raise ValueError("a dwell needs its value: the visit's time in seconds")
        return self


class FeedbackRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "examples": [{"request_id": "3f2a9c", "events": [{"id": "d7", "type": "click"}]}]
        },
    )

    # Only what /rerank answers can name one of its requests: another string is a 422 (it
    # was a 404, "unknown request id"), as /rerank gives for it.
    request_id: str = Field(
        min_length=1,
        max_length=128,
        pattern=REQUEST_ID_PATTERN,
        description="The `request_id` of the /rerank answer: letters, digits and `._:-`.",
    )
    events: list[FeedbackEvent] = Field(min_length=1, max_length=MAX_EVENTS)


_REQUEST_FIELDS, _EVENT_FIELDS = fields(FeedbackRequest), fields(FeedbackEvent)


class FeedbackResponse(BaseModel):
    request_id: str
    accepted: int = Field(description="Events recorded now.")
    duplicates: int = Field(description="Events already recorded for this request (ignored).")


@feedback_router.post(
    "/feedback",
    status_code=202,
    response_model=FeedbackResponse,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/FeedbackRequest"}}
            },
        }
    },
    responses={
        **BODY_ERRORS,
        404: {"model": MessageResponse, "description": "Unknown (or expired) request id."},
        422: {"model": ValidationErrorResponse, "description": "Bad shape, or an id not served."},
        503: {"model": MessageResponse, "description": "Logging off or its store unreachable."},
    },
    summary="Record clicks / purchases / dwell on served candidates",
)
async def feedback(
    request: Request,
    impressions: ImpressionsDep,
) -> Response:
    """Events for candidates of one earlier /rerank answer (by its `request_id`). The same
    request id + candidate + type counts once: repeats are answered 202 and ignored."""
    # Decoded here, not by FastAPI: its parser answers 400 (undocumented) for bodies that are
    # not UTF-8, and its lax mode would turn "5" into 5; every bad body is a 422 here.
    doc = decode_body(await request.body())
    check_feedback(doc, _REQUEST_FIELDS, _EVENT_FIELDS)  # one error, not one per unknown key
    body = FeedbackRequest.model_validate(doc)
    if impressions is None:
        return json_error(503, LOGGING_OFF)
    events: list[dict[str, Any]] = [e.model_dump() for e in body.events]
    try:
        accepted, duplicates = await impressions.record_feedback(body.request_id, events)
    except FeedbackUnavailable as exc:
        return json_error(exc.status, str(exc), {"Retry-After": "1"})
    except FeedbackError as exc:
        if exc.status == 422:
            detail = [{"loc": ["body", "events"], "msg": str(exc), "type": "value_error"}]
            return json_error(422, detail)
        return json_error(exc.status, str(exc))
    content = {"request_id": body.request_id, "accepted": accepted, "duplicates": duplicates}
    return Response(orjson.dumps(content), 202, media_type="application/json")
