"""Every bad candidate of a /rerank body, once the fast path has found the first.

`build_matrix` stops at the first problem, which is all the usual (valid) request needs; a
client with 50 bad candidates then needed 50 round trips to find them (a held-out trial). On
the error path only, the candidates are checked again by the same code in parts: a part that
builds is skipped whole, one that fails is halved until the bad candidates stand alone, so the
valid stretches cost about what building them does and the errors come out in body order.
Duplicate ids are checked across the parts at the end. The search stops once it holds more
errors than a 422 shows: 10,000 bad candidates cost 20,000 builds (0.3-5 s of a worker's
event loop, every other request waiting) where a valid body of that size took 30-400 ms.
"""

from __future__ import annotations

from typing import Any

from app.api.request_matrix import MAX_ERRORS, RequestError, RequestErrors, build_matrix

_WHERE = ("body", "candidates")
# What a part is built with: the per-candidate checks, none of the whole body's.
_PART_OPTIONS = ("ignore_unknown", "features_optional")


def every_candidate_error(
    candidates: object, feature_names: list[str], first: RequestError, options: dict[str, Any]
) -> RequestError:
    """`first` (raised by build_matrix on `candidates`), or RequestErrors naming every bad
    candidate when `first` is about one candidate and there are several."""
    loc = first.loc
    if type(candidates) is not list or len(loc) < 3 or loc[:2] != _WHERE or type(loc[2]) is not int:
        return first
    part_options = {k: options[k] for k in _PART_OPTIONS if k in options}
    found: list[tuple[int, RequestError]] = []
    middle = len(candidates) // 2  # the whole list failed already: its halves first
    parts = [(middle, len(candidates)), (0, middle)] if middle else [(0, len(candidates))]
    while parts:
        start, stop = parts.pop()
        try:
            build_matrix(
                candidates[start:stop],
                feature_names,
                min_candidates=1,
                max_candidates=stop - start,
                check_duplicates=False,
                **part_options,
            )
        except RequestError as exc:
            if stop - start == 1:
                found.append((start, _at(exc, start)))
                if len(found) > MAX_ERRORS:
                    break  # more than are shown: those found are the first, in body order
            else:
                middle = (start + stop) // 2
                parts += [(middle, stop), (start, middle)]  # the first half first
    # Stopped early, the candidates up to the last error found have all been checked.
    checked = found[-1][0] + 1 if parts else len(candidates)
    found += _duplicates(candidates[:checked], {i for i, _ in found})
    if len(found) < 2:
        return first
    found.sort(key=lambda pair: pair[0])
    return RequestErrors([error for _, error in found], unchecked_after=checked if parts else None)


def _at(exc: RequestError, index: int) -> RequestError:
    """`exc`, raised for a part of one candidate, at that candidate's index in the body."""
    return RequestError((*_WHERE, index, *exc.loc[3:]), exc.msg, exc.type)


def _duplicates(candidates: list[Any], bad: set[int]) -> list[tuple[int, RequestError]]:
    """Each repeat of an id among the candidates not already found bad (duplicate_id's error,
    for every repeat rather than the first)."""
    first: dict[Any, int] = {}
    out: list[tuple[int, RequestError]] = []
    for i, cand in enumerate(candidates):
        cid = cand.get("id") if i not in bad and type(cand) is dict else None
        if type(cid) is not str and type(cid) is not int:
            continue
        if cid in first:
            where = (*_WHERE, i, "id")
            message = f"duplicate id {cid!r} (also candidates[{first[cid]}])"
            out.append((i, RequestError(where, message, "duplicate_id")))
        else:
            first[cid] = i
    return out
