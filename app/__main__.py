"""`python -m app`: serve with the settings from `LTR_*` variables (host, port, workers)."""

from __future__ import annotations

import uvicorn

from app.api.http_protocol import uvicorn_options
from app.settings import Settings


def main() -> None:
    settings = Settings()
    uvicorn.run(
        "app.main:create_app",
        factory=True,
        host=settings.host,
        port=settings.port,
        workers=settings.workers,
        **uvicorn_options(settings),
    )


if __name__ == "__main__":
    main()
