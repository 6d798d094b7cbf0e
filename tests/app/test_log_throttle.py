"""Lines a client or an outage repeats at will are written at most once per interval each."""

from __future__ import annotations

import logging

import pytest

from app.log_config import CLIENT_REPEATED, MISLEADING, log_config
from app.log_throttle import Throttle, ThrottleFilter


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_kind_passes_once_per_interval_with_the_count_held_back() -> None:
    clock = Clock()
    throttle = Throttle(60.0, clock)
    assert throttle.admit("a") == 0
    assert [throttle.admit("a") for _ in range(5)] == [None] * 5
    assert throttle.admit("b") == 0  # each kind on its own
    clock.now += 60.0
    assert throttle.admit("a") == 5
    assert throttle.admit("a") is None


def test_the_filter_holds_back_its_messages_only(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("tests.log_throttle")
    throttle = ThrottleFilter(["Invalid HTTP request received."], interval_s=60.0)
    logger.addFilter(throttle)
    try:
        with caplog.at_level(logging.WARNING, logger=logger.name):
            for _ in range(1000):
                logger.warning("Invalid HTTP request received.")
            logger.warning("something else")
            logger.warning("something else")
            throttle.throttle._last.clear()  # the interval has passed
            logger.warning("Invalid HTTP request received.")
    finally:
        logger.removeFilter(throttle)
    assert [r.getMessage() for r in caplog.records] == [
        "Invalid HTTP request received.",
        "something else",
        "something else",
        "Invalid HTTP request received. (999 more like it in the last 60 s not logged)",
    ]


def test_uvicorns_client_warnings_are_throttled_in_the_service_config() -> None:
    config = log_config()
    assert config["loggers"]["uvicorn.error"]["filters"] == ["client_repeats"]
    assert config["filters"]["client_repeats"]["messages"] == CLIENT_REPEATED
    assert config["filters"]["client_repeats"]["dropped"] == MISLEADING
    # The messages as uvicorn writes them (a changed text would pass unthrottled).
    import inspect

    from uvicorn.protocols.http import httptools_impl

    source = inspect.getsource(httptools_impl)
    assert '"Invalid HTTP request received."' in source
    assert '"Unsupported upgrade request."' in source
    assert MISLEADING[0] in source.replace('\\"', '"')
