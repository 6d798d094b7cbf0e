"""`ltr serve` refuses a malformed LTR_REDIS_URL before uvicorn starts: it used to log an
error and serve every answer degraded."""

# ruff: noqa: F811  (`started`, the fixture imported, is each test's parameter)
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.trainer.commands.test_serve import _serve, started  # noqa: F401


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("notaurl", "got no scheme"),
        ("http://:hunter2@cache:6379/0", "got http://"),
        ("redis://:hunter2@cache:6379/zero", "the database 'zero' is not a number"),
    ],
)
def test_a_malformed_redis_url_stops_the_service_naming_the_variable(
    tmp_path: Path,
    started: list[dict[str, Any]],
    url: str,
    message: str,
) -> None:
    result = _serve(tmp_path, 1, LTR_REDIS_URL=url)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and not started, result.stderr
    assert lines[0].startswith("error: LTR_REDIS_URL: ") and message in lines[0]
    assert "hunter2" not in result.stderr
