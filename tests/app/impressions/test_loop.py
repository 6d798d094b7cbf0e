"""The service end to end: /rerank logs what it served, /feedback records clicks on it, and
`trainer.clicks` turns the log into training data."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.app.api.conftest import NF, ClientFactory, ensemble, make_client, registry_dir
from trainer.clicks.join import join_logs
from trainer.clicks.logs import read_logs

__all__ = ["ensemble", "make_client", "registry_dir"]


def test_rerank_feedback_and_join(make_client: ClientFactory, tmp_path: Path) -> None:
    log_file = tmp_path / "imp.jsonl"
    rows = np.arange(3 * NF, dtype=np.float32).reshape(3, NF) / 7.0
    candidates = [{"id": f"d{i}", "features": rows[i].tolist()} for i in range(3)]
    with make_client(impressions_enabled=True, impressions_jsonl=log_file) as client:
        body = {
            "request_id": "req-1",
            "query_id": "q",
            "user": {"id": "u1"},
            "candidates": candidates,
            "top_k": 2,
        }
        answer = client.post("/rerank", json=body).json()
        served = [r["id"] for r in answer["results"]]
        cut = ({"d0", "d1", "d2"} - set(served)).pop()
        click = {"request_id": "req-1", "events": [{"id": served[1], "type": "click"}]}
        assert client.post("/feedback", json=click).status_code == 202
        assert client.post("/feedback", json=click).json()["duplicates"] == 1
        bad = {"request_id": "req-1", "events": [{"id": cut, "type": "click"}]}
        assert client.post("/feedback", json=bad).status_code == 422
        unknown = client.post("/feedback", json={**click, "request_id": "nope"})
        assert unknown.status_code == 404
        # Another worker's or replica's request is unknown here too: the answer says why.
        assert "without Redis" in unknown.json()["detail"]
    # Leaving the client ran the lifespan's shutdown, which drains the queue.
    data = join_logs(read_logs(log_file)).dataset
    assert data.query_ids.tolist() == ["req-1"]
    np.testing.assert_array_equal(data.labels, [0, 1])
    np.testing.assert_array_equal(data.positions, [1, 2])
    by_id = {c["id"]: i for i, c in enumerate(candidates)}
    np.testing.assert_array_equal(data.features, rows[[by_id[s] for s in served]])
    assert data.user_ids is not None and data.user_ids.tolist() == ["u1"]


def test_logging_off_by_default(make_client: ClientFactory) -> None:
    with make_client() as client:
        body = {"request_id": "r", "events": [{"id": "d0", "type": "click"}]}
        assert client.post("/feedback", json=body).status_code == 503
