"""`/docs` (Swagger UI) and `/redoc` from assets served by the service itself, so the API docs
render on a machine without internet access. The JavaScript and CSS come from the
`fastapi-offline` package's static folder; the pages are FastAPI's own."""

from __future__ import annotations

import importlib.resources

from fastapi import FastAPI
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.staticfiles import StaticFiles
from starlette.requests import Request
from starlette.responses import HTMLResponse

ASSETS_URL = "/docs-assets"
ASSETS_DIR = importlib.resources.files("fastapi_offline") / "static"


def install_offline_docs(app: FastAPI) -> None:
    """Serve `/docs`, its OAuth2 redirect page and `/redoc`; `app` must be created with
    `docs_url=None, redoc_url=None` (FastAPI's own pages load their assets from a CDN)."""
    app.mount(ASSETS_URL, StaticFiles(directory=str(ASSETS_DIR)), name="docs-assets")
    redirect_url = app.swagger_ui_oauth2_redirect_url or "/docs/oauth2-redirect"

    # The pages read the app from the request: FastAPI caches endpoints in a module-level LRU
    # cache, and a closure over `app` kept every app a process ever made alive (64-128 MB each
    # in the test suite, whose pytest workers grew to 10 GB).
    @app.get("/docs", include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        root, app = request.scope.get("root_path", ""), request.app
        return get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title} - Swagger UI",
            oauth2_redirect_url=f"{root}{redirect_url}",
            swagger_js_url=f"{root}{ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS_URL}/favicon.png",
            swagger_ui_parameters=app.swagger_ui_parameters,
        )

    @app.get(redirect_url, include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        root, app = request.scope.get("root_path", ""), request.app
        return get_redoc_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{root}{ASSETS_URL}/redoc.standalone.js",
            redoc_favicon_url=f"{root}{ASSETS_URL}/favicon.png",
            with_google_fonts=False,
        )
