"""What Redis lost is noticed: the live version pushed again is verified and repaired, a rollback
and `inspect` check that every item is there, a failed push leaves no keys behind."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import redis
from typer.testing import CliRunner

from tests.support.redis_server import RedisServer, pipelines_die_at
from tests.support.sourced_model import item_table
from trainer.cli import app
from trainer.features import set_writes
from trainer.features.redis_sets import PushError, RedisStopped, push_item_set, switch_version

NAMES = ["x", "y"]


def version_keys(client: redis.Redis, version: str) -> list[bytes]:
    return list(client.scan_iter(match=f"ltr:item:s:{version}:*"))


def test_pushing_the_live_version_again_repairs_what_redis_lost(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """It said "already live" and skipped everything: an evicted item stayed missing."""
    client = redis.Redis.from_url(redis_server.url)
    table = item_table(200, NAMES, seed=1)
    version = push_item_set(client, "ltr:", "s", table).version
    good = client.get(f"ltr:item:s:{version}:d7")
    client.delete(f"ltr:item:s:{version}:d3")
    client.set(f"ltr:item:s:{version}:d7", b"\x00" * 8 + b"?")
    again = push_item_set(client, "ltr:", "s", table)
    assert again.unchanged and again.repaired == 2 and again.version == version
    assert client.get(f"ltr:item:s:{version}:d3") == table.matrix[3].astype("<f4").tobytes()
    assert client.get(f"ltr:item:s:{version}:d7") == good
    assert push_item_set(client, "ltr:", "s", table).repaired == 0
    items = tmp_path / "items.parquet"
    pq.write_table(pa.table({"doc_id": ["p", "q"], "x": [1.0, 2.0]}), items)
    push = [
        "features",
        "push",
        "--set",
        "c",
        "--items",
        str(items),
        "--redis-url",
        redis_server.url,
    ]
    first = CliRunner().invoke(app, push)
    live = json.loads(CliRunner().invoke(app, [*push, "--json"]).stdout)["version"]
    assert first.exit_code == 0
    client.delete(f"ltr:item:c:{live}:q")
    result = CliRunner().invoke(app, push)
    assert result.exit_code == 0
    assert result.stdout.strip() == f"c: {live} is already live (2 items verified, 1 rewritten)"


def test_rollback_and_inspect_check_every_item_is_there(redis_server: RedisServer) -> None:
    """Only the meta key was checked: a rollback to a version missing items succeeded."""
    client = redis.Redis.from_url(redis_server.url)
    v1 = push_item_set(client, "ltr:", "s", item_table(30, NAMES, seed=1)).version
    v2 = push_item_set(client, "ltr:", "s", item_table(30, NAMES, seed=2)).version
    client.delete(f"ltr:item:s:{v1}:d5")
    url = ["--redis-url", redis_server.url]
    result = CliRunner().invoke(app, ["features", "rollback", "--set", "s", "--to", v1, *url])
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        f"error: item set 's' version {v1!r} is incomplete in Redis: 29 of 30 items present "
        "with 2 features; push its table again instead"
    )
    assert client.get("ltr:itemset:s") == v2.encode()
    shown = CliRunner().invoke(app, ["features", "inspect", "redis:s", *url, "--json"])
    listed = json.loads(shown.stdout)["versions"]
    assert {v["version"]: (v["complete"], v["items_present"]) for v in listed} == {
        v1: (False, 29),
        v2: (True, 30),
    }
    client.set(f"ltr:item:s:{v1}:d5", b"1234")  # there, but the wrong size
    with pytest.raises(PushError, match="29 of 30 items present"):
        switch_version(client, "ltr:", "s", v1)
    client.set(f"ltr:item:s:{v1}:d5", b"12345678")
    assert switch_version(client, "ltr:", "s", v1) == v2
    back = ["features", "rollback", "--set", "s", "--to", v2, *url, "--json"]
    result = CliRunner().invoke(app, back)
    assert json.loads(result.stdout) == {"set": "s", "live": v2, "previous": v1}


def test_a_push_redis_refuses_deletes_its_keys_in_one_readable_line(
    redis_server: RedisServer,
) -> None:
    """Out of memory, its partial keys stayed without a TTL; the error dumped the MSET's bytes."""
    client = redis.Redis.from_url(redis_server.url)
    live = push_item_set(client, "ltr:", "s", item_table(10, NAMES, seed=1)).version
    used = int(client.info("memory")["used_memory"])
    client.config_set("maxmemory", str(used + 2_000_000))
    big = item_table(100_000, NAMES, seed=2)
    with pytest.raises(PushError) as caught:
        push_item_set(client, "ltr:", "s", big)
    message = str(caught.value)
    assert message == (
        "Redis refused a write: out of memory (command not allowed when used memory > "
        "'maxmemory'); "
        f"the live version ({live}) is unchanged; its partial keys were deleted"
    )
    assert version_keys(client, big.version()) == []
    assert client.zrange("ltr:itemset:s:versions", 0, -1) == [live.encode()]
    assert client.get("ltr:itemset:s") == live.encode()


def test_a_failed_push_keeps_a_version_redis_already_held(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its keys are the previous version's, kept for a rollback: not deleted."""
    client = redis.Redis.from_url(redis_server.url)
    first, second = item_table(50, NAMES, seed=1), item_table(50, NAMES, seed=2)
    v1 = push_item_set(client, "ltr:", "s", first).version
    push_item_set(client, "ltr:", "s", second)
    monkeypatch.setattr(set_writes, "BATCH", 10)
    monkeypatch.setattr(set_writes, "BATCHES_PER_ROUND_TRIP", 1)
    calls = pipelines_die_at(monkeypatch, 3)
    with pytest.raises(redis.ConnectionError):
        push_item_set(client, "ltr:", "s", first)  # back to v1, by a push
    assert len(version_keys(client, v1)) == 50
    calls["n"] = 0
    third = item_table(50, NAMES, seed=3)
    with pytest.raises(redis.ConnectionError):
        push_item_set(client, "ltr:", "s", third)
    assert version_keys(client, third.version()) == []  # a new version's are


def test_inspect_shows_infinities_and_diff_exits_1_when_sets_differ(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    inf = float("inf")
    pq.write_table(pa.table({"doc_id": ["p", "q"], "x": [inf, -inf], "y": [None, 1.0]}), a)
    pq.write_table(pa.table({"doc_id": ["p", "q"], "x": [inf, 2.0], "y": [None, 1.0]}), b)
    url = ["--redis-url", redis_server.url]
    shown = CliRunner().invoke(app, ["features", "inspect", str(a), "--json"])
    report = json.loads(shown.stdout)
    assert report["missing_values"] == 1
    assert [row["features"] for row in report["sample"]] == [
        {"x": "Infinity", "y": None},
        {"x": "-Infinity", "y": 1.0},
    ]
    push = ["features", "push", "--set", "s", "--items", str(a), *url]
    assert CliRunner().invoke(app, push).exit_code == 0
    live = CliRunner().invoke(app, ["features", "inspect", "redis:s", *url, "--json"])
    assert json.loads(live.stdout)["sample"] == report["sample"]
    same = CliRunner().invoke(app, ["features", "diff", str(a), "redis:s", *url])
    assert same.exit_code == 0 and same.stderr == ""
    differ = CliRunner().invoke(app, ["features", "diff", str(a), str(b)])
    assert differ.exit_code == 1 and differ.stderr == "the sets differ\n"
    as_json = CliRunner().invoke(app, ["features", "diff", str(a), str(b), "--json"])
    assert as_json.exit_code == 1 and json.loads(as_json.stdout)["identical"] is False
    negative = CliRunner().invoke(app, ["features", "inspect", str(a), "--sample", "-1"])
    assert negative.exit_code == 2 and "--sample" in negative.output


def test_inspect_and_diff_print_text_without_json(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    pq.write_table(pa.table({"doc_id": ["p", "q"], "x": [float("inf"), 0.1], "y": [None, 1.0]}), a)
    pq.write_table(pa.table({"doc_id": ["p", "r"], "x": [float("inf"), 2.0]}), b)
    url = ["--redis-url", redis_server.url]
    assert CliRunner().invoke(app, ["features", "push", "--set", "s", "--items", str(a), *url])
    live = CliRunner().invoke(app, ["features", "inspect", "redis:s", *url])
    assert live.exit_code == 0
    lines = live.stdout.splitlines()
    version = json.loads(
        CliRunner().invoke(app, ["features", "inspect", "redis:s", *url, "--json"]).stdout
    )["live"]
    assert lines[0] == f"item set s: live version {version}"
    header = ["version", "items", "present", "complete", "created", "(UTC)", "expires", "memory"]
    assert lines[1].split() == header
    assert lines[2].split()[:5] == ["*", version, "2", "2", "yes"]
    assert lines[3:] == [
        "features (2): x, y",
        f"sample of {version} (2 items; a missing value shows as nan):",
        "  p: x=inf, y=nan",
        "  q: x=0.1, y=1.0",
    ]
    differ = CliRunner().invoke(app, ["features", "diff", str(a), str(b)])
    assert differ.exit_code == 1
    assert differ.stdout.splitlines() == [
        f"a: {a} (2 items, 2 features)",
        f"b: {b} (2 items, 1 feature)",
        "features only in a (1): y",
        "items only in a: 1 (q)",
        "items only in b: 1 (r)",
        "items with a changed value: 0",
    ]


def test_a_push_whose_redis_stops_answering_says_what_is_served(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the bare "Timeout reading from ..." and nothing on what is live or on the keys
    it left behind, which a later push expires."""
    client = redis.Redis.from_url(redis_server.url, socket_timeout=0.5)
    live = push_item_set(client, "ltr:", "s", item_table(50, NAMES, seed=1)).version
    monkeypatch.setattr(set_writes, "BATCH", 10)
    monkeypatch.setattr(set_writes, "BATCHES_PER_ROUND_TRIP", 1)
    real = redis.client.Pipeline.execute
    calls = {"n": 0}

    def stalls(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 3:
            redis_server.pause()
        return real(self, *args, **kwargs)

    monkeypatch.setattr(redis.client.Pipeline, "execute", stalls)
    stuck = item_table(50, NAMES, seed=2)
    try:
        with pytest.raises(RedisStopped, match="stopped answering during the push") as failed:
            push_item_set(client, "ltr:", "s", stuck)
    finally:
        redis_server.resume()
    assert f"the pointer, which named {live} when it began" in str(failed.value)
    assert "stay until a push of this set two minutes or more later expires" in str(failed.value)
    assert client.get("ltr:itemset:s") == live.encode()
    assert version_keys(client, stuck.version())  # left behind ...
    monkeypatch.setattr(redis.client.Pipeline, "execute", real)
    marker = f"ltr:itemset:s:{stuck.version()}:writing"
    assert 0 < client.ttl(marker) <= 120  # it could not be deleted: it expires
    push_item_set(client, "ltr:", "s", item_table(50, NAMES, seed=3))
    assert all(client.ttl(k) == -1 for k in version_keys(client, stuck.version()))  # in writing
    client.delete(marker)  # as two minutes do
    push_item_set(client, "ltr:", "s", item_table(50, NAMES, seed=4))
    leftover = version_keys(client, stuck.version())
    assert leftover and all(0 < client.ttl(k) <= 86400 for k in leftover)  # ... until then
