"""Every documented /rerank example, as written, against what `make run` serves: the README's
quick start, docs/API.md, docs/examples/ and the OpenAPI schema behind /docs ("Try it out").
Each must answer 200 and visibly rerank: different scores, an order other than the input's."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.conftest import DemoServer

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.integration, pytest.mark.slow]


def readme_bodies() -> list[dict[str, Any]]:
    """The `-d '...'` bodies of the README's curl commands to /rerank."""
    text = (ROOT / "README.md").read_text()
    return [json.loads(b) for b in re.findall(r"/rerank [^\n]*-d '(.*?)'", text, flags=re.S)]


def api_md_bodies() -> list[dict[str, Any]]:
    """docs/API.md's JSON blocks that are requests (they have candidates)."""
    text = (ROOT / "docs" / "API.md").read_text()
    blocks = [json.loads(b) for b in re.findall(r"^```json\n(.*?)^```", text, flags=re.M | re.S)]
    return [b for b in blocks if "candidates" in b]


def file_bodies() -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted((ROOT / "docs" / "examples").glob("*.json"))]


def openapi_bodies(url: str) -> list[dict[str, Any]]:
    schema = httpx.get(f"{url}/openapi.json").json()
    content = schema["paths"]["/rerank"]["post"]["requestBody"]["content"]["application/json"]
    bodies = [content["example"]] if "example" in content else []
    bodies += list(content.get("examples", {}).values())
    bodies += schema["components"]["schemas"]["RerankRequest"].get("examples", [])
    return bodies


def assert_visibly_reranked(url: str, body: dict[str, Any]) -> None:
    response = httpx.post(f"{url}/rerank", json=body, timeout=10)
    assert response.status_code == 200, (body, response.text)
    results = response.json()["results"]
    scores = [r["score"] for r in results]
    assert len(set(scores)) == len(scores), f"tied scores: {results}"
    given = [c["id"] for c in body["candidates"]]
    assert [r["id"] for r in results] != given[: len(results)], f"input order kept: {results}"


def test_the_documents_have_examples() -> None:
    assert readme_bodies() and api_md_bodies() and file_bodies()


@pytest.mark.parametrize(
    "source", ["README.md", "docs/API.md", "docs/examples", "openapi"], ids=str
)
def test_every_example_reranks_the_demo_model(demo_server: DemoServer, source: str) -> None:
    bodies = {
        "README.md": readme_bodies,
        "docs/API.md": api_md_bodies,
        "docs/examples": file_bodies,
        "openapi": lambda: openapi_bodies(demo_server.url),
    }[source]()
    assert bodies, f"no /rerank example found in {source}"
    for body in bodies:
        assert_visibly_reranked(demo_server.url, body)


def test_docs_page_renders_from_local_assets(demo_server: DemoServer) -> None:
    page = httpx.get(f"{demo_server.url}/docs").text
    assets = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert assets and all(a.startswith("/") for a in assets), assets
    for asset in assets:
        response = httpx.get(demo_server.url + asset)
        assert response.status_code == 200 and len(response.content) > 1000, asset
    bundle = httpx.get(f"{demo_server.url}/docs-assets/swagger-ui-bundle.js").text
    assert "SwaggerUIBundle" in bundle
