"""Admission for POST /rerank in the service middleware, before the framework routes it.

Under overload most requests are shed, and a shed request's own work (finding its ids, about
0.3 ms for 1,000 candidates) had become smaller than what routing it cost: FastAPI's
dependency solving, an exception raised through the dependency's exit stack and the exception
middleware's handler lookup took about as long again. Here the middleware, which has just read
the body, takes the admission decision itself: a shed request is answered at once
(app.api.retrieval_order), an admitted one goes on with its slot in the request's state, where
the route's dependency (app.api.admission.admitted) finds it. Shed answers take turns with
the loop's other work (app.api.shed_turns). Anything unusual (a bad budget header) is left to
the route, which reports it as before.
"""

from __future__ import annotations

from functools import partial

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Scope

from app.api.admission import (
    SLOT_STATE,
    AdmissionController,
    Shed,
    admit,
    is_rerank,
    request_budget,
)
from app.api.errors import handler_for
from app.api.request_matrix import RequestError
from app.api.retrieval_order import overload_response


async def admit_rerank(scope: Scope, body: bytes) -> Response | None:
    """The answer for a shed POST /rerank; None when the route goes on (admitted, or not
    decided here). An admitted request's slot is released by the middleware at the end, or
    earlier by the route's dependency."""
    if scope["method"] != "POST" or not is_rerank(scope):
        return None
    request = Request(scope)
    controller: AdmissionController = request.app.state.admission
    if not controller.enabled:
        return None
    try:
        budget = request_budget(request, request.app.state.settings)
    except RequestError:
        return None  # the route's dependency reports it
    try:
        slot = await admit(controller, budget, body)
    except Shed as shed:
        if controller.settings.overload_response == "503":
            return await _answer(request, shed)  # nothing to find: no turn needed
        answer: Response = await controller.shed_turns.run(
            partial(_answer, request, shed), budget.due
        )
        return answer
    scope["state"][SLOT_STATE] = slot
    return None


async def _answer(request: Request, shed: Shed) -> Response:
    """overload_response's answer, or the app's own answer to what it raised (a 422 for bad
    ids, a 404 for an unknown model): the handlers the framework would have used."""
    try:
        return await overload_response(request, shed)
    except Exception as exc:
        handler = handler_for(request, exc)
        if handler is None:
            raise
        return await handler(request, exc)


def release_slot(scope: Scope) -> None:
    """Gives back the rows of a slot taken here (a no-op when none was, or it was released)."""
    slot = scope.get("state", {}).get(SLOT_STATE)
    if slot is not None:
        slot.release()
