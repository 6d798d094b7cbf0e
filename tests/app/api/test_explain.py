"""`explain` in /rerank: TreeSHAP for trees, occlusion for networks, on the returned results."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.explain.treeshap import TreeShapExplainer
from tests.app.api.conftest import NF, ClientFactory
from tests.support import feature_names, publish, random_ensemble, with_covers
from tests.support.onnx_models import publish_linear_network

RNG = np.random.default_rng(16)
# The first explanation in a process loads the kernel: far longer than the default 100 ms.
LONG_BUDGET = {"request_budget_ms": 120_000.0, "max_request_budget_ms": 120_000.0}


def random_rows(n: int) -> np.ndarray:
    rows = RNG.normal(0, 1, (n, NF)).round(3).astype(np.float32)
    rows[RNG.random((n, NF)) < 0.2] = np.nan
    return rows


def _candidates(rows: np.ndarray) -> list[dict]:
    return [
        {"id": f"d{i}", "features": [None if np.isnan(v) else float(v) for v in row]}
        for i, row in enumerate(rows)
    ]


def test_tree_explanations_are_treeshap_of_the_returned_results(
    make_client: ClientFactory, registry_dir: Path
) -> None:
    model = with_covers(random_ensemble(NF, num_trees=10, depth=3, seed=11))
    publish(registry_dir, model, name="shap", version="v1")
    rows = random_rows(12).astype(np.float32)
    rows[2, 1] = np.nan
    with make_client(**LONG_BUDGET) as client:
        body = {"model": "shap", "candidates": _candidates(rows), "top_k": 4}
        got = client.post("/rerank", json={**body, "explain": {"top": 3}}).json()
    phi = TreeShapExplainer(model).contributions(rows)
    assert len(got["results"]) == 4 and "explanation_error" not in got
    for result in got["results"]:
        i = int(result["id"][1:])
        ex = result["explanation"]
        assert ex["method"] == "treeshap"
        assert ex["expected_value"] == pytest.approx(phi[i, -1], abs=1e-12)
        assert len(ex["features"]) <= 3
        shown = [feature_names(NF).index(f["name"]) for f in ex["features"]]
        magnitudes = np.abs(phi[i, :NF])
        assert sorted(magnitudes[shown].tolist(), reverse=True) == magnitudes[shown].tolist()
        assert magnitudes[shown].min() >= np.sort(magnitudes)[-len(shown)]
        for f, j in zip(ex["features"], shown, strict=True):
            assert f["contribution"] == pytest.approx(phi[i, j], abs=1e-12)
            assert f["value"] == (None if np.isnan(rows[i, j]) else float(str(rows[i, j])))
        total = ex["expected_value"] + sum(f["contribution"] for f in ex["features"]) + ex["rest"]
        assert total == pytest.approx(result["score"], abs=1e-9)


def test_explain_true_shows_five_and_is_limited_to_the_configured_results(
    make_client: ClientFactory, registry_dir: Path
) -> None:
    publish(registry_dir, with_covers(random_ensemble(NF, seed=5)), name="shap", version="v1")
    rows = random_rows(9).astype(np.float32)
    with make_client(explain_max_results=2, **LONG_BUDGET) as client:
        got = client.post(
            "/rerank", json={"model": "shap", "candidates": _candidates(rows), "explain": True}
        ).json()
    assert [("explanation" in r) for r in got["results"]] == [True, True] + [False] * 7
    assert all(len(r["explanation"]["features"]) <= 5 for r in got["results"][:2])


def test_values_beyond_float32_are_shown_as_infinities_not_as_missing(
    make_client: ClientFactory, registry_dir: Path
) -> None:
    ensemble = with_covers(random_ensemble(NF, num_trees=10, depth=3, seed=11))
    publish(registry_dir, ensemble, name="shap", version="v1")
    values = [1e308, -3.5e38, None, 0.25] + [0.0] * (NF - 4)
    body = {
        "model": "shap",
        "candidates": [{"id": "a", "features": values}],
        "explain": {"top": NF},
    }
    with make_client(**LONG_BUDGET) as client:
        got = client.post("/rerank", json=body).json()["results"][0]
    shown = {f["name"]: f["value"] for f in got["explanation"]["features"]}
    names = feature_names(NF)
    assert got["missing_features"] == 1
    expected = {names[0]: "Infinity", names[1]: "-Infinity", names[2]: None, names[3]: 0.25}
    assert {k: v for k, v in shown.items() if k in expected} == {
        k: v for k, v in expected.items() if k in shown
    }
    assert names[0] in shown or names[1] in shown  # the trees split on them: some contribute


def test_a_dump_without_covers_says_so_and_still_ranks(client: TestClient) -> None:
    rows = random_rows(3).astype(np.float32)
    body = {"candidates": _candidates(rows), "explain": True}
    got = client.post("/rerank", json=body, headers={"x-request-timeout-ms": "10000"})
    assert got.status_code == 200
    body = got.json()
    assert "node covers" in body["explanation_error"]
    assert len(body["results"]) == 3 and "explanation" not in body["results"][0]


def test_network_explanations_are_occlusion_against_the_mean(
    make_client: ClientFactory, registry_dir: Path
) -> None:
    weights = np.array([2.0, -1.0, 0.5, 0.0, 3.0], np.float32)
    publish_linear_network(registry_dir, "net", weights, feature_names(NF))
    rows = random_rows(4).astype(np.float32)
    rows[0, 4] = np.nan
    with make_client(**LONG_BUDGET) as client:
        got = client.post(
            "/rerank", json={"model": "net", "candidates": _candidates(rows), "explain": True}
        ).json()
    for result in got["results"]:
        i = int(result["id"][1:])
        ex = result["explanation"]
        assert ex["method"] == "occlusion"
        assert ex["expected_value"] == pytest.approx(0.5 * weights.sum(), rel=1e-5)
        filled = np.where(np.isnan(rows[i]), 0.5, rows[i])
        exact = (filled - 0.5) * weights  # additive: occlusion is exact (Shapley)
        for f in ex["features"]:
            j = feature_names(NF).index(f["name"])
            assert f["contribution"] == pytest.approx(exact[j], abs=1e-5)
        assert ex["rest"] == pytest.approx(0.0, abs=1e-5)
        assert "f3" not in [f["name"] for f in ex["features"]]  # zero weight: never shown


def test_a_nan_score_is_explained_by_the_feature_that_caused_it(
    make_client: ClientFactory, registry_dir: Path
) -> None:
    """inf * 0 inside the network: every contribution was NaN and the features listed were
    the first ones by index, not the one whose value did it."""
    weights = np.array([2.0, -1.0, 0.5, 0.0, 3.0], np.float32)
    publish_linear_network(registry_dir, "net", weights, feature_names(NF))
    candidates = [{"id": "d0", "features": [0.1, 0.2, 0.3, 1e300, 0.4]}]
    with make_client(**LONG_BUDGET) as client:
        body = {"model": "net", "candidates": candidates, "explain": {"top": 1}}
        got = client.post("/rerank", json=body).json()
    (result,) = got["results"]
    assert result["score"] is None and "scores_not_finite" in got["reasons"]
    assert result["explanation"]["features"] == [
        {"name": feature_names(NF)[3], "value": "Infinity", "contribution": None}
    ]


def test_a_version_pruned_from_disk_still_ranks(
    make_client: ClientFactory, registry_dir: Path
) -> None:
    import shutil

    publish(registry_dir, with_covers(random_ensemble(NF, seed=8)), name="gone", version="v1")
    rows = random_rows(3).astype(np.float32)
    with make_client(explain_warm=False, **LONG_BUDGET) as client:  # warmed: already read
        shutil.rmtree(registry_dir / "gone" / "v1")
        body = {"model": "gone", "candidates": _candidates(rows), "explain": True}
        got = client.post("/rerank", json=body)
    assert got.status_code == 200
    assert "cannot be read again" in got.json()["explanation_error"]


def test_explanations_past_the_budget_leave_the_ranking_intact(
    make_client: ClientFactory, registry_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    import app.explain.ranked as ranked

    publish(registry_dir, with_covers(random_ensemble(NF, seed=9)), name="shap", version="v1")
    real = ranked.explain_rows

    def slow(*args, **kwargs):
        time.sleep(3.0)
        return real(*args, **kwargs)

    monkeypatch.setattr(ranked, "explain_rows", slow)
    rows = random_rows(5).astype(np.float32)
    with make_client(request_budget_ms=1500.0) as client:
        body = {"model": "shap", "candidates": _candidates(rows), "explain": True}
        got = client.post("/rerank", json=body).json()
    assert "latency budget" in got["explanation_error"]
    assert len(got["results"]) == 5 and not got["degraded"]
    assert all("explanation" not in r for r in got["results"])


def _wait_until_ready(model, seconds: float) -> bool:
    import time

    from app.explain.ranked import is_ready

    end = time.monotonic() + seconds
    while not is_ready(model) and time.monotonic() < end:
        time.sleep(0.02)
    return is_ready(model)


def test_a_served_tree_model_is_warmed_before_anyone_explains(
    make_client: ClientFactory, registry_dir: Path
) -> None:
    """The explainer is built and the kernel loaded in the background once the model serves,
    so the first explained request fits the default latency budget."""
    publish(registry_dir, with_covers(random_ensemble(NF, seed=12)), name="shap", version="v1")
    rows = random_rows(6).astype(np.float32)
    with make_client() as client:
        model = client.app.state.registry.get("shap")  # type: ignore[attr-defined]
        assert _wait_until_ready(model, 120.0)
        body = {"model": "shap", "candidates": _candidates(rows), "explain": True}
        got = client.post("/rerank", json=body).json()
    assert "explanation_error" not in got
    assert all("explanation" in r for r in got["results"])


def test_without_warm_up_the_explainer_waits_for_the_first_explanation(
    make_client: ClientFactory, registry_dir: Path
) -> None:
    publish(registry_dir, with_covers(random_ensemble(NF, seed=13)), name="shap", version="v1")
    rows = random_rows(3).astype(np.float32)
    with make_client(explain_warm=False, **LONG_BUDGET) as client:
        model = client.app.state.registry.get("shap")  # type: ignore[attr-defined]
        assert not _wait_until_ready(model, 0.5)
        body = {"model": "shap", "candidates": _candidates(rows), "explain": True}
        assert "explanation" in client.post("/rerank", json=body).json()["results"][0]
        assert _wait_until_ready(model, 0.0)
