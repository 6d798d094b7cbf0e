import numpy as np
import pytest

from trainer.data.dataset import RankingDataset
from trainer.dnn.nothing_learned import (
    constant_features,
    missing_everywhere,
    never_present_warning,
    why_nothing_learned,
)


def data(features: list[list[float]], labels: list[float], sizes: list[int]) -> RankingDataset:
    return RankingDataset(
        features=np.array(features, dtype=np.float32),
        labels=np.array(labels, dtype=np.float64),
        group_offsets=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
        query_ids=np.arange(len(sizes)),
    )


VARIED = [[1.0, 0.0], [2.0, 0.0], [3.0, 1.0], [4.0, 1.0]]


@pytest.mark.parametrize(
    ("train", "loss", "reason"),
    [
        (data(VARIED, [1, 1, 1, 1], [2, 2]), "lambdarank", "every label is 1"),
        (data(VARIED, [1, 1, 1, 1], [2, 2]), "pointwise", "every label is 1"),
        (data(VARIED, [0, 1, 2, 0], [1, 1, 1, 1]), "listnet", "every query has a single document"),
        (data([[5.0, 1.0]] * 4, [0, 1, 2, 0], [2, 2]), "ranknet", "every feature is constant"),
        (data([[5.0, 1.0]] * 4, [0, 1, 2, 0], [2, 2]), "pointwise", "every feature is constant"),
        (data(VARIED, [0, 0, 2, 2], [2, 2]), "lambdarank", "no query has documents with different"),
    ],
)
def test_the_reason_a_network_learns_no_ranking(train, loss, reason) -> None:
    found = why_nothing_learned(train, loss)
    assert found is not None and reason in found


@pytest.mark.parametrize(
    ("train", "loss"),
    [
        (data(VARIED, [0, 1, 2, 0], [2, 2]), "lambdarank"),
        # Pointwise regression learns labels across queries: single documents teach it too.
        (data(VARIED, [0, 1, 2, 0], [1, 1, 1, 1]), "pointwise"),
        (data(VARIED, [0, 0, 2, 2], [2, 2]), "pointwise"),
    ],
)
def test_no_reason_when_there_is_something_to_learn(train, loss) -> None:
    assert why_nothing_learned(train, loss) is None


def test_constant_features_after_imputation(monkeypatch: pytest.MonkeyPatch) -> None:
    nan = np.nan
    # A missing value of a constant column is imputed with that constant; all-NaN is constant.
    assert constant_features(np.array([[1.0, nan], [nan, nan], [1.0, nan]]))
    assert not constant_features(np.array([[1.0, nan], [nan, nan], [2.0, nan]]))
    monkeypatch.setattr("trainer.dnn.nothing_learned.CHUNK_ROWS", 2)
    assert not constant_features(np.array([[1.0], [1.0], [1.0], [0.0], [1.0]]))
    assert constant_features(np.array([[nan], [nan], [3.0], [3.0], [nan]]))


def test_features_missing_in_every_training_row_are_named(monkeypatch) -> None:
    nan = np.nan
    rows = [[1.0, nan, nan], [2.0, nan, 4.0], [3.0, nan, nan], [4.0, nan, nan]]
    train = data(rows, [0, 1, 2, 0], [2, 2])
    monkeypatch.setattr("trainer.dnn.nothing_learned.CHUNK_ROWS", 3)
    assert missing_everywhere(train.features).tolist() == [False, True, False]
    warning = never_present_warning(train)
    assert warning is not None
    assert warning.startswith("feature 'f2' is missing (NaN) in every training row")
    wide = data([[1.0] + [nan] * 12] * 4, [0, 1, 2, 0], [2, 2])
    warning = never_present_warning(wide)
    assert warning is not None
    assert warning.startswith("features 'f2', 'f3', ") and "'f11' and 2 more are missing" in warning
    assert never_present_warning(data(VARIED, [0, 1, 2, 0], [2, 2])) is None
    # Nothing present at all is why_nothing_learned's to say.
    assert never_present_warning(data([[nan, nan]] * 4, [0, 1, 2, 0], [2, 2])) is None
