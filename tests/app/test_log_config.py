"""The service's loggers in `ltr serve`'s logging configuration, and its --log-level check."""

from __future__ import annotations

import logging
import logging.config

import pytest
from typer.testing import CliRunner
from uvicorn.config import LOG_LEVELS

from app.log_config import log_config
from trainer.cli import app as cli_app
from trainer.commands.serve import LOG_LEVEL_NAMES


@pytest.fixture
def restored_app_logger():  # type: ignore[no-untyped-def]
    logger = logging.getLogger("app")
    saved = (logger.handlers[:], logger.level, logger.propagate, logger.disabled)
    yield logger
    logger.handlers[:], logger.level, logger.propagate, logger.disabled = saved


def test_app_lines_are_emitted_with_level_and_logger(
    restored_app_logger: logging.Logger, capsys: pytest.CaptureFixture[str]
) -> None:
    config = log_config("info")
    # The service's part alone: uvicorn's loggers stay as the other tests expect them.
    logging.config.dictConfig(
        {
            "version": 1,
            "disable_existing_loggers": False,
            "formatters": {"service": config["formatters"]["service"]},
            "handlers": {"service": config["handlers"]["service"]},
            "loggers": {"app": config["loggers"]["app"]},
        }
    )
    logging.getLogger("app.registry.model_registry").info("serving m/v2 (was v1)")
    logging.getLogger("app.registry.model_registry").debug("not at info")
    err = capsys.readouterr().err
    assert "INFO" in err and "app.registry.model_registry: serving m/v2 (was v1)" in err
    assert "not at info" not in err


def test_levels_follow_uvicorns_names() -> None:
    assert set(LOG_LEVEL_NAMES) == set(LOG_LEVELS)  # what `ltr serve --log-level` accepts
    assert log_config("warning")["loggers"]["app"]["level"] == logging.WARNING
    assert log_config("TRACE")["loggers"]["app"]["level"] == 5  # uvicorn's trace level


def test_an_unknown_log_level_is_refused_before_serving() -> None:
    result = CliRunner().invoke(cli_app, ["serve", "--log-level", "loud"])
    assert result.exit_code != 0
    assert "--log-level 'loud': expected one of critical, error, warning" in result.output
