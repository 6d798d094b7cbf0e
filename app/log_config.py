"""Logging for `ltr serve` and `python -m app`: uvicorn's own configuration plus the service's
loggers (`app.*`: versions served and refused, experiments started and dropped, reload
announcements, Redis and item store faults). uvicorn configures only its own loggers, so
without this the service's INFO lines were dropped and its warnings printed bare, with no
level or origin."""

from __future__ import annotations

import copy
from typing import Any

from uvicorn.config import LOG_LEVELS, LOGGING_CONFIG


def log_config(level: str = "info") -> dict[str, Any]:
    """A `logging.config.dictConfig` for uvicorn.run: its configuration, and `app` at `level`
    (a uvicorn level name) on stderr, each line naming its logger."""
    config = copy.deepcopy(LOGGING_CONFIG)
    config["formatters"]["service"] = {
        "()": "uvicorn.logging.DefaultFormatter",
        "fmt": "%(levelprefix)s %(name)s: %(message)s",
        "use_colors": None,
    }
    config["handlers"]["service"] = {
        "formatter": "service",
        "class": "logging.StreamHandler",
        "stream": "ext://sys.stderr",
    }
    config["loggers"]["app"] = {
        "handlers": ["service"],
        "level": LOG_LEVELS[level.lower()],
        "propagate": False,
    }
    # One line per malformed request, which any client can send by the thousand: at most one
    # a minute of each (app.log_throttle).
    config.setdefault("filters", {})["client_repeats"] = {
        "()": "app.log_throttle.ThrottleFilter",
        "messages": CLIENT_REPEATED,
        "dropped": MISLEADING,
    }
    config["loggers"]["uvicorn.error"]["filters"] = ["client_repeats"]
    return config


# uvicorn's warnings (uvicorn.protocols.http.httptools_impl) about what a client sent.
CLIENT_REPEATED = [
    "Invalid HTTP request received.",
    "Unsupported upgrade request.",
]
# What uvicorn adds to an unsupported upgrade's warning when it serves no WebSocket protocol,
# as the service chooses (app.api.http_protocol.uvicorn_options): not advice to follow.
MISLEADING = [
    "No supported WebSocket library detected. Please use \"pip install 'uvicorn[standard]'\", "
    "or install 'websockets' or 'wsproto' manually.",
]
