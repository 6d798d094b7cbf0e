"""Settings that must agree with the code's own defaults, and pairs refused at start."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from pydantic import ValidationError
from typer.testing import CliRunner

from app.scoring.compiled import DEFAULT_PARALLEL_MIN_ROWS
from app.settings import Settings
from trainer.cli import app as cli_app


def test_one_default_for_splitting_a_request_over_threads() -> None:
    assert Settings().parallel_min_rows == DEFAULT_PARALLEL_MIN_ROWS


@pytest.mark.parametrize("url", [None, "", "  "])
def test_forcing_the_redis_item_store_without_redis_is_refused(url: str | None) -> None:
    """LTR_ITEM_STORE=redis served from the snapshot, quietly, when LTR_REDIS_URL was unset (a
    held-out trial): an operator who forces Redis gets an error at start instead."""
    with pytest.raises(ValidationError, match="LTR_ITEM_STORE=redis needs LTR_REDIS_URL"):
        Settings(item_store="redis", redis_url=url)
    assert Settings(item_store="redis", redis_url="redis://x:6379/0").item_store == "redis"
    assert Settings(item_store="auto", redis_url=url).redis_url is None


def test_ltr_serve_refuses_it_in_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    started: list[Any] = []
    monkeypatch.setattr(uvicorn, "run", lambda *args, **kwargs: started.append(kwargs))
    monkeypatch.delenv("LTR_REDIS_URL", raising=False)
    monkeypatch.setattr(os, "environ", dict(os.environ))  # what `ltr serve` sets stays here
    args = ["serve", "--registry", str(tmp_path), "--port", "1"]
    result = CliRunner().invoke(cli_app, args, env={"LTR_ITEM_STORE": "redis"})
    assert result.exit_code == 2 and not started, result.output
    assert result.stderr.startswith("error: LTR_ITEM_STORE=redis needs LTR_REDIS_URL")
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_host_with_surrounding_spaces_is_read_without_them() -> None:
    """A templated env file's "0.0.0.0 " failed at bind with uvicorn's "Name or service not
    known", naming no setting."""
    assert Settings(host=" 0.0.0.0 ").host == "0.0.0.0"


def test_a_body_buffer_too_small_for_one_largest_body_is_refused() -> None:
    """8 MiB with 32 MiB bodies was raised to 32 MiB quietly, and a 32 MiB body still never
    fitted (bodies of 1 MiB or more may fill three quarters of the buffer)."""
    with pytest.raises(ValidationError, match=r"must be at least 44739243 \(bodies of 1 MiB"):
        Settings(max_buffered_body_bytes=8 * 2**20)
    assert Settings(max_buffered_body_bytes=44739243).max_buffered_body_bytes == 44739243
    small = Settings(max_body_bytes=200_000, max_buffered_body_bytes=200_000)
    assert small.max_buffered_body_bytes == 200_000  # no body of it is a large one
