from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from trainer.simulate import SimulationConfig


def test_defaults_are_valid() -> None:
    config = SimulationConfig()
    assert config.num_features == 20
    assert config.format == "parquet"


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("split", (0.5, 0.1, 0.1), "sum to 1"),
        ("split", (0.0, 0.5, 0.5), "train split"),
        ("docs_per_query", (5, 2), "docs_per_query"),
        ("label_shares", (0.5, 0.5, 0.5, 0.0, 0.0), "label_shares"),
        ("num_features", 5, "greater than or equal to 9"),
        ("rows", 0, "greater than or equal to 1"),
        ("click_noise", 1.0, "less than 1"),
    ],
)
def test_bad_settings_are_rejected(field: str, value: Any, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        SimulationConfig.model_validate({field: value})


def test_unknown_settings_are_rejected() -> None:
    with pytest.raises(ValidationError, match="rowz"):
        SimulationConfig(rowz=10)  # type: ignore[call-arg]
