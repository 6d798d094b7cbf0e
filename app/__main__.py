"""`python -m app`: serve with the settings from `LTR_*` variables (host, port, workers)."""

from __future__ import annotations

import sys

import uvicorn
from pydantic import ValidationError

from app.api.http_protocol import uvicorn_options
from app.log_config import log_config
from app.metrics import shared_across_workers
from app.numba_cache_seed import seed_numba_cache
from app.settings import Settings, settings_problem
from app.supervisor import supervised


def main() -> None:
    try:
        settings = Settings()
    except ValidationError as exc:  # pydantic's text shows the value: a URL's password
        sys.exit(f"error: {settings_problem(exc)}")
    seed_numba_cache(settings.numba_cache_seed)
    with shared_across_workers(settings.workers), supervised():
        uvicorn.run(
            "app.main:create_app",
            factory=True,
            host=settings.host,
            port=settings.port,
            workers=settings.workers,
            log_config=log_config(),
            **uvicorn_options(settings),
        )


if __name__ == "__main__":
    main()
