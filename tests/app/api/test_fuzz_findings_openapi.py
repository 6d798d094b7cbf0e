"""Fuzz trial finding: /openapi.json disagreed with the answers. An explanation's
`contribution` and `rest` can be null and a feature `value` "Infinity" / "-Infinity" (a sent
1e300) where the schema said number; `"candidates": []` is a 422 without `minItems: 1`;
`"explain": null` is accepted though the schema said boolean or object; the middleware's 400
(`Upgrade`) and 501 (a transfer coding) for /rerank and /feedback were not among their
responses. The document now says what is sent and taken (the requests' validation is
unchanged)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from tests.app.api.conftest import NF, ClientFactory
from tests.support import feature_names
from tests.support.onnx_models import publish_linear_network

ROW = [0.5] * NF


@pytest.fixture(scope="module")
def spec(shared_client: TestClient) -> dict[str, Any]:
    return shared_client.get("/openapi.json").json()


def _types(schema: dict[str, Any]) -> list[Any]:
    return [s.get("type", s.get("$ref")) for s in schema.get("anyOf", [schema])]


def test_explanations_document_nulls_and_infinities(spec: dict[str, Any]) -> None:
    schemas = spec["components"]["schemas"]
    feature = schemas["FeatureContribution"]["properties"]
    assert {"number", "null"} <= set(_types(feature["contribution"]))
    assert {"number", "string", "null"} <= set(_types(feature["value"]))
    (strings,) = [s for s in feature["value"]["anyOf"] if s.get("type") == "string"]
    assert sorted(strings["enum"]) == ["-Infinity", "Infinity"]
    assert {"number", "null"} <= set(_types(schemas["Explanation"]["properties"]["rest"]))


def test_the_request_schema_says_what_is_taken(spec: dict[str, Any]) -> None:
    body = spec["components"]["schemas"]["RerankRequest"]["properties"]
    assert body["candidates"]["minItems"] == 1
    explain = set(_types(body["explain"]))
    assert {"boolean", "null", "#/components/schemas/ExplainOptions"} <= explain


def test_the_middleware_answers_are_documented_with_the_error_shape(
    spec: dict[str, Any],
) -> None:
    for path in ("/rerank", "/feedback"):
        responses = spec["paths"][path]["post"]["responses"]
        for status in ("400", "408", "413", "415", "501"):
            schema = responses[status]["content"]["application/json"]["schema"]
            assert schema["$ref"].endswith("/MessageResponse"), (path, status)
    message = spec["components"]["schemas"]["MessageResponse"]
    assert message["properties"]["detail"]["type"] == "string"
    assert spec["paths"]["/admin/reload"]["post"]["responses"]["404"]


def test_what_the_schema_now_says_is_what_the_service_does(shared_client: TestClient) -> None:
    """The request side: validation itself did not change."""
    resp = shared_client.post("/rerank", json={"candidates": []})
    assert resp.status_code == 422
    one = [{"id": "a", "features": ROW}]
    resp = shared_client.post("/rerank", json={"candidates": one, "explain": None})
    assert resp.status_code == 200 and "explanation" not in resp.json()["results"][0]
    resp = shared_client.post("/rerank", json={"candidates": one, "explain": "yes"})
    assert resp.status_code == 422
    headers = {"upgrade": "h2c", "connection": "Upgrade"}
    resp = shared_client.post("/rerank", json={"candidates": one}, headers=headers)
    assert resp.status_code == 400 and resp.json()["detail"].startswith("Upgrade 'h2c'")


def _valid(value: Any, schema: dict[str, Any], spec: dict[str, Any]) -> bool:
    """Whether `value` fits `schema` (the keywords these schemas use)."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return _valid(value, spec["components"]["schemas"][name], spec)
    if "anyOf" in schema:
        return any(_valid(value, option, spec) for option in schema["anyOf"])
    if "enum" in schema and value not in schema["enum"]:
        return False
    kind = schema.get("type")
    checks = {
        "null": value is None,
        "boolean": isinstance(value, bool),
        "integer": isinstance(value, int) and not isinstance(value, bool),
        "number": isinstance(value, int | float) and not isinstance(value, bool),
        "string": isinstance(value, str),
        "array": isinstance(value, list),
        "object": isinstance(value, dict),
    }
    if kind is not None and not checks[kind]:
        return False
    if kind == "array":
        return all(_valid(item, schema.get("items", {}), spec) for item in value)
    if kind == "object":
        if not set(schema.get("required", ())) <= set(value):
            return False
        props = schema.get("properties", {})
        return all(_valid(v, props[k], spec) for k, v in value.items() if k in props)
    return True


# The occlusion of an infinite input subtracts infinities (NaN: a null contribution).
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_an_explained_answer_with_infinite_values_fits_the_document(
    make_client: ClientFactory, registry_dir: Path
) -> None:
    names = feature_names(NF)
    weights = np.zeros(NF, np.float32)
    weights[0], weights[1] = 4.0, 1.0
    publish_linear_network(registry_dir, "net", weights, names)
    candidates = [
        {"id": "a", "features": [1e300, 0.5, None, 0.1, 0.1]},
        {"id": "b", "features": [-1e300, 0.5, 0.2, 0.1, 0.1]},
    ]
    with make_client() as client:
        spec = client.get("/openapi.json").json()
        body = {"model": "net", "explain": {"top": 2}, "candidates": candidates}
        answer = client.post("/rerank", json=body).json()
    explanation = answer["results"][0]["explanation"]
    shown = {f["name"]: f for f in explanation["features"]}
    assert shown[names[0]]["value"] in ("Infinity", "-Infinity")
    assert shown[names[0]]["contribution"] is None and explanation["rest"] is None
    assert _valid(answer, spec["components"]["schemas"]["RerankResponse"], spec)
