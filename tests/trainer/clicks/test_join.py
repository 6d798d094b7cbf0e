from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.trainer.clicks.conftest import feedback, impression, write_log
from trainer.clicks.join import (
    JoinedLogs,
    LabelRules,
    dataset_from_logs,
    join_logs,
    split_by_time,
)
from trainer.clicks.logs import read_logs


def logs(tmp_path: Path) -> Path:
    return write_log(
        tmp_path / "log.jsonl",
        [
            impression("r2", ["a", "b", "c"], 20.0, user_id="u2"),
            impression("r1", ["c", "a"], 10.0, user_cluster="US"),
            impression("r3", ["x"], 30.0),
            impression("r1", ["z"], 40.0),  # the same request id again: ignored
            feedback("r2", ("b", "click"), ("b", "click"), ("c", "purchase"), ("c", "click")),
            feedback("r1", ("a", "dwell", 5.0), ("c", "dwell", 45.0)),
            feedback("r1", ("a", "click")),
            feedback("gone", ("a", "click")),
        ],
    )


def test_join_labels_positions_and_order(tmp_path: Path) -> None:
    joined = join_logs(read_logs(logs(tmp_path)), ["t", "j"])
    data = joined.dataset
    assert data.query_ids.tolist() == ["r1", "r2", "r3"]  # by impression time
    np.testing.assert_array_equal(data.group_offsets, [0, 2, 5, 6])
    # r1: c dwelled 45 s (label 1), a clicked (1) after a short dwell (0); r2: b click, c purchase.
    np.testing.assert_array_equal(data.labels, [1, 1, 0, 1, 2, 0])
    np.testing.assert_array_equal(data.positions, [1, 2, 1, 2, 3, 1])
    np.testing.assert_array_equal(data.features[:, 0], [10, 10, 20, 20, 20, 30])
    assert data.feature_names == ["t", "j"]
    assert data.user_ids is not None and data.user_ids.tolist() == ["US", "u2", ""]
    np.testing.assert_array_equal(joined.times, [10.0, 20.0, 30.0])
    assert joined.stats["feedback_repeats"] == 1
    assert joined.stats["feedback_orphans"] == 1
    assert joined.stats["impressions_skipped"] == 1


def test_every_dropped_feedback_event_is_counted(tmp_path: Path) -> None:
    path = write_log(
        tmp_path / "log.jsonl",
        [
            impression("r1", ["a", "b"], 10.0),
            feedback("r1", ("a", "click"), ("zz", "click")),  # zz: not served to r1
            feedback("gone", ("a", "click")),  # no impression for this request
        ],
    )
    joined = join_logs(read_logs(path))
    assert joined.dataset.labels.tolist() == [1, 0]
    assert joined.stats["feedback_orphans"] == 2
    assert joined.stats["feedback_orphans_no_impression"] == 1
    assert joined.stats["feedback_orphans_not_served"] == 1


def test_label_rules(tmp_path: Path) -> None:
    rules = LabelRules(click=1.0, purchase=4.0, dwell=3.0, dwell_seconds=60.0)
    data = join_logs(read_logs(logs(tmp_path)), rules=rules).dataset
    np.testing.assert_array_equal(data.labels, [0, 1, 0, 1, 4, 0])


def test_time_split_never_leaks(tmp_path: Path) -> None:
    records = [impression(f"r{i}", ["a", "b"], float(i // 2)) for i in range(10)]  # pairs tie
    joined = join_logs(read_logs(write_log(tmp_path / "l.jsonl", records)))
    train, valid = split_by_time(joined, valid_fraction=0.3)
    assert train.times.max() < valid.times.min()
    assert (train.dataset.num_queries, valid.dataset.num_queries) == (8, 2)
    train, valid = split_by_time(joined, valid_after=1.0)
    assert train.times.tolist() == [0, 0, 1, 1] and valid.times.min() == 2.0
    with pytest.raises(ValueError, match="no logged list was served after"):
        split_by_time(joined, valid_after=99.0)
    with pytest.raises(ValueError, match="exactly one"):
        split_by_time(joined)


def test_feature_width_must_be_chosen(tmp_path: Path) -> None:
    path = write_log(
        tmp_path / "l.jsonl",
        [impression("r1", ["a"], 1.0, nf=2), impression("r2", ["a"], 2.0, nf=3, model="other")],
    )
    with pytest.raises(ValueError, match="different feature widths"):
        join_logs(read_logs(path))
    assert join_logs(read_logs(path), model="other").dataset.num_features == 3
    assert join_logs(read_logs(path), ["x", "y"]).dataset.query_ids.tolist() == ["r1"]
    with pytest.raises(ValueError, match="no impression has 4 features"):
        join_logs(read_logs(path), ["a", "b", "c", "d"])


def test_dataset_from_logs(tmp_path: Path) -> None:
    train, valid = dataset_from_logs(logs(tmp_path), ["t", "j"], 0.3)
    assert train.query_ids.tolist() == ["r1", "r2"] and valid.query_ids.tolist() == ["r3"]
    assert train.positions is not None and train.feature_names == ["t", "j"]


def test_a_repeated_request_id_keeps_its_earliest_impression_not_the_first_read(
    tmp_path: Path,
) -> None:
    path = write_log(
        tmp_path / "l.jsonl",
        [
            impression("r1", ["late"], 10_020.0),  # read first, served 10,000 s after the other
            impression("r1", ["a", "b"], 20.0),
            impression("r2", ["x"], 30.0),
            impression("r2", ["y"], 30.0),  # same time: the first read stays
            feedback("r1", ("a", "click"), ("b", "click")),
        ],
    )
    joined = join_logs(read_logs(path))
    assert joined.dataset.query_ids.tolist() == ["r1", "r2"]
    assert joined.dataset.labels.tolist() == [1, 1, 0]  # r1's clicks kept, r2 = ["x"]
    np.testing.assert_array_equal(joined.times, [20.0, 30.0])
    assert joined.stats["feedback_orphans_not_served"] == 0
    assert joined.stats["skipped_repeated"] == 2


def _lists_at(times: list[float], tmp_path: Path) -> JoinedLogs:
    records = [impression(f"r{i}", ["a", "b"], t) for i, t in enumerate(times)]
    return join_logs(read_logs(write_log(tmp_path / "t.jsonl", records)))


def test_fraction_split_cuts_between_distinct_times(tmp_path: Path) -> None:
    joined = _lists_at([1000.0] * 30 + [2000.0] * 10, tmp_path)
    train, valid = split_by_time(joined, valid_fraction=0.2)  # 8 wanted; only 10 is possible
    assert (train.dataset.num_queries, valid.dataset.num_queries) == (30, 10)
    joined = _lists_at([1.0] * 4 + [2.0] * 4 + [3.0] * 2, tmp_path)
    train, valid = split_by_time(joined, valid_fraction=0.4)  # 4 wanted: 6 and 2 tie, more train
    assert valid.dataset.num_queries == 2
    with pytest.raises(ValueError, match=r"all 3 logged lists were served at the same time 5\.0"):
        split_by_time(_lists_at([5.0] * 3, tmp_path), valid_fraction=0.2)


def test_fraction_that_leaves_nothing_to_train_says_so(tmp_path: Path) -> None:
    joined = _lists_at([float(i) for i in range(40)], tmp_path)
    with pytest.raises(ValueError, match=r"0\.99 of the 40 logged lists leaves none to train on "):
        split_by_time(joined, valid_fraction=0.99)
    train, valid = split_by_time(joined, valid_fraction=0.975)
    assert (train.dataset.num_queries, valid.dataset.num_queries) == (1, 39)
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match="finite"):
            split_by_time(joined, valid_after=bad)
