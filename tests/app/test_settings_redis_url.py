"""LTR_REDIS_URL is checked when the settings are read: a malformed one stops `ltr serve`
(tests/trainer/commands/test_serve_redis_url.py) instead of serving every answer degraded."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.settings import Settings


@pytest.mark.parametrize(
    "url",
    [
        "redis://localhost:6379/0",
        "rediss://:pw@cache:6380",
        "unix:///run/redis.sock",
        "unix:///run/redis.sock?password=pw&db=2",
        "redis://cache/0?socket_timeout=1.5&health_check_interval=30",
    ],
)
def test_usable_urls_are_taken(url: str) -> None:
    assert Settings(redis_url=url).redis_url == url


def test_a_blank_url_is_no_redis() -> None:
    assert Settings(redis_url=" ").redis_url is None


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("notaurl", "got no scheme"),
        ("localhost:6379", "got localhost://"),
        ("redis://:hunter2@cache:6379/zero", "the database 'zero' is not a number"),
        ("redis://:hunter2@127.0.0.1:99999/0", "the port is not a number from 0 to 65535"),
        ("redis://cache:port/0", "the port is not a number from 0 to 65535"),
        # redis-py took these until the first command, then raised from inside (a traceback
        # and exit 3 from `ltr serve`).
        ("redis://h/0?password=hunter2&foo=bar", "the option 'foo' in its query is not one"),
        ("redis://h/0?socket_timeout=soon", "Invalid value for 'socket_timeout'"),
        # Taken, then each first connect failed ("Timeout value must be non-negative").
        ("redis://:hunter2@h/0?socket_timeout=-1", "socket_timeout=-1.0 in its query is not a"),
        ("redis://h/0?socket_connect_timeout=nan", "socket_connect_timeout=nan in its query"),
        ("redis://h/0?socket_timeout=0", "socket_timeout=0.0 in its query is not a positive"),
        ("redis://h/0?socket_read_size=-5", "socket_read_size=-5 in its query is not a"),
        ("redis://h/0?health_check_interval=-1", "health_check_interval=-1 in its query is neg"),
        # An OverflowError and a ConnectionError traceback at the first connect.
        ("redis://h/0?socket_read_size=99999999999999999999", "socket_read_size=9999999999"),
        ("redis://h/0?protocol=4", "the option protocol=4 in its query is not 2 or 3"),
    ],
)
def test_a_malformed_url_is_refused_without_showing_it(url: str, problem: str) -> None:
    with pytest.raises(ValidationError) as caught:
        Settings(redis_url=url)
    error = caught.value.errors()[0]
    assert error["loc"] == ("redis_url",) and problem in error["msg"]
    assert "hunter2" not in error["msg"]
