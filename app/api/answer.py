"""A /rerank answer's ranked results, and the answer's JSON bytes.

The results stay as arrays (ids, scores, order) until they are sent: the usual answer is
written by a compiled pass (app.api.answer_kernel) over orjson's dumps of the ids and the
scores, and the per-result dicts are built only where a result gets more fields (explanations,
an experiment's teams) or before the kernel is compiled. Both give the same bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from app.api import body_scan

# A result's bytes beyond its id and score: {"id":,"score":,"rank":} with a 20-digit rank and a
# comma. (The kernel's module imports numba, which serving loads in the background only.)
RESULT_BYTES = 48


@dataclass(frozen=True)
class RankedResults:
    """The results of a ranking, best first."""

    ids: list[Any]  # the candidates' ids, in input order
    scores: np.ndarray  # float64 [n_candidates]: each candidate's shown score, input order
    order: np.ndarray  # int64 [k]: the input index of each result, best first

    def dicts(self) -> list[dict[str, Any]]:
        ids = self.ids
        shown = self.scores[self.order].tolist()
        return [
            {"id": ids[i], "score": s, "rank": r}
            for r, (i, s) in enumerate(zip(self.order.tolist(), shown, strict=True), 1)
        ]


def answer_json(body: dict[str, Any]) -> bytes:
    """orjson.dumps(body), where body["results"] may be RankedResults (written as its dicts)."""
    results = body.get("results")
    if not isinstance(results, RankedResults):
        return orjson.dumps(body)
    written = _written_results(results)
    if written is None:
        return orjson.dumps({**body, "results": results.dicts()})
    keys = list(body)
    at = keys.index("results")
    head = {k: body[k] for k in keys[:at]}
    tail = {k: body[k] for k in keys[at + 1 :]}
    return b"".join(
        (
            orjson.dumps(head)[:-1] + b"," if head else b"{",
            b'"results":[',
            written,
            b"]," + orjson.dumps(tail)[1:] if tail else b"]}",
        )
    )


def _written_results(results: RankedResults) -> bytes | None:
    """The results' JSON elements joined by commas, or None before the kernel is compiled."""
    kernels = body_scan.KERNEL.ready()
    if kernels is None:
        return None
    try:
        ids = orjson.dumps(results.ids)
    except orjson.JSONEncodeError:  # an id orjson cannot write: the dicts' path says so
        return None
    order = results.order
    # The same bytes as dumping the floats (orjson writes numpy's float64 as it writes float),
    # without making 1,000 Python floats first: 18 against 30 us.
    shown_scores = np.asarray(results.scores[order], dtype=np.float64)  # float32 would differ
    scores = orjson.dumps(shown_scores, option=orjson.OPT_SERIALIZE_NUMPY)
    dest = np.empty(len(ids) + len(scores) + RESULT_BYTES * order.shape[0], dtype=np.uint8)
    data = np.frombuffer(ids, dtype=np.uint8)
    shown = np.frombuffer(scores, dtype=np.uint8)
    n = kernels.write_results(data, len(results.ids), order, shown, dest)
    return dest[:n].tobytes()
