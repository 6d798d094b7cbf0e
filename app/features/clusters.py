"""User profile → cluster id (seed 002, after Airbnb KDD 2018) and the fallback to coarser ids."""

from __future__ import annotations

import bisect
import math
from collections.abc import Container, Mapping
from typing import Any

from app.artifacts.manifest import BucketedField, ClusterScheme


def field_token(spec: BucketedField, value: Any) -> str:
    if spec.kind == "categorical":
        text = "" if value is None else str(value)
        if spec.values and text not in spec.values:
            text = "other"
        return spec.prefix + (text or "x")
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return spec.prefix + "x"
    if math.isnan(number):
        return spec.prefix + "x"
    return spec.prefix + str(bisect.bisect_right(spec.edges, number))


def cluster_id(scheme: ClusterScheme, profile: Mapping[str, Any]) -> str:
    """The finest cluster id of a profile, e.g. `US_lt1_pn3`."""
    return scheme.separator.join(field_token(f, profile.get(f.name)) for f in scheme.fields)


def coarser_ids(scheme: ClusterScheme, cid: str) -> list[str]:
    """`US_lt1_pn3` → [`US_lt1_pn3`, `US_lt1`, `US`, `unknown`]."""
    parts = cid.split(scheme.separator)
    out = [scheme.separator.join(parts[:n]) for n in range(len(parts), 0, -1)]
    out.append(scheme.unknown)
    return out


def resolve_cluster(scheme: ClusterScheme, cid: str, known: Container[str]) -> str:
    """The finest id along the fallback chain that has an embedding; `unknown` at worst."""
    for candidate in coarser_ids(scheme, cid):
        if candidate in known:
            return candidate
    return scheme.unknown
