"""How long item set versions switched over stay in Redis (LTR_ITEM_SET_OLD_TTL_SECONDS,
--old-ttl), and what inspect says a version takes there."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import redis
from typer.testing import CliRunner

from tests.support.redis_server import RedisServer
from tests.support.sourced_model import item_table
from trainer.cli import app
from trainer.features.redis_sets import push_item_set, switch_version
from trainer.features.set_retention import OLD_TTL_ENV, RetentionError, old_version_ttl

NAMES = ["x", "y"]


def _keys(client: redis.Redis, version: str) -> list[bytes]:
    return list(client.scan_iter(match=f"ltr:item:s:{version}:*"))


def test_a_ttl_of_zero_removes_what_is_neither_live_nor_kept(redis_server: RedisServer) -> None:
    client = redis.Redis.from_url(redis_server.url)
    v1, v2 = (push_item_set(client, "ltr:", "s", item_table(40, NAMES, seed=k)) for k in (1, 2))
    v3 = push_item_set(client, "ltr:", "s", item_table(40, NAMES, seed=3), old_ttl=0)
    assert v3.expired == [v1.version]
    assert _keys(client, v1.version) == []
    assert client.exists(f"ltr:itemset:s:{v1.version}:meta") == 0
    listed = {v.decode() for v in client.zrange("ltr:itemset:s:versions", 0, -1)}
    assert listed == {v2.version, v3.version}
    assert len(_keys(client, v2.version)) == 40  # kept for a rollback, without a TTL
    assert client.ttl(f"ltr:item:s:{v2.version}:d0") == -1
    # A rollback to v2 with 0 removes nothing it needs: v3 is the one now kept.
    assert switch_version(client, "ltr:", "s", v2.version, old_ttl=0) == v3.version
    assert len(_keys(client, v3.version)) == 40 and len(_keys(client, v2.version)) == 40


def test_the_environment_sets_the_ttl_and_a_bad_value_changes_nothing(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = redis.Redis.from_url(redis_server.url)
    monkeypatch.setenv(OLD_TTL_ENV, "600")
    v1 = push_item_set(client, "ltr:", "s", item_table(5, NAMES, seed=1))
    push_item_set(client, "ltr:", "s", item_table(5, NAMES, seed=2))
    v3 = push_item_set(client, "ltr:", "s", item_table(5, NAMES, seed=3))
    assert 0 < client.ttl(f"ltr:item:s:{v1.version}:d0") <= 600
    monkeypatch.setenv(OLD_TTL_ENV, "1h")
    with pytest.raises(RetentionError, match=f"{OLD_TTL_ENV}='1h'"):
        push_item_set(client, "ltr:", "s", item_table(5, NAMES, seed=4))
    assert client.get("ltr:itemset:s") == v3.version.encode()
    assert len(list(client.scan_iter(match="ltr:item:s:*"))) == 15  # nothing written


@pytest.mark.parametrize(("text", "expected"), [("", 86400), (" 0 ", 0), ("3600", 3600)])
def test_old_version_ttl_reads_the_environment(
    monkeypatch: pytest.MonkeyPatch, text: str, expected: int
) -> None:
    monkeypatch.setenv(OLD_TTL_ENV, text)
    assert old_version_ttl() == expected
    assert old_version_ttl(7) == 7  # a flag's value wins
    for bad in ("-5", "2.5", "day"):
        monkeypatch.setenv(OLD_TTL_ENV, bad)
        with pytest.raises(RetentionError, match="whole number of seconds >= 0"):
            old_version_ttl()


def test_cli_old_ttl_and_inspect_memory(redis_server: RedisServer, tmp_path: Path) -> None:
    client = redis.Redis.from_url(redis_server.url)
    runner = CliRunner()
    url = ["--redis-url", redis_server.url]
    versions = []
    for seed in (1, 2, 3):
        table = item_table(300, NAMES, seed=seed)
        path = tmp_path / f"items{seed}.parquet"
        columns = {"doc_id": table.ids.tolist(), **dict(zip(NAMES, table.matrix.T, strict=True))}
        pq.write_table(pa.table(columns), path)
        pushed = runner.invoke(
            app,
            [
                "features",
                "push",
                "--set",
                "s",
                "--items",
                str(path),
                "--old-ttl",
                "0",
                "--json",
                *url,
            ],
        )
        assert pushed.exit_code == 0, pushed.output
        versions.append(json.loads(pushed.stdout)["version"])
    assert _keys(client, versions[0]) == []
    refused = runner.invoke(
        app, ["features", "rollback", "--set", "s", "--to", versions[1], "--old-ttl", "-1", *url]
    )
    assert refused.exit_code == 2 and "--old-ttl" in refused.output
    assert client.get("ltr:itemset:s") == versions[2].encode()
    bad_env = runner.invoke(
        app,
        ["features", "rollback", "--set", "s", "--to", versions[1], *url],
        env={OLD_TTL_ENV: "soon"},
    )
    assert bad_env.exit_code == 2 and OLD_TTL_ENV in bad_env.output
    shown = runner.invoke(app, ["features", "inspect", "redis:s", "--json", *url])
    memory = {v["version"]: v["memory_bytes"] for v in json.loads(shown.stdout)["versions"]}
    assert set(memory) == set(versions[1:])
    # 300 items of 8 bytes each and a key of ~80: more than the values, less than a KB each.
    assert all(300 * 8 < m < 300 * 1024 for m in memory.values())
    text = runner.invoke(app, ["features", "inspect", "redis:s", *url])
    assert "memory" in text.stdout and " MB" in text.stdout


@pytest.mark.parametrize(
    "command",
    [
        ["redis", "restore", "--registry", "{tmp}"],
        ["publish", "--name", "m", "--rollback", "--registry", "{tmp}"],
    ],
)
def test_a_bad_ttl_is_refused_before_anything_is_switched(
    redis_server: RedisServer, tmp_path: Path, command: list[str]
) -> None:
    args = [a.replace("{tmp}", str(tmp_path)) for a in command]
    done = CliRunner().invoke(
        app,
        [*args, "--redis-url", redis_server.url],
        env={OLD_TTL_ENV: "-1"},
    )
    assert done.exit_code == 2
    assert f"{OLD_TTL_ENV}='-1': expected a whole number of seconds >= 0" in done.output


def test_a_push_finishing_during_anothers_write_leaves_that_one_alone(
    redis_server: RedisServer,
) -> None:
    """A race review: push D finished while push C was writing; D's expiry gave C's version
    a TTL (it was listed, without a meta yet), C then made it live, and the live rows
    vanished when the TTL ran out (3 rounds in 36)."""
    client = redis.Redis.from_url(redis_server.url)
    push_item_set(client, "ltr:", "s", item_table(40, NAMES, seed=1))
    push_item_set(client, "ltr:", "s", item_table(40, NAMES, seed=2))
    other: list[str] = []

    def midway(done: int, total: int) -> None:
        if not other and done >= total // 4:  # D starts and finishes inside C's write
            other.append(push_item_set(client, "ltr:", "s", item_table(40, NAMES, seed=4)).version)

    c = push_item_set(client, "ltr:", "s", item_table(40, NAMES, seed=3), progress=midway)
    assert other and c.previous == other[0]
    assert client.get("ltr:itemset:s") == c.version.encode()
    for version in (c.version, other[0]):  # live, and kept for a rollback
        assert len(_keys(client, version)) == 40
        assert {client.ttl(k) for k in _keys(client, version)} == {-1}
        assert client.ttl(f"ltr:itemset:s:{version}:meta") == -1
    assert client.exists(f"ltr:itemset:s:{c.version}:writing") == 0  # its marker gone


def test_a_switch_waits_for_the_sets_lock_and_says_when_it_cannot_have_it(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trainer.features import set_retention

    client = redis.Redis.from_url(redis_server.url)
    live = push_item_set(client, "ltr:", "s", item_table(5, NAMES, seed=1)).version
    held = client.lock("ltr:itemset:s:switch", timeout=30)
    assert held.acquire()
    monkeypatch.setattr(set_retention, "SWITCH_WAIT_S", 0.2)
    with pytest.raises(RetentionError, match=r"held its switch for 0\.2 s; nothing was switched"):
        push_item_set(client, "ltr:", "s", item_table(5, NAMES, seed=2))
    assert client.get("ltr:itemset:s") == live.encode()
    held.release()
    assert push_item_set(client, "ltr:", "s", item_table(5, NAMES, seed=2)).previous == live


def test_inspect_leaves_out_a_version_whose_ttl_ran_out(redis_server: RedisServer) -> None:
    """It stayed listed as '- 0 NO' until the next switch: nothing a rollback can reach."""
    client = redis.Redis.from_url(redis_server.url)
    v1, v2, v3 = (
        push_item_set(client, "ltr:", "s", item_table(5, NAMES, seed=k)) for k in (1, 2, 3)
    )
    for key in [*_keys(client, v1.version), f"ltr:itemset:s:{v1.version}:meta"]:
        client.delete(key)  # as its TTL does
    shown = CliRunner().invoke(
        app, ["features", "inspect", "redis:s", "--redis-url", redis_server.url, "--json"]
    )
    listed = [v["version"] for v in json.loads(shown.stdout)["versions"]]
    assert sorted(listed) == sorted([v2.version, v3.version])


def test_a_rollback_to_the_live_version_keeps_the_one_kept(redis_server: RedisServer) -> None:
    """It expired (with --old-ttl 0 deleted) the rollback target: 'live' and 'previous'
    both named the live version."""
    client = redis.Redis.from_url(redis_server.url)
    a, b = (push_item_set(client, "ltr:", "s", item_table(20, NAMES, seed=k)) for k in (1, 2))
    assert switch_version(client, "ltr:", "s", b.version, old_ttl=0) == b.version
    assert len(_keys(client, a.version)) == 20
    assert {client.ttl(k) for k in _keys(client, a.version)} == {-1}


def test_a_lower_ttl_shortens_versions_expiring_already(redis_server: RedisServer) -> None:
    client = redis.Redis.from_url(redis_server.url)
    v1 = push_item_set(client, "ltr:", "s", item_table(5, NAMES, seed=1)).version
    for seed in (2, 3):
        push_item_set(client, "ltr:", "s", item_table(5, NAMES, seed=seed))
    assert client.ttl(f"ltr:itemset:s:{v1}:meta") > 3600
    push_item_set(client, "ltr:", "s", item_table(5, NAMES, seed=4), old_ttl=60)
    assert 0 < client.ttl(f"ltr:itemset:s:{v1}:meta") <= 60
    assert all(0 < client.ttl(k) <= 60 for k in _keys(client, v1))
    push_item_set(client, "ltr:", "s", item_table(5, NAMES, seed=5), old_ttl=3600)
    assert 0 < client.ttl(f"ltr:itemset:s:{v1}:meta") <= 60  # never later than it was


def test_a_ttl_redis_cannot_take_is_refused_before_anything(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for huge in ("99999999999999999999", "9223372036854775807"):
        monkeypatch.setenv(OLD_TTL_ENV, huge)
        with pytest.raises(RetentionError, match="at most"):
            old_version_ttl()
    with pytest.raises(RetentionError, match="must be 0 to"):
        old_version_ttl(10**12)
