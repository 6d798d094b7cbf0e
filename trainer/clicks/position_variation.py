"""Whether the logs ever move a document between positions for the same query: what lets the
position-bias estimate tell examination from relevance.

Where one fixed ranker served every list, a (query, document) pair is always at the same
position, and a position's lower click rate may be its documents' worth as much as its being
seen less: the estimate then stays near raw click-through ratios (a held-out trial: 0.43,
0.22, 0.18, 0.12 at positions 2-5 against a true 0.50, 0.33, 0.25, 0.20). `ltr dataset` warns
when the pairs shown more than once almost never moved.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from trainer.clicks.logs import Impression

# Below this many repeated pairs the logs say too little either way.
MIN_REPEATED = 200
# Fewer moved pairs than this share of the repeated ones: warned about.
MIN_MOVED_SHARE = 0.02


@dataclass(frozen=True)
class PositionVariation:
    repeated: int  # (query id, document id) pairs shown more than once
    moved: int  # of those, pairs shown at more than one position
    explored: int = 0  # impressions the service explored (app/api/exploration.py)

    def to_json(self) -> dict[str, int]:
        return {
            "repeated_pairs": self.repeated,
            "moved_pairs": self.moved,
            "explored_impressions": self.explored,
        }

    def warning(self) -> str | None:
        if self.repeated < MIN_REPEATED or self.moved >= MIN_MOVED_SHARE * self.repeated:
            return None
        return (
            f"only {self.moved:,} of the {self.repeated:,} (query_id, document) pairs shown more "
            "than once were ever shown at another position: the logs hardly vary positions "
            "(one fixed ranker?), so the position-bias estimate cannot tell being seen less "
            "from being worth less and stays near raw click-through by position; "
            "LTR_EXPLORATION_SHARE (e.g. 0.05) makes the service vary them "
            "(docs/POSITION_BIAS.md, 'Logs of one fixed ranker')"
        )


def position_variation(impressions: Iterable[Impression]) -> PositionVariation:
    """Counted over the impressions that carry a `query_id` (string or integer)."""
    first: dict[tuple[Any, Any], int] = {}  # pair -> first position; -1 once it moved
    repeated: set[tuple[Any, Any]] = set()
    explored = 0
    for imp in impressions:
        explored += imp.explored is not None
        query = imp.query_id
        if type(query) is not str and type(query) is not int:
            continue
        for cid, position in zip(imp.ids, imp.positions.tolist(), strict=True):
            if type(cid) is not str and type(cid) is not int:
                continue
            key = (query, cid)
            seen = first.get(key)
            if seen is None:
                first[key] = position
                continue
            repeated.add(key)
            if seen != position:
                first[key] = -1
    moved = sum(1 for key in repeated if first[key] == -1)
    return PositionVariation(len(repeated), moved, explored)
