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


def test_python_m_app_refuses_it_in_one_line_without_the_password(tmp_path: Path) -> None:
    """`python -m app` printed pydantic's traceback, whose input_value showed the URL."""
    import os
    import subprocess
    import sys

    env = {
        **os.environ,
        "LTR_REGISTRY": str(tmp_path),
        "LTR_REDIS_URL": "redis://:hunter2@127.0.0.1:1/0?socket_timeout=0",
    }
    done = subprocess.run(
        [sys.executable, "-m", "app"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "error: LTR_REDIS_URL: the option socket_timeout=0.0 in its query is not "
        "a positive finite number"
    ]
