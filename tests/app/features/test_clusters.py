"""Cluster ids from hostile profiles and Redis values: bounded, linear, still correct."""

from __future__ import annotations

import time

import numpy as np

from app.artifacts.manifest import BucketedField, ClusterScheme
from app.features.clusters import (
    MAX_CLUSTER_ID_LENGTH,
    cluster_id,
    coarser_ids,
    resolve_cluster,
)

SCHEME = ClusterScheme(
    fields=[
        BucketedField(name="country", kind="categorical"),  # no `values` list: any text
        BucketedField(name="price", kind="numeric", prefix="pn", edges=[1.0, 3.0]),
    ]
)


def test_the_fallback_chain_is_unchanged_for_normal_ids() -> None:
    assert coarser_ids(SCHEME, "US_pn1") == ["US_pn1", "US", "unknown"]
    assert resolve_cluster(SCHEME, "US_pn1", {"US", "unknown"}) == "US"
    assert resolve_cluster(SCHEME, "FR_pn1", {"US", "unknown"}) == "unknown"


def test_a_value_holding_the_separator_is_other_not_two_tokens() -> None:
    """A trial: `U_S` trained rows for `field:price=S`, and a client's `U_S_pn1` resolved to
    another price's cluster, for training and serving alike (both build ids here)."""
    assert cluster_id(SCHEME, {"country": "U_S", "price": 2}) == "other_pn1"
    assert cluster_id(SCHEME, {"country": "U_S_pn1", "price": 9}) == "other_pn2"
    assert cluster_id(SCHEME, {"country": "US", "price": 2}) == "US_pn1"


def test_a_number_with_an_underscore_is_not_a_number() -> None:
    """Python's float() reads "34_5" as 345."""
    assert cluster_id(SCHEME, {"country": "US", "price": "2_5"}) == "US_pnx"
    assert cluster_id(SCHEME, {"country": "US", "price": "2.5"}) == "US_pn1"


def test_forty_thousand_separators_cost_nothing() -> None:
    start = time.perf_counter()
    cid = cluster_id(SCHEME, {"country": "_" * 40_000, "price": 2})
    assert cid == "other_pn1"  # an over-long value counts as `other`
    hostile = "_" * 40_000  # e.g. a `user:*` override written by someone else
    chain = coarser_ids(SCHEME, hostile)
    assert chain[-1] == "unknown" and len(chain) == MAX_CLUSTER_ID_LENGTH + 1
    assert all(len(c) <= MAX_CLUSTER_ID_LENGTH for c in chain)
    assert resolve_cluster(SCHEME, hostile, {"unknown", ""}) == "unknown"
    longest = "a_" * (MAX_CLUSTER_ID_LENGTH // 2)
    assert len(coarser_ids(SCHEME, longest[:MAX_CLUSTER_ID_LENGTH])) > 100
    assert time.perf_counter() - start < 0.5


LONG = ClusterScheme(fields=[BucketedField(name=f"f_{c}", kind="categorical") for c in "abcde"])


def test_an_over_long_id_falls_back_by_dropping_trailing_tokens() -> None:
    """A trial: five 52-character values make a 264-character id, which resolved straight to
    `unknown` although its first field alone had a row."""
    profile = {f"f_{c}": c * 52 for c in "abcde"}
    cid = cluster_id(LONG, profile)
    assert len(cid) == 264 > MAX_CLUSTER_ID_LENGTH
    tokens = cid.split("_")
    assert coarser_ids(LONG, cid) == ["_".join(tokens[:n]) for n in (4, 3, 2, 1)] + ["unknown"]
    assert resolve_cluster(LONG, cid, {"unknown", tokens[0]}) == tokens[0]
    # The limit applies to the ids considered: the full id itself is never one.
    assert resolve_cluster(LONG, cid, {"unknown", cid}) == "unknown"


def test_a_prefix_of_exactly_the_limit_is_a_candidate() -> None:
    scheme = ClusterScheme(separator="--", fields=LONG.fields)
    head = "a" * (MAX_CLUSTER_ID_LENGTH - 3)
    cid = f"{head}--b--c"
    assert coarser_ids(scheme, cid) == [f"{head}--b", head, "unknown"]
    cid = f"{head}--bc--d"  # `head--bc` is one character too long
    assert coarser_ids(scheme, cid) == [head, "unknown"]
    assert coarser_ids(scheme, "x" * (MAX_CLUSTER_ID_LENGTH + 1) + "--y") == ["unknown"]


def test_a_boolean_is_not_a_number() -> None:
    """A trial: JSON `true` in a numeric field bucketed as 1, `false` as 0."""
    for value in (True, False, np.bool_(True)):
        assert cluster_id(SCHEME, {"country": "JP", "price": value}) == "JP_pnx"
    assert cluster_id(SCHEME, {"country": "JP", "price": 1}) == "JP_pn1"
    assert cluster_id(SCHEME, {"country": True, "price": 0.5}) == "True_pn0"
