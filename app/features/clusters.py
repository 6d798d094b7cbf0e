"""User profile → cluster id and the fallback to coarser ids (after Grbovic & Cheng, KDD 2018,
"Real-time Personalization using Embeddings for Search Ranking at Airbnb").

Ids come from clients (profile values) and from Redis (`user:*` overrides), so their length is
bounded before anything splits them: a categorical value longer than MAX_VALUE_LENGTH counts
as `other`, and only prefixes of at most MAX_CLUSTER_ID_LENGTH characters are candidates: an
id longer than that starts its fallback at its longest prefix within the limit (five fields of
52-character values make a 264-character id whose first field alone is a common cluster). The
fallback chain is walked from the right with `rfind`, one prefix at a time, and stops at the
first id the table holds.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Container, Iterator, Mapping
from typing import Any

import numpy as np

from app.artifacts.manifest import BucketedField, ClusterScheme

MAX_VALUE_LENGTH = 64
MAX_CLUSTER_ID_LENGTH = 256
OTHER_TOKEN = "other"  # a categorical value that is not listed, too long or holds the separator


def field_token(spec: BucketedField, value: Any, separator: str = "_") -> str:
    if spec.kind == "categorical":
        text = "" if value is None else str(value)
        # A value holding the separator would split into tokens of other fields: `U_S_a1`
        # resolved to another age's cluster, and trained rows for `field:age=S` (a trial).
        if (
            (spec.values and text not in spec.values)
            or len(text) > MAX_VALUE_LENGTH
            or separator in text
        ):
            text = OTHER_TOKEN
        return spec.prefix + (text or "x")
    if type(value) is str and "_" in value:  # Python's float() reads "34_5" as 345
        return spec.prefix + "x"
    # float(True) is 1.0: a JSON `true` or a Parquet boolean column would bucket as a number.
    if isinstance(value, bool | np.bool_):
        return spec.prefix + "x"
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return spec.prefix + "x"
    if math.isnan(number):
        return spec.prefix + "x"
    return spec.prefix + str(bisect.bisect_right(spec.edges, number))


def cluster_id(scheme: ClusterScheme, profile: Mapping[str, Any]) -> str:
    """The finest cluster id of a profile, e.g. `US_lt1_pn3`."""
    sep = scheme.separator
    return sep.join(field_token(f, profile.get(f.name), sep) for f in scheme.fields)


def coarser_ids(scheme: ClusterScheme, cid: str) -> list[str]:
    """`US_lt1_pn3` → [`US_lt1_pn3`, `US_lt1`, `US`, `unknown`]."""
    return [*_prefixes(scheme, cid), scheme.unknown]


def _prefixes(scheme: ClusterScheme, cid: str) -> Iterator[str]:
    """`cid` and its prefixes ending before a separator, longest first, each at most
    MAX_CLUSTER_ID_LENGTH characters long and none empty (no table has an empty id)."""
    sep = scheme.separator
    end = len(cid)
    if end > MAX_CLUSTER_ID_LENGTH:
        # The search stays within the limit, so a hostile id costs no more than a long one.
        end = cid.rfind(sep, 0, MAX_CLUSTER_ID_LENGTH + len(sep))
    while end > 0:
        yield cid[:end]
        end = cid.rfind(sep, 0, end)


def resolve_cluster(scheme: ClusterScheme, cid: str, known: Container[str]) -> str:
    """The finest id along the fallback chain that has an embedding; `unknown` at worst."""
    for candidate in _prefixes(scheme, cid):
        if candidate in known:
            return candidate
    return scheme.unknown
