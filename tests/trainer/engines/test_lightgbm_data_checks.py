"""What LightGBM's lambdarank refuses, refused before LightGBM sees the data, naming where."""

from __future__ import annotations

import numpy as np
import pytest

from trainer.data.dataset import RankingDataset
from trainer.data.errors import DataFormatError
from trainer.engines.lightgbm_ranker import LABEL_GAIN, check_lightgbm_data, lightgbm_params
from trainer.lambdamart.params import LambdaMARTParams


def _data(labels: list[float], sizes: list[int], rows: np.ndarray | None = None) -> RankingDataset:
    n = len(labels)
    return RankingDataset(
        features=np.zeros((n, 1), dtype=np.float32),
        labels=np.asarray(labels, dtype=np.float64),
        group_offsets=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
        query_ids=np.asarray([f"q{i}" for i in range(len(sizes))]),
        source="data.txt",
        source_rows=rows,
    )


def test_without_source_rows_the_query_id_is_named() -> None:
    with pytest.raises(DataFormatError, match=r"^data\.txt: qid q1: label 0\.5 is not a whole"):
        check_lightgbm_data(_data([1, 0, 0.5, 2], [2, 2]))


def test_with_source_rows_the_line_is_named() -> None:
    rows = np.array([3, 4, 7, 8])
    with pytest.raises(DataFormatError, match=r"^data\.txt:7: label 0\.5 is not a whole"):
        check_lightgbm_data(_data([1, 0, 0.5, 2], [2, 2], rows))


def test_labels_beyond_the_grades_and_whole_labels() -> None:
    with pytest.raises(DataFormatError, match=r"^data\.txt: qid q0: label 32 is above 31"):
        check_lightgbm_data(_data([32, 0], [2]))
    check_lightgbm_data(_data([31, 0, 1, 2], [2, 2]))  # whole grades 0..31 pass


def test_label_gain_covers_every_grade_the_readers_accept() -> None:
    params = lightgbm_params(LambdaMARTParams(), 10)
    assert params["label_gain"] == LABEL_GAIN
    assert LABEL_GAIN[:3] == [0.0, 1.0, 3.0] and LABEL_GAIN[31] == 2.0**31 - 1
