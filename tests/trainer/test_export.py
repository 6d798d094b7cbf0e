from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from app.artifacts.manifest import NAME_PATTERN
from app.artifacts.store import load_version
from app.artifacts.tree_dump import Tree, TreeEnsemble
from app.scoring.reference import predict
from trainer.data.dataset import RankingDataset
from trainer.export import (
    ExportError,
    data_fingerprint,
    export_tree_model,
    metric_entries,
    new_version_dir,
    scores_match,
)


def small_ensemble() -> TreeEnsemble:
    tree = Tree(
        split_feature=np.array([0, 1], dtype=np.int32),
        threshold=np.array([0.5, 0.25]),
        left=np.array([1, -2], dtype=np.int32),
        right=np.array([-1, -3], dtype=np.int32),
        default_left=np.array([True, False]),
        leaf_value=np.array([0.1, -0.2, 0.3]),
    )
    return TreeEnsemble(num_features=2, trees=[tree, tree], base_score=0.5)


FEATURES = np.array([[0.1, 0.1], [0.9, 0.0], [np.nan, 0.9], [0.2, np.nan]], dtype=np.float32)


def export(out: Path, **kwargs: object) -> Path:
    args: dict[str, object] = {
        "name": "demo",
        "feature_names": ["a", "b"],
        "metrics": {"ndcg@10": {"value": np.float64(0.5)}},
        "training": {"engine": "native", "trees": np.int64(2)},
        "verify_features": FEATURES,
    }
    args.update(kwargs)
    return export_tree_model(small_ensemble(), out, **args)  # type: ignore[arg-type]


def test_writes_a_loadable_verified_version(tmp_path: Path) -> None:
    path = export(tmp_path / "models" / "v1")
    artifact = load_version(path)
    manifest = artifact.manifest
    assert (manifest.name, manifest.version, manifest.kind) == ("demo", "v1", "lambdamart")
    assert manifest.missing_value.handled_by == "tree_default_direction"
    assert manifest.feature_names == ["a", "b"]
    assert manifest.metrics == {"ndcg@10": {"value": 0.5}}
    assert manifest.training == {"engine": "native", "trees": 2}
    reloaded = TreeEnsemble.from_json_bytes(artifact.files["model.json"])
    np.testing.assert_array_equal(predict(reloaded, FEATURES), predict(small_ensemble(), FEATURES))
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]  # no temp left


def test_extra_files_are_listed(tmp_path: Path) -> None:
    path = export(tmp_path / "v2", extra_files={"clusters.json": b'["unknown"]'})
    assert set(load_version(path).manifest.files) == {"model.json", "clusters.json"}


def test_refuses_scores_that_do_not_match(tmp_path: Path) -> None:
    expected = predict(small_ensemble(), FEATURES)
    expected[2] += 1e-6
    with pytest.raises(ExportError, match="scores differently"):
        export(tmp_path / "v3", expected_scores=expected)
    assert not (tmp_path / "v3").exists()  # the bad version was removed
    export(tmp_path / "v4", expected_scores=predict(small_ensemble(), FEATURES))


@pytest.mark.parametrize(
    "out, kwargs, message",
    [
        ("bad name!", {}, "directory name is the version id"),
        ("v5", {"name": "no/slash"}, "model name"),
        ("v5", {"feature_names": ["a"]}, "1 feature names for a model of 2"),
    ],
)
def test_refuses_bad_arguments(tmp_path: Path, out: str, kwargs: dict, message: str) -> None:
    with pytest.raises(ExportError, match=message):
        export(tmp_path / out, **kwargs)


def test_never_overwrites(tmp_path: Path) -> None:
    export(tmp_path / "v6")
    with pytest.raises(ExportError, match="already exists"):
        export(tmp_path / "v6")


def test_new_version_dir_is_a_valid_time_sorted_id(tmp_path: Path) -> None:
    first, second = new_version_dir(tmp_path), new_version_dir(tmp_path)
    assert first.parent == tmp_path and re.match(NAME_PATTERN, first.name)
    assert first.name[:21] <= second.name[:21]


def test_scores_match_uses_the_score_scale_as_floor() -> None:
    expected = np.array([1000.0, 1e-9, -3.0])
    assert scores_match(expected + np.array([1e-4, 1e-4, 0.0]), expected, 1e-6)
    assert not scores_match(expected + np.array([0.0, 2e-3, 0.0]), expected, 1e-6)
    assert not scores_match(expected[:2], expected, 1e-6)


def test_fingerprint_and_metric_entries() -> None:
    data = RankingDataset(
        features=np.zeros((3, 2), dtype=np.float32),
        labels=np.array([1.0, 0.0, 2.0]),
        group_offsets=np.array([0, 2, 3]),
        query_ids=np.array([1, 2]),
        source="valid.txt",
    )
    fp = data_fingerprint(data)
    assert len(fp) == 16
    changed = RankingDataset(
        data.features, np.array([1.0, 0.0, 1.0]), data.group_offsets, data.query_ids
    )
    assert data_fingerprint(changed) != fp
    entries = metric_entries({"ndcg@10": 0.7, "queries": 2, "documents": 3}, data, 1.0)
    assert entries == {
        "ndcg@10": {
            "value": 0.7,
            "dataset": "valid.txt",
            "dataset_fingerprint": fp,
            "empty_query_ndcg": 1.0,
        }
    }
