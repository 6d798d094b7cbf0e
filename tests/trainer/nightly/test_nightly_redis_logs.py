"""`[data] source = "logs"` reads the service's Redis streams from a redis:// URL in `dir` (or
`--data`), as `ltr dataset --from-logs` does; a relative path still means the working directory."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest
import redis.asyncio as aioredis
from typer.testing import CliRunner

from app.impressions.sink import RedisStreamWriter
from tests.support.redis_server import RedisServer
from tests.trainer.clicks.conftest import write_pbm_log
from tests.trainer.nightly.conftest import write_logs_config
from trainer.cli import app
from trainer.commands.errors import CommandError
from trainer.nightly.config import load_config


def _push(url: str, log_file: Path, prefix: str) -> None:
    """The log's records into Redis through the service's own writer (streams + imp: keys)."""
    records = [orjson.loads(line) for line in log_file.read_bytes().splitlines()]

    async def write() -> None:
        writer = RedisStreamWriter(aioredis.Redis.from_url(url), prefix, 100_000, 3600)
        try:
            await writer.write(records)
        finally:
            await writer.close()

    asyncio.run(write())


@pytest.mark.parametrize("prefix", ["ltr:", None])
def test_nightly_reads_the_logs_from_a_redis_url(
    redis_server: RedisServer, tmp_path: Path, prefix: str | None
) -> None:
    log_file = tmp_path / "clicks.jsonl"
    write_pbm_log(log_file, 240, docs=6, seed=3)
    _push(redis_server.url, log_file, prefix or "ltr:")  # no ?prefix=: the default, ltr:
    url = redis_server.url + ("" if prefix is None else f"?prefix={prefix}")
    config = write_logs_config(tmp_path, url, "from-redis")
    assert load_config(config).data.dir == url  # as written: not redis:/127.0.0.1...
    result = CliRunner().invoke(app, ["nightly", "--config", str(config), "--json"])
    assert result.exit_code == 0, result.output
    out = orjson.loads(result.stdout.splitlines()[-1])
    assert out["status"] == "published"
    version_dir = tmp_path / "registry" / "from-redis" / out["version"]
    report = orjson.loads((version_dir / "report.json").read_bytes())
    assert report["data"]["source"] == f"logs in {url}"
    # The same lists as the JSONL file they came from: 240, a quarter held out.
    assert report["data"]["holdout_queries"] == 60
    assert sum(report["data"][f"{s}_queries"] for s in ("train", "valid", "holdout")) == 240


def test_the_data_flag_takes_a_redis_url(redis_server: RedisServer, tmp_path: Path) -> None:
    log_file = tmp_path / "clicks.jsonl"
    write_pbm_log(log_file, 240, docs=6, seed=4)
    _push(redis_server.url, log_file, "ltr:")
    config = write_logs_config(tmp_path, str(tmp_path / "absent.jsonl"), "from-redis")
    url = f"{redis_server.url}?prefix=ltr:"
    args = ["nightly", "--config", str(config), "--data", url, "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert orjson.loads(result.stdout.splitlines()[-1])["status"] == "published"


def test_a_relative_dir_is_still_a_path_under_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config = load_config(write_logs_config(tmp_path, "logs/clicks.jsonl", "m"))
    assert config.data.dir == Path("logs/clicks.jsonl")
    assert Path(config.data.dir).resolve() == tmp_path / "logs" / "clicks.jsonl"
    files = load_config(None, {"data.dir": "data"})
    assert files.data.dir == Path("data") and Path(files.data.dir).resolve() == tmp_path / "data"


def test_a_url_where_nothing_reads_one_is_refused_at_load(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match=r"data\.dir is a s3:// URL: the logs are read"):
        load_config(write_logs_config(tmp_path, "s3://bucket/logs", "m"))
    files = {"data.dir": "redis://h:6379/0"}
    with pytest.raises(CommandError, match=r"data\.source = 'files' reads a local directory"):
        load_config(None, files)
