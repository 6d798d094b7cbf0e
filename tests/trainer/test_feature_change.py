"""Publish warns of 422s only for features clients send (candidate, query): a held-out trial
was told feature lists would get 422 when two item features went, and its lists got 200."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from app.artifacts.manifest import FeatureSource, ItemFeatureSet, Manifest, MissingValueRule
from app.artifacts.tree_dump import TreeEnsemble
from tests.support import stump
from tests.support.sourced_model import item_table, publish_sourced
from trainer.cli import app
from trainer.feature_change import feature_change_warnings

ITEMS = ["i_pop", "i_price", "i_q", "i_age"]


def manifest(version: str, sources: dict[str, FeatureSource], *candidate: str) -> Manifest:
    items = [n for n, s in sources.items() if s == "item"]
    item_set = ItemFeatureSet(set="catalog", names=items) if items else None
    return Manifest(
        name="itm",
        version=version,
        kind="lambdamart",
        created_at=dt.datetime.now(dt.UTC),
        feature_names=[*candidate, *sources],
        missing_value=MissingValueRule(handled_by="tree_default_direction"),
        feature_sources=sources,
        item_features=item_set,
    )


def sources(query: list[str], items: list[str]) -> dict[str, FeatureSource]:
    found: dict[str, FeatureSource] = dict.fromkeys(query, "query")
    return {**found, **dict.fromkeys(items, "item")}


def test_fewer_item_features_are_a_note_without_422(tmp_path: Path) -> None:
    """The trial's case over the CLI: c1,c2 + qlen,hour + four item features, then two."""
    runs, registry = tmp_path / "runs", tmp_path / "registry"
    for version, items in (("v1", ITEMS), ("v2", ITEMS[:2])):
        names = ["c1", "c2", "qlen", "hour", *items]
        found: dict[str, Any] = sources(["qlen", "hour"], items)
        ensemble = TreeEnsemble(len(names), [stump()])
        table = item_table(5, items)
        model = publish_sourced(
            runs, ensemble, found, table, name="itm", version=version, feature_names=names
        )
        result = CliRunner().invoke(
            app, ["publish", "--model", str(model), "--registry", str(registry)]
        )
        assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if "takes other" in line]
    assert lines == [
        "note: itm v2 takes other item features than v1 (8 -> 6: 0 added, 2 removed: -i_q, "
        "-i_age); the service fills those in, and the candidate and query features clients "
        "send are unchanged"
    ]


def test_a_query_change_warns_for_the_query_alone() -> None:
    old = manifest("v1", sources(["qlen", "hour"], ITEMS), "c1", "c2")
    new = manifest("v2", sources(["qlen"], ITEMS[:1]), "c1", "c2")
    (line,) = feature_change_warnings(old, new)
    assert line.startswith("warning: itm v2 takes other query features than v1 (2 -> 1: ")
    assert "clients sending query feature lists will get 422" in line
    assert "query name maps with removed names will get 422" in line
    assert "candidate" not in line


def test_candidate_and_query_changes_are_a_warning_each() -> None:
    old = manifest("v1", sources(["qlen"], ITEMS), "c1", "c2")
    new = manifest("v2", sources(["qlen", "hour"], ITEMS), "c1", "c2", "c3")
    candidate, query = feature_change_warnings(old, new)
    assert "candidate features than v1 (2 -> 3: 1 added, 0 removed: +c3)" in candidate
    assert "clients sending candidate feature lists will get 422" in candidate
    assert "candidate name maps without the added names will score them as missing" in candidate
    assert "with removed names" not in candidate
    assert "query features than v1 (1 -> 2: 1 added, 0 removed: +hour)" in query


def test_a_list_of_the_same_length_is_not_a_422_but_read_otherwise() -> None:
    old = manifest("v1", sources([], ITEMS), "c1", "c2")
    new = manifest("v2", sources([], ITEMS), "c2", "c1")
    (line,) = feature_change_warnings(old, new)
    assert "(2 -> 2: reordered)" in line and "will get 422" not in line
    assert "candidate feature lists are read in the new order without an error" in line


def test_dropping_every_item_feature_refuses_candidates_without_features() -> None:
    old = manifest("v1", sources([], ITEMS), "c1", "c2")
    new = manifest("v2", {}, "c1", "c2")
    (line,) = feature_change_warnings(old, new)
    assert "candidates sent without `features` (an id alone) will get 422" in line
