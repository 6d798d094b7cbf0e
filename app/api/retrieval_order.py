"""The answer to a request that is not scored: its candidates in the order they came.

A shed request must cost a small fraction of a scored one, so its body is not parsed whole
(orjson.loads alone is most of the cost of a 1,000-candidate request). `split_candidates` finds
the structure with a few vectorised passes over the bytes: quotes (a body without backslashes
has no escaped quote, so quotes pair up), brackets outside strings and their depth, the
top-level `candidates` array, and in it the `id` key of every depth-3 object. Only the small
rest of the body (the envelope, with the array replaced by `null`) and the id values go through
orjson. Anything unusual (escapes, a candidate that is not `{"id": ..., ...}`) returns None and
the caller parses the body normally.

The quotes and brackets are found once per request (app.api.body_marks, shared with admission's
row count); what follows them is one compiled walk (app.api.ids_kernel, ~0.03 ms for 1,000
candidates) once its background compile is done, and numpy's vectorised steps (~0.45 ms)
until then.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
from starlette.requests import Request
from starlette.responses import Response

from app import metrics
from app.api.admission import OVER_BUDGET, TIMEOUT_HEADER, Shed, request_budget
from app.api.body_marks import KERNEL, BodyMarks, ShedKernels
from app.api.errors import json_error
from app.api.key_counts import check_envelope
from app.api.middleware import safe_request_id
from app.api.request_matrix import (
    ID_TYPES,
    RequestError,
    candidate_id,
    check_count,
    decode_body,
    duplicate_id,
    not_a_list,
)
from app.api.schemas import RerankEnvelope
from app.features.item_lookup import IdTokens
from app.settings import Settings

_QUOTE, _COMMA, _COLON = 34, 44, 58
_OPEN = (123, 91)  # { [
_CLOSE = (125, 93)  # } ]
_SPACE = b" \t\r\n"
_MIN_CANDIDATE_BYTES = 8  # {"id":1}: a bound on how many ids a body holds
_RESULT_BYTES = 48  # a result's bytes beyond its id: {"id":,"score":null,"rank":N} and a comma
_BRACKETS = np.array([*_OPEN, *_CLOSE], dtype=np.uint8)


def split_candidates(
    raw: bytes, marks: BodyMarks | None = None, max_envelope_bytes: int | None = None
) -> tuple[dict[str, Any], list[Any], IdTokens | None] | None:
    """(the body without `candidates`, the candidate ids in order, the same ids as the body
    wrote them when the compiled walk copied them), or None when the fast scan cannot be sure
    (the caller then decodes the whole body). `marks`: the body's quotes and brackets, if
    admission found them already. None too when the rest of the body is over
    `max_envelope_bytes` (it is decoded here, on the caller's thread)."""
    split = _split(raw, marks, max_envelope_bytes)
    if split is None:
        return None
    doc, ids, raw_ids = split
    return doc, ids, None if raw_ids is None else raw_ids.tokens()


def _split(
    raw: bytes, marks: BodyMarks | None, max_envelope_bytes: int | None = None
) -> tuple[dict[str, Any], list[Any], RawIds | None] | None:
    """split_candidates, with the ids' own bytes when the compiled walk found them."""
    # An outline is only made of a body without backslashes (BodyMarks.outline): searching
    # the body again cost a shed answer ~0.1 ms of a saturated loop per 954 KB (a profile).
    if (marks is None or marks.complete) and b"\\" in raw:
        return None
    body = marks if marks is not None else BodyMarks.of(raw)
    kernels = KERNEL.ready()
    if kernels is not None:
        return _kernel_split(kernels, body, max_envelope_bytes)
    data, special = body.data, body.marks
    # A bracket is outside every string when an even number of quotes precede it (no
    # escapes, so quotes pair up).
    special_kinds = data[special]
    is_quote = special_kinds == _QUOTE
    structural = is_quote | np.isin(special_kinds, _BRACKETS)
    if not structural.all():
        special, special_kinds, is_quote = (
            special[structural],
            special_kinds[structural],
            is_quote[structural],
        )
    quotes = special[is_quote]
    if quotes.size % 2:
        return None
    opens, closes = quotes[0::2], quotes[1::2]
    outside = ~is_quote & (np.cumsum(is_quote) % 2 == 0)
    brackets, kinds = special[outside], special_kinds[outside]
    if brackets.size == 0:
        return None
    depth = np.cumsum(np.where((kinds == _OPEN[0]) | (kinds == _OPEN[1]), 1, -1))
    before = np.searchsorted(brackets, opens) - 1  # the last bracket before each string
    string_depth = np.where(before >= 0, depth[np.maximum(before, 0)], 0)

    span = _candidates_span(raw, data, opens, closes, string_depth, brackets, depth)
    if span is None:
        return None
    start, end, first_mark, last_mark = span
    inner = slice(first_mark + 1, last_mark)
    inner_kinds, inner_depth, inner_marks = kinds[inner], depth[inner], brackets[inner]
    if np.any((inner_depth == 3) & (inner_kinds == _OPEN[1])):
        return None  # an element that is a list
    obj_open = inner_marks[(inner_depth == 3) & (inner_kinds == _OPEN[0])]
    obj_close = inner_marks[(inner_depth == 2) & (inner_kinds == _CLOSE[0])]
    in_span = (opens > start) & (opens < end)
    if obj_open.size != obj_close.size or np.any(in_span & (string_depth == 2)):
        return None  # a string element
    if not _only_commas_between(raw, data, start, end, obj_open, obj_close):
        return None  # a number, true/false or null element
    keys = np.flatnonzero(
        in_span
        & (string_depth == 3)
        & (closes - opens == 3)
        & (data[opens + 1] == 105)  # i
        & (data[opens + 2] == 100)  # d
    )
    if keys.size != obj_open.size or not np.all(
        (opens[keys] > obj_open) & (opens[keys] < obj_close)
    ):
        return None  # an object without an `id`, or with two
    ids = _string_ids(data, keys, opens, closes, obj_close)
    if ids is None:
        ids = _id_values(raw, keys.tolist(), opens.tolist(), closes.tolist(), obj_close.tolist())
    if ids is None:
        return None
    if _too_large(raw, start, end + 1, max_envelope_bytes):
        return None
    return _envelope(raw, start, end + 1), ids, None


OK, N_IDS, OUT_LEN, ARRAY_OPEN, ARRAY_CLOSE = (
    0,
    0,
    1,
    2,
    3,
)  # app.api.ids_kernel's (asserted in tests)


@dataclass(frozen=True)
class RawIds:
    """The ids of a shed request as the body wrote them, joined: `[id,id,...]`."""

    out: np.ndarray  # uint8, the first `length` bytes written
    length: int
    starts: np.ndarray  # int64 [>= count]: where each id begins in `out`
    count: int

    def tokens(self) -> IdTokens:
        return IdTokens(self.out, 1, self.length - 1, self.count)


def _kernel_split(
    kernels: ShedKernels, body: BodyMarks, max_envelope_bytes: int | None = None
) -> tuple[dict[str, Any], list[Any], RawIds] | None:
    """_split by the compiled walk over the marks (app.api.ids_kernel)."""
    raw = body.raw
    out = np.empty(len(raw) + 2, dtype=np.uint8)  # untouched beyond what the ids take
    starts = np.empty(len(raw) // _MIN_CANDIDATE_BYTES + 2, dtype=np.int64)
    result = np.zeros(4, dtype=np.int64)
    if kernels.scan_ids(body.data, body.marks, out, starts, result) != OK:
        return None
    length = int(result[OUT_LEN])
    try:
        ids = orjson.loads(out[:length].tobytes())
    except orjson.JSONDecodeError:  # not UTF-8, a control character, 01: the parser reports it
        return None
    if len(ids) != result[N_IDS] or not set(map(type, ids)) <= ID_TYPES:
        return None
    start, end = int(result[ARRAY_OPEN]), int(result[ARRAY_CLOSE])
    if _too_large(raw, start, end + 1, max_envelope_bytes):
        return None
    return _envelope(raw, start, end + 1), ids, RawIds(out, length, starts, len(ids))


def _too_large(raw: bytes, start: int, stop: int, limit: int | None) -> bool:
    """Whether the body without raw[start:stop] (its candidates) is over `limit` bytes."""
    return limit is not None and len(raw) - (stop - start) > limit


def _envelope(raw: bytes, start: int, stop: int) -> dict[str, Any]:
    """The body without its candidates (raw[start:stop]). A JSON error is the whole body's:
    the spliced one's positions were off by the candidates' length (a trial found "line 1
    column 20" for trailing garbage at column 52)."""
    try:
        envelope = decode_body(raw[:start] + b"null" + raw[stop:])
    except RequestError:
        decode_body(raw)
        raise
    envelope.pop("candidates", None)
    return envelope


def _candidates_span(
    raw: bytes,
    data: np.ndarray,
    opens: np.ndarray,
    closes: np.ndarray,
    string_depth: np.ndarray,
    marks: np.ndarray,
    depth: np.ndarray,
) -> tuple[int, int, int, int] | None:
    """Byte offsets of the top-level `candidates` array's brackets and their mark indices."""
    found = None
    for j in np.flatnonzero(string_depth == 1).tolist():
        if raw[opens[j] + 1 : closes[j]] != b"candidates":
            continue
        colon = _skip_space(raw, int(closes[j]) + 1)
        if colon >= len(raw) or data[colon] != _COLON:
            continue  # a string value "candidates", not the key
        if found is not None:
            return None  # a repeated key: let the full parser decide
        found = _skip_space(raw, colon + 1)
    if found is None or found >= len(raw) or data[found] != _OPEN[1]:
        return None
    first = int(np.searchsorted(marks, found))
    after = np.flatnonzero(depth[first:] == 1)
    if after.size == 0:
        return None
    last = first + int(after[0])
    return found, int(marks[last]), first, last


def _only_commas_between(
    raw: bytes, data: np.ndarray, start: int, end: int, opens: np.ndarray, closes: np.ndarray
) -> bool:
    """Whether the array `raw[start..end]` holds nothing but the objects `opens[i]..closes[i]`
    (byte offsets, int64 [n_objects]) separated by commas."""
    if not opens.size:
        return not raw[start + 1 : end].strip()
    if raw[start + 1 : int(opens[0])].strip() or raw[int(closes[-1]) + 1 : end].strip():
        return False
    gap_starts, gap_ends = closes[:-1] + 1, opens[1:]
    if np.all(gap_ends - gap_starts == 1):  # compact JSON: one byte between objects
        return bool(np.all(data[gap_starts] == _COMMA))
    gaps = zip(gap_starts.tolist(), gap_ends.tolist(), strict=True)
    return all(raw[c:o].strip() == b"," for c, o in gaps)


def _string_ids(
    data: np.ndarray, keys: np.ndarray, opens: np.ndarray, closes: np.ndarray, ends: np.ndarray
) -> list[Any] | None:
    """The ids when every one is a string right after its key's colon (compact JSON, the form
    clients send), gathered in one vectorised copy and decoded by one orjson call; None for
    anything else (`_id_values` then looks at each)."""
    values = keys + 1  # the string after each "id" key
    if values.size == 0 or values[-1] >= opens.size:
        return None
    starts, stops = opens[values], closes[values] + 1
    key_ends = closes[keys] + 1
    right_after = np.all(starts - key_ends == 1) and np.all(data[key_ends] == _COLON)
    if not (right_after and np.all(stops <= ends)):
        return None
    # Each value with its quotes plus one byte, which becomes the separating comma.
    lengths = stops - starts + 1
    offsets = np.cumsum(lengths) - lengths
    gathered = data[np.arange(int(lengths.sum())) - np.repeat(offsets - starts, lengths)]
    gathered[offsets + lengths - 1] = _COMMA
    try:
        ids = orjson.loads(b"[" + gathered[:-1].tobytes() + b"]")
    except orjson.JSONDecodeError:  # not UTF-8: the full parser reports it
        return None
    return ids if len(ids) == keys.size else None


def _id_values(
    raw: bytes, keys: list[int], opens: list[int], closes: list[int], ends: list[int]
) -> list[Any] | None:
    """The value after each `"id"` key (a string or an integer, before its object's end),
    decoded by orjson at once."""
    pieces: list[bytes] = []
    n_strings = len(opens)
    for k, end in zip(keys, ends, strict=True):
        after = closes[k] + 1
        nxt = k + 1
        if nxt < n_strings and opens[nxt] < end and raw[after : opens[nxt]].strip() == b":":
            pieces.append(raw[opens[nxt] : closes[nxt] + 1])
            continue
        comma = raw.find(b",", after, end)
        piece = raw[after : end if comma < 0 else comma].strip()
        if piece[:1] != b":":
            return None  # "id" as a value, not a key
        pieces.append(piece[1:])
    try:
        ids = orjson.loads(b"[" + b",".join(pieces) + b"]")
    except orjson.JSONDecodeError:
        return None
    if len(ids) != len(keys) or not set(map(type, ids)) <= ID_TYPES:
        return None
    return list(ids)


def _skip_space(raw: bytes, i: int) -> int:
    while i < len(raw) and raw[i] in _SPACE:
        i += 1
    return i


def fallback_ids(
    raw: bytes, settings: Settings, marks: BodyMarks | None = None
) -> tuple[RerankEnvelope, list[Any]]:
    """The envelope and candidate ids of a shed request; RequestError as the full path would
    give for a bad envelope or bad ids (the features are not checked: they are not used)."""
    envelope, ids, _ = _fallback(raw, settings, marks)
    return envelope, ids


def _fallback(
    raw: bytes, settings: Settings, marks: BodyMarks | None
) -> tuple[RerankEnvelope, list[Any], RawIds | None]:
    """fallback_ids, with the ids' own bytes when the compiled walk found them."""
    split = _split(raw, marks)
    if split is None:
        doc = decode_body(raw)
        candidates = doc.pop("candidates", None)
        where: tuple[str | int, ...] = ("body", "candidates")
        if type(candidates) is not list:
            raise not_a_list(candidates, where)
        ids = [candidate_id(cand, (*where, i)) for i, cand in enumerate(candidates)]
        split = doc, ids, None
    doc, ids, raw_ids = split
    check_envelope(doc)  # before pydantic: one error, not one per unknown key
    envelope = RerankEnvelope.model_validate(doc)
    n = len(ids)
    where = ("body", "candidates")
    check_count(n, settings.min_candidates, settings.max_candidates, where)
    if len(set(ids)) != n:
        duplicate_id(ids, where)  # names the repeated id and both candidates
    return envelope, ids, raw_ids


async def overload_response(request: Request, exc: Exception) -> Response:
    """The exception handler for Shed: the retrieval order, degraded, or a 503."""
    assert isinstance(exc, Shed)
    state = request.app.state
    settings: Settings = state.settings
    started = time.perf_counter()
    # Bad ids, top_k or model are refused (422 / 404) before any shed answer, the 503 too.
    envelope, ids, raw_ids = _fallback(exc.body, settings, exc.marks)
    model = state.registry.get(envelope.model)
    if settings.overload_response == "503":
        metrics.SHED.labels(exc.reason).inc()
        if exc.reason == OVER_BUDGET and not exc.retry_may_fit:
            return json_error(503, _over_budget(request, settings))  # no retry would fit
        return json_error(503, f"overloaded ({exc.reason}); retry later", {"Retry-After": "1"})
    # The envelope's pattern already allows only header-safe ids; checked again at the header.
    request_id = envelope.request_id or request.scope["state"]["request_id"]
    content = fallback_body(request_id, model, ids, raw_ids, envelope.top_k, exc.reason)
    # Only now is it answered shed: bad ids, top_k or model raised above, answered 422 / 404.
    metrics.SHED.labels(exc.reason).inc()
    metrics.DEGRADED.labels(exc.reason).inc()
    metrics.FALLBACK_SECONDS.observe(time.perf_counter() - started)
    return Response(
        content,
        200,
        {"x-request-id": safe_request_id(request_id) or request.scope["state"]["request_id"]},
        media_type="application/json",
    )


def _over_budget(request: Request, settings: Settings) -> str:
    """A 503 that says a retry would not help: an idle server answered an 8,000-candidate
    body "overloaded; retry later" with Retry-After on every try (a trial)."""
    ms = request_budget(request, settings).seconds * 1000.0
    return (
        f"over budget: this request cannot be answered within its {ms:g} ms budget, on a busy "
        "worker or an idle one (its scoring, or the time its body took to arrive, exceeds "
        f"it); send fewer candidates or a larger {TIMEOUT_HEADER} (at most "
        f"{settings.max_request_budget_ms:g})"
    )


def fallback_body(
    request_id: str,
    model: Any,
    ids: list[Any],
    raw_ids: RawIds | None,
    top_k: int | None,
    reason: str,
) -> bytes:
    """The shed answer's JSON: the ids in the order they came, cut to top_k. From the ids'
    own bytes when the compiled walk found them (the same bytes orjson writes: 1,000 results
    in ~0.02 ms against ~0.15 ms for building and dumping the dicts)."""
    served = ids[:top_k]
    head = {"request_id": request_id, "model": {"name": model.name, "version": model.version}}
    tail = {"degraded": True, "reasons": [reason]}
    kernels = KERNEL.ready()
    if raw_ids is None or kernels is None:
        results = [{"id": cid, "score": None, "rank": r} for r, cid in enumerate(served, 1)]
        return orjson.dumps({**head, "results": results, **tail})
    k = len(served)
    dest = np.empty(raw_ids.length + _RESULT_BYTES * k + 1, dtype=np.uint8)
    written = kernels.write_results(
        raw_ids.out, raw_ids.starts, raw_ids.count, raw_ids.length, k, dest
    )
    return b"".join(
        (
            orjson.dumps(head)[:-1],
            b',"results":[',
            dest[:written].tobytes(),
            b"],",
            orjson.dumps(tail)[1:],
        )
    )
