"""Set names and versions become Redis keys and SCAN patterns: only NAME_PATTERN names, every
pattern escaped; Redis URLs shown without their password."""

from __future__ import annotations

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
from trainer.features.set_keys import SetNameError

NAMES = ["x", "y"]


def test_a_glob_set_name_is_refused_by_every_command(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """`p*` was accepted, and its expiry of old versions put a TTL on the live items of `prod`."""
    client = redis.Redis.from_url(redis_server.url)
    live = push_item_set(client, "ltr:", "prod", item_table(5, NAMES, seed=1)).version
    items = tmp_path / "items.parquet"
    pq.write_table(pa.table({"doc_id": ["a"], "x": [1.0]}), items)
    url = ["--redis-url", redis_server.url]
    commands = [
        ["features", "push", "--set", "p*", "--items", str(items), *url],
        ["features", "inspect", "redis:p*", *url],
        ["features", "inspect", "redis:prod@v*", *url],
        ["features", "diff", "redis:p*", str(items), *url],
        ["features", "rollback", "--set", "p*", "--to", live, *url],
        ["features", "rollback", "--set", "prod", "--to", "v[0-9]*", *url],
    ]
    for args in commands:
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        assert result.stderr.startswith("error: ") and "must match" in result.stderr, args
    assert client.ttl(f"ltr:item:prod:{live}:d0") == -1 and client.keys("*p\\**") == []
    with pytest.raises(SetNameError, match=r"item set name 'p\*' must match"):
        push_item_set(client, "ltr:", "p*", item_table(5, NAMES))
    with pytest.raises(SetNameError, match=r"version name 'v\?' must match"):
        switch_version(client, "ltr:", "prod", "v?")


def test_a_prefix_with_glob_characters_matches_only_its_own_keys(
    redis_server: RedisServer,
) -> None:
    """Expiring the old versions under prefix `l*` scanned `l*item:prod:v…:*`, which also
    matched the same version's live keys under `ltr:`."""
    client = redis.Redis.from_url(redis_server.url)
    tables = [item_table(5, NAMES, seed=s) for s in (1, 2, 3)]
    live = push_item_set(client, "ltr:", "prod", tables[0]).version
    for table in tables:
        push_item_set(client, "l*", "prod", table)
    assert client.ttl(f"l*item:prod:{live}:d0") > 0  # its own old version expires...
    assert client.ttl(f"ltr:item:prod:{live}:d0") == -1  # ...not another prefix's live one


def test_a_password_is_never_shown(tmp_path: Path) -> None:
    items = tmp_path / "items.parquet"
    pq.write_table(pa.table({"doc_id": ["a"], "x": [1.0]}), items)
    for url in ("redis://:s3cret@127.0.0.1:1/0", "redis://bob:s3cret@127.0.0.1:1/0"):
        args = ["features", "push", "--set", "s", "--items", str(items), "--redis-url", url]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2 and "s3cret" not in result.output
        assert ":***@127.0.0.1:1/0: " in result.stderr


def test_a_redis_that_wants_a_password_says_so(redis_server: RedisServer) -> None:
    redis.Redis.from_url(redis_server.url).config_set("requirepass", "s3cret")
    url = ["--redis-url", redis_server.url]
    result = CliRunner().invoke(app, ["features", "inspect", "redis:cat", *url])
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        f"error: cannot reach Redis at {redis_server.url}: it needs a password "
        "(redis://:PASSWORD@host:port/db)"
    )
    wrong = f"redis://:nope@127.0.0.1:{redis_server.port}/0"
    result = CliRunner().invoke(app, ["features", "inspect", "redis:cat", "--redis-url", wrong])
    assert result.exit_code == 2 and "nope" not in result.stderr
    assert "invalid username-password pair" in result.stderr


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://127.0.0.1:1/0?password=hunter2", "redis://127.0.0.1:1/0?password=***"),
        ("unix:///run/r.sock?db=2&Password=hunter2", "unix:///run/r.sock?db=2&Password=***"),
        ("redis://u:hunter2@h/0?password=hunter2#x", "redis://u:***@h/0?password=***#x"),
        ("unix:///run/r.sock", "unix:///run/r.sock"),
    ],
)
def test_a_password_in_the_query_is_hidden_too(url: str, shown: str) -> None:
    """redis-py takes `?password=` (for a unix socket, the only way): it was printed whole."""
    from trainer.redis_publish import redacted

    assert redacted(url) == shown


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (["--redis-url", "redis://:hunter2@h/0?bogus=1"], "--redis-url: the option 'bogus'"),
        ([], "LTR_REDIS_URL: the option socket_timeout=-1.0 in its query is not a positive"),
    ],
)
def test_a_malformed_url_is_not_called_unreachable(
    monkeypatch: pytest.MonkeyPatch, given: list[str], said: str
) -> None:
    """It read "cannot reach Redis at ...", as if Redis were down."""
    monkeypatch.setenv("LTR_REDIS_URL", "redis://:hunter2@h/0?socket_timeout=-1")
    result = CliRunner().invoke(app, ["features", "inspect", "redis:cat", *given])
    assert result.exit_code == 2 and "hunter2" not in result.output
    assert result.stderr.strip().startswith(f"error: {said}")
