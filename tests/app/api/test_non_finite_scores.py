"""A model whose scores overflow: the answer is degraded, never null scores as a ranking."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.app.api.conftest import NF, ClientFactory
from tests.support import feature_names
from tests.support.onnx_models import publish_linear_network


def test_scores_that_overflow_are_a_degraded_answer(
    make_client: ClientFactory, registry_dir: Path
) -> None:
    weights = np.zeros(NF, np.float32)
    weights[0] = 4.0  # 4 x 3e38 is past float32's largest value: an infinite score
    publish_linear_network(registry_dir, "net", weights, feature_names(NF))
    candidates = [
        {"id": "a", "features": {feature_names(NF)[0]: 0.5}},
        {"id": "b", "features": {feature_names(NF)[0]: 3e38}},
    ]
    with make_client() as client:
        body = client.post("/rerank", json={"model": "net", "candidates": candidates}).json()
        sane = client.post("/rerank", json={"model": "net", "candidates": candidates[:1]}).json()
    assert body["degraded"] is True and body["reasons"] == ["scores_not_finite"]
    assert sane["degraded"] is False and sane["reasons"] == []
