"""/rerank inside an experiment: team-draft interleaving or the A/B arm, logged with teams."""

from __future__ import annotations

import datetime as dt
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from app.experiments.spec import TEAM_NAMES, ExperimentSpec
from app.registry.experiments import clear_active, write_active
from app.scoring import beside
from tests.app.api.conftest import NF, TOKEN, ClientFactory
from tests.support import publish, random_ensemble, with_covers


def start(registry: Path, mode: str, traffic: float = 1.0) -> ExperimentSpec:
    publish(registry, random_ensemble(NF, num_trees=10, seed=99), version="v2", current=False)
    spec = ExperimentSpec(
        name=f"e-{mode}",
        model="m",
        control="v1",
        candidate="v2",
        mode=mode,  # type: ignore[arg-type]
        traffic=traffic,
        salt="salt",
        started_at=dt.datetime.now(dt.UTC),
    )
    write_active(registry, spec)
    return spec


def body(n: int = 20, user: str | None = "u1", **extra: object) -> dict[str, object]:
    rng = np.random.default_rng(3)
    rows = rng.standard_normal((n, NF)).round(3).tolist()
    doc: dict[str, object] = {
        "candidates": [{"id": f"d{i}", "features": r} for i, r in enumerate(rows)],
        **extra,
    }
    if user is not None:
        doc["user"] = {"id": user}
    return doc


def read_log(path: Path, count: int) -> list[dict]:
    end = time.monotonic() + 10
    while True:
        lines = path.read_bytes().splitlines() if path.exists() else []
        if len(lines) >= count or time.monotonic() > end:
            return [orjson.loads(line) for line in lines]
        time.sleep(0.02)


def test_interleaved_answer_has_teams_and_is_logged(
    make_client: ClientFactory, registry_dir: Path, tmp_path: Path
) -> None:
    start(registry_dir, "interleave")
    log = tmp_path / "imp.jsonl"
    with make_client(impressions_enabled=True, impressions_jsonl=log) as client:
        plain = client.post("/rerank", json=body(request_id="r1")).json()
        assert "experiment" not in plain and "team" not in plain["results"][0]
        shown = client.post("/rerank", json=body(request_id="r2", explain=True)).json()
        top = client.post("/rerank", json=body(request_id="r3", top_k=5, explain=True)).json()
    assert shown["experiment"]["mode"] == "interleave"
    assert shown["experiment"]["candidate"] == "v2"
    teams = [r["team"] for r in shown["results"]]
    assert {"control", "candidate"} <= set(teams) <= {"control", "candidate", "both"}
    assert len(teams) == 20
    # `both`: the rankings' common prefix and rounds either coin serves alike, which come in
    # whole rounds of two past the prefix (the rule itself: tests/app/experiments).
    shared = teams.count("both")
    prefix = next((i for i, t in enumerate(teams) if t != "both"), len(teams))
    assert all(
        teams[i] == teams[i ^ 1] for i in range(prefix + prefix % 2, 20) if teams[i] == "both"
    )
    assert abs(teams.count("control") - teams.count("candidate")) <= 1 + shared
    assert len({r["id"] for r in shown["results"]}) == 20
    assert [r["rank"] for r in top["results"]] == [1, 2, 3, 4, 5]
    records = {r["request_id"]: r for r in read_log(log, 3) if r["kind"] == "impression"}
    logged = records["r2"]["experiment"]
    assert logged["name"] == "e-interleave"
    assert [TEAM_NAMES[t] for t in logged["teams"]] == teams
    assert records["r2"]["ids"] == [r["id"] for r in shown["results"]]
    assert records["r2"]["version"] == "v1"
    # The same request id is interleaved the same way (the coins come from it).
    assert [r["id"] for r in plain["results"]] == [r["id"] for r in plain["results"]]


def test_interleaving_is_reproducible_per_request(
    make_client: ClientFactory, registry_dir: Path
) -> None:
    start(registry_dir, "interleave")
    with make_client() as client:
        a = client.post("/rerank", json=body(request_id="same", explain=True)).json()
        b = client.post("/rerank", json=body(request_id="same", explain=True)).json()
    assert a["results"] == b["results"]


def test_ab_serves_the_assigned_arm(make_client: ClientFactory, registry_dir: Path) -> None:
    start(registry_dir, "ab")
    with make_client() as client:
        seen = {}
        for i in range(40):
            out = client.post("/rerank", json=body(user=f"user{i}", explain=True)).json()
            again = client.post("/rerank", json=body(user=f"user{i}", explain=True)).json()
            assert out["experiment"]["arm"] == again["experiment"]["arm"]  # stable per user
            version = out["model"]["version"]
            assert version == ("v2" if out["experiment"]["arm"] == "candidate" else "v1")
            scores = [r["score"] for r in out["results"]]
            assert scores == sorted(scores, reverse=True)
            seen[out["experiment"]["arm"]] = version
    assert seen == {"control": "v1", "candidate": "v2"}


@pytest.mark.parametrize("mode", ["interleave", "ab"])
def test_each_result_is_explained_by_the_version_whose_score_it_shows(
    mode: str, make_client: ClientFactory, registry_dir: Path
) -> None:
    # Every feature shown: expected value + contributions is the score of the version that
    # explained it, so `rest` is ~0 only when that version is the one whose score is shown.
    for version, seed in (("v1", 21), ("v2", 22)):
        ensemble = with_covers(random_ensemble(NF, num_trees=10, seed=seed))
        publish(registry_dir, ensemble, name="shap", version=version, current=version == "v1")
    spec = ExperimentSpec(
        name="e-shap",
        model="shap",
        control="v1",
        candidate="v2",
        mode=mode,  # type: ignore[arg-type]
        traffic=1.0,
        salt="salt",
        started_at=dt.datetime.now(dt.UTC),
    )
    write_active(registry_dir, spec)
    with make_client() as client:
        answers = [
            client.post(
                "/rerank", json=body(user=f"user{i}", model="shap", explain={"top": NF})
            ).json()
            for i in range(1 if mode == "interleave" else 12)
        ]
    by_version: dict[str, set[float]] = {}
    for answer in answers:
        for result in answer["results"]:
            explanation = result["explanation"]
            assert abs(explanation["rest"]) < 1e-9, (result["id"], explanation["rest"])
            version = (
                answer["model"]["version"]
                if mode == "ab"
                else ("v1" if result["team"] == "control" else "v2")
            )
            by_version.setdefault(version, set()).add(explanation["expected_value"])
    assert set(by_version) == {"v1", "v2"}
    assert len(by_version["v1"]) == len(by_version["v2"]) == 1  # one expected value each
    assert by_version["v1"] != by_version["v2"]


def test_requests_outside_the_traffic_share_are_not_in_it(
    make_client: ClientFactory, registry_dir: Path
) -> None:
    start(registry_dir, "interleave", traffic=0.3)
    with make_client() as client:
        inside = sum(
            "experiment" in client.post("/rerank", json=body(user=f"x{i}", explain=True)).json()
            for i in range(200)
        )
    assert 30 < inside < 90


def test_models_shows_the_experiment_or_why_not(
    make_client: ClientFactory, registry_dir: Path
) -> None:
    start(registry_dir, "interleave", traffic=0.3)
    with make_client() as client:
        shown = client.get("/models").json()["models"][0]["experiment"]
    assert shown == {
        "name": "e-interleave",
        "mode": "interleave",
        "traffic": 0.3,
        "control": "v1",
        "candidate": "v2",
        "serving": True,
    }
    (registry_dir / "m" / "v2" / "model.json").write_text("{}")  # corrupt candidate
    with make_client() as client:
        models = client.get("/models").json()["models"][0]
        assert models["experiment"]["serving"] is False
        assert "sha256" in models["experiment"]["error"]
        response = client.post("/rerank", json=body(explain=True)).json()
        assert "experiment" not in response and response["model"]["version"] == "v1"


def test_metrics_show_the_experiment_while_it_is_served(
    make_client: ClientFactory, registry_dir: Path
) -> None:
    """The candidate scored requests but no series said so (`ltr_model_loaded_info` names
    the serving CURRENT only)."""
    spec = start(registry_dir, "ab", traffic=0.5)
    series = (
        f'ltr_experiment_serving_info{{candidate="v2",control="v1",experiment="{spec.name}",'
        'mode="ab",model="m"}'
    )
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with make_client() as client:
        assert f"{series} 1.0" in client.get("/metrics").text
        clear_active(registry_dir, "m")
        assert client.post("/admin/reload", headers=auth).status_code == 200
        assert f"{series} 0.0" in client.get("/metrics").text


def _answers_one_thread_then_two(make_client: ClientFactory) -> list[Any]:
    """The same request's answer with the candidate never beside the control, then with it
    beside whenever a core is idle: two requests each (the first teaches the cost per row;
    none known means one thread), the second's answer kept."""
    answers = []
    for threshold_us in (1e9, 0.001):
        with make_client(
            interleave_parallel_min_us=threshold_us, inline_scoring_max_rows=1000
        ) as client:
            for _ in range(2):
                response = client.post("/rerank", json=body(n=40, request_id="r", explain=True))
                assert response.status_code == 200, response.text
            answers.append(response.json())
    return answers


def test_two_threads_or_one_serve_the_same_interleaved_answer(
    make_client: ClientFactory, registry_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Scoring the candidate beside the control (when its cost per row says it pays and a core
    sat idle) changes nothing in the answer, only where the candidate is scored."""
    from app.api import routes
    from app.experiments import serving

    start(registry_dir, "interleave")
    both: list[int] = []
    real = serving.score_both
    monkeypatch.setattr(serving, "score_both", lambda *a: (both.append(1), real(*a))[1])
    monkeypatch.setattr(routes.HEADROOM, "spare_cores", lambda: 2.0)
    monkeypatch.setattr(routes.beside, "ready", lambda: None)  # the pooled thread's path
    answers = _answers_one_thread_then_two(make_client)
    assert len(both) == 1  # the second request with the low threshold
    assert answers[0] == answers[1]
    idle = {"spare": 0.0}
    monkeypatch.setattr(routes.HEADROOM, "spare_cores", lambda: idle["spare"])
    with make_client(interleave_parallel_min_us=0.001, inline_scoring_max_rows=1000) as client:
        for _ in range(2):
            assert client.post("/rerank", json=body(n=40)).status_code == 200
    assert len(both) == 1  # no spare core: one thread


@pytest.mark.skipif(not beside.available(), reason="no beside worker on this machine")
def test_the_native_beside_worker_serves_the_same_interleaved_answer(
    make_client: ClientFactory, registry_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compiled candidate scored by the native beside worker (app.scoring.beside) gives the
    answer of one thread scoring both versions in turn."""
    from app.api import routes
    from app.experiments.score_both import NativeBeside

    start(registry_dir, "interleave")
    worker = beside.BesideWorker(os.sched_getaffinity(0))
    monkeypatch.setattr(routes.beside, "ready", lambda: worker)
    monkeypatch.setattr(routes.HEADROOM, "spare_cores", lambda: 2.0)
    native: list[int] = []
    real = NativeBeside.run
    monkeypatch.setattr(NativeBeside, "run", lambda *a: (native.append(1), real(*a))[1])
    try:
        answers = _answers_one_thread_then_two(make_client)
    finally:
        worker.stop()
    assert len(native) == 1  # the second request with the low threshold
    assert answers[0] == answers[1]
