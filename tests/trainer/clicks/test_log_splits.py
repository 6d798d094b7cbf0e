"""Splitting joined click logs by query: every list of a query on one side, the same side in
every run; by time when queries are too few to hold some out."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.trainer.clicks.conftest import impression, write_log
from trainer.clicks.join import JoinedLogs, join_logs
from trainer.clicks.log_splits import AUTO_QUERY_MIN, split_by_query, split_logs
from trainer.clicks.logs import read_logs


def joined(tmp_path: Path, queries: list[str | None], name: str = "l.jsonl") -> JoinedLogs:
    records = [impression(f"r{i}", ["a", "b"], float(i), query_id=q) for i, q in enumerate(queries)]
    return join_logs(read_logs(write_log(tmp_path / name, records)))


def sides(parts: tuple[JoinedLogs, JoinedLogs]) -> tuple[set[str], set[str]]:
    train, valid = parts
    assert train.queries is not None and valid.queries is not None
    return set(train.queries.tolist()), set(valid.queries.tolist())


def test_every_list_of_a_query_is_on_one_side_the_same_in_every_run(tmp_path: Path) -> None:
    # 200 queries, each served 5 times over the log (head queries recur).
    queries = [f"q{i % 200}" for i in range(1000)]
    train, valid = sides(split_by_query(joined(tmp_path, queries), 0.2))
    assert not train & valid and train | valid == set(queries)
    assert 25 <= len(valid) <= 55  # about a fifth of the queries
    # More logs with other queries: the queries seen before keep their sides.
    more = joined(tmp_path, queries + [f"new{i}" for i in range(300)], "more.jsonl")
    train2, valid2 = sides(split_by_query(more, 0.2))
    assert train <= train2 and valid <= valid2


def test_a_request_without_a_query_id_is_a_query_of_its_own(tmp_path: Path) -> None:
    logs = joined(tmp_path, [None] * 50)
    train, valid = split_by_query(logs, 0.2)
    assert train.dataset.num_queries + valid.dataset.num_queries == 50
    assert 0 < valid.dataset.num_queries < 50


def test_few_queries_still_leave_one_on_each_side_and_one_query_is_refused(
    tmp_path: Path,
) -> None:
    train, valid = sides(split_by_query(joined(tmp_path, ["a", "b", "a", "b"]), 0.01))
    assert len(train) == 1 and len(valid) == 1
    with pytest.raises(ValueError, match="all 3 logged lists are of one query \\('a'\\)"):
        split_by_query(joined(tmp_path, ["a"] * 3, "one.jsonl"), 0.2)


def test_auto_splits_by_query_only_with_enough_distinct_queries(tmp_path: Path) -> None:
    many = joined(tmp_path, [f"q{i % AUTO_QUERY_MIN}" for i in range(100)])
    assert split_logs(many)[2] == "query"
    few = joined(tmp_path, [f"q{i % (AUTO_QUERY_MIN - 1)}" for i in range(100)], "few.jsonl")
    train, valid, used = split_logs(few)
    assert used == "time" and train.times.max() < valid.times.min()
    assert split_logs(few, "query")[2] == "query"  # asked for: done
    assert split_logs(many, valid_after=50.0)[2] == "time"  # a cut-off time is a time split
    with pytest.raises(ValueError, match="a cut-off time splits by time"):
        split_logs(many, "query", valid_after=50.0)
