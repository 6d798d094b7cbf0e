from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from trainer.data.dataset import RankingDataset
from trainer.dnn.feature_checks import FeatureValueError, check_finite_features, first_infinite


def _data(features: list[list[float]]) -> RankingDataset:
    return RankingDataset(
        features=np.asarray(features, dtype=np.float32),
        labels=np.zeros(len(features)),
        group_offsets=np.array([0, 2, len(features)], dtype=np.int64),
        query_ids=np.array(["q1", "q2"]),
        feature_names=["price", "clicks"],
        source="train.parquet",
    )


def test_nan_is_missing_and_passes() -> None:
    check_finite_features(_data([[1.0, np.nan], [2.0, 3.0], [np.nan, 1.0]]))


def test_an_infinity_is_refused_naming_file_feature_row_and_query() -> None:
    data = _data([[1.0, 2.0], [2.0, 3.0], [4.0, -np.inf], [np.inf, 1.0]])
    with pytest.raises(FeatureValueError) as err:
        check_finite_features(data)
    message = str(err.value)
    assert message.startswith("train.parquet: feature 'clicks' is -inf at row 3 (query q2)")
    assert "2 infinite values in all" in message and "NaN as missing" in message


def test_first_infinite_across_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    import trainer.dnn.feature_checks as checks

    monkeypatch.setattr(checks, "CHUNK_ROWS", 2)
    features = np.zeros((7, 3), dtype=np.float32)
    features[5, 2] = features[6, 0] = np.inf
    assert first_infinite(features) == (5, 2, 2)
    assert first_infinite(np.zeros((3, 2), dtype=np.float32)) is None


def test_an_infinity_names_the_file_line_as_the_other_data_errors(tmp_path) -> None:
    """A trial: `inf.txt: feature 'f3' is inf at row 2 (query 0)`, where the readers say
    `huge400.txt:3: ...`; with a comment line first, row 2 is line 3."""
    from trainer.data.loader import load_dataset

    path = tmp_path / "inf.txt"
    path.write_text("# a comment\n3 qid:0 1:1 3:0.5\n1 qid:0 1:0.5 3:inf\n0 qid:1 1:2 3:-inf\n")
    with pytest.raises(FeatureValueError) as err:
        check_finite_features(load_dataset(path))
    assert str(err.value).startswith(f"{path}:3: feature 'f3' is inf (query 0) (2 infinite")
    parquet = _data([[1.0, 2.0], [2.0, 3.0], [4.0, -np.inf]])
    parquet = dataclasses.replace(parquet, source_rows=np.arange(1, 4), source_unit="row")
    with pytest.raises(FeatureValueError) as err:
        check_finite_features(parquet)
    assert str(err.value).startswith(
        "train.parquet: row 3, column 'clicks': feature 'clicks' is -inf (query q2):"
    )
