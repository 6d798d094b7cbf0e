"""A registry with control v1 and candidate v2 of model `m`, and synthetic experiment logs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from app.experiments.spec import ExperimentSpec
from app.impressions.sink import feedback_record, impression_record, to_json
from tests.support import publish, random_ensemble

NF = 4


@pytest.fixture
def registry(tmp_path: Path) -> Path:
    root = tmp_path / "registry"
    publish(root, random_ensemble(NF, seed=1), version="v1")
    publish(root, random_ensemble(NF, seed=2), version="v2", current=False)
    return root


def write_logs(
    path: Path, spec: ExperimentSpec, n: int, candidate_share: float, seed: int = 0
) -> Path:
    """`n` impressions of 10 results; one click each on the candidate's team (interleave) or
    arm (ab) with probability `candidate_share`, else on the control's."""
    rng = np.random.default_rng(seed)
    lines: list[bytes] = []
    for i in range(n):
        ids = [f"d{j}" for j in range(10)]
        request_id = f"r{i}"
        user = f"u{i % (n // 2 + 1)}"
        winner = int(rng.random() < candidate_share)
        experiment: dict[str, Any] = {"name": spec.name, "mode": spec.mode}
        if spec.mode == "interleave":
            teams = [int(t) for t in rng.permutation([0, 1] * 5)]
            experiment["teams"] = teams
            clicked = [ids[teams.index(winner)]]
        else:
            arm = int(rng.random() < 0.5)
            experiment["arm"] = ("control", "candidate")[arm]
            rate = 0.3 + 0.2 * (candidate_share - 0.5) * (1 if arm else -1)
            clicked = ids[:1] if rng.random() < rate else []
        features = np.zeros((10, NF), dtype=np.float32)
        record = impression_record(
            request_id, i, user, None, "m", "v1", ids, features, ts=1e9 + i, experiment=experiment
        )
        lines.append(to_json(record))
        if clicked:
            events = [{"id": c, "type": "click", "value": None} for c in clicked]
            lines.append(to_json(feedback_record(request_id, events, ts=1e9 + i + 0.5)))
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def read_json(text: str) -> Any:
    return orjson.loads(text)
