"""Every error as JSON `{"detail": ...}`: 4xx for whatever a client sends, 5xx only for our bugs.

422 details are lists of `{"loc", "msg", "type"}` (FastAPI's shape, without echoing the input
back); other errors carry one message string.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.exceptions import HTTPException
from starlette.responses import Response

from app.api.request_matrix import MAX_ERRORS, MSG_MOST, RequestError, clipped_loc
from app.errors import clipped
from app.registry import AmbiguousModel, ModelNotAvailable, UnknownModel

log = logging.getLogger(__name__)


def json_error(status: int, detail: Any, headers: dict[str, str] | None = None) -> Response:
    return Response(
        orjson.dumps({"detail": detail}),
        status_code=status,
        media_type="application/json",
        headers=headers,
    )


def validation_detail(errors: list[Any], prefix: tuple[str | int, ...] = ()) -> list[Any]:
    """pydantic's error list without `input`/`ctx` (which may be huge or not JSON-safe), the
    first MAX_ERRORS of it and a count of the rest."""
    detail: list[Any] = [
        {
            "loc": clipped_loc((*prefix, *err.get("loc", ()))),
            "msg": clipped(str(err.get("msg")), MSG_MOST),
            "type": err.get("type"),
        }
        for err in errors[:MAX_ERRORS]
    ]
    more = len(errors) - MAX_ERRORS
    if more > 0:
        where = clipped_loc((*prefix, *errors[MAX_ERRORS].get("loc", ()))[:1])
        msg = f"... and {more:,} more error{'s' if more > 1 else ''}"
        detail.append({"loc": where, "msg": msg, "type": "too_many_errors"})
    return detail


async def _request_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestError)
    return json_error(422, exc.detail())


async def _pydantic_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ValidationError)
    errors = exc.errors(include_url=False, include_context=False, include_input=False)
    return json_error(422, validation_detail(errors, ("body",)))


async def _fastapi_validation(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    return json_error(422, validation_detail(list(exc.errors())))


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return json_error(exc.status_code, exc.detail, dict(exc.headers or {}))


async def _not_available(request: Request, exc: Exception) -> Response:
    return json_error(503, str(exc), {"Retry-After": "1"})


async def _unknown_model(request: Request, exc: Exception) -> Response:
    return json_error(404, clipped(str(exc), MSG_MOST))


async def _ambiguous_model(request: Request, exc: Exception) -> Response:
    msg = clipped(str(exc), MSG_MOST)
    return json_error(422, [{"loc": ["body", "model"], "msg": msg, "type": "missing"}])


async def _unexpected(request: Request, exc: Exception) -> Response:
    request_id = request.scope.get("state", {}).get("request_id")
    log.exception("unhandled error (request %s)", request_id)
    return json_error(500, f"internal error (request id {request_id})")


def handler_for(request: Request, exc: Exception) -> Callable[..., Awaitable[Response]] | None:
    """The app's handler for `exc`, by its class's MRO, as the exception middleware finds it;
    None for what only the catch-all (500) handles."""
    handlers = request.app.exception_handlers
    for cls in type(exc).__mro__:
        if cls is Exception:
            break
        handler = handlers.get(cls)
        if handler is not None:
            return handler
    return None


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(RequestError, _request_error)
    app.add_exception_handler(ValidationError, _pydantic_error)
    app.add_exception_handler(RequestValidationError, _fastapi_validation)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(ModelNotAvailable, _not_available)
    app.add_exception_handler(UnknownModel, _unknown_model)
    app.add_exception_handler(AmbiguousModel, _ambiguous_model)
    app.add_exception_handler(Exception, _unexpected)
