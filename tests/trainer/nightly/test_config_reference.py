"""docs/OPERATIONS.md ("The nightly config, key by key") is the reference of the nightly
config: one row per key the config accepts (none it refuses), each with its default, so nobody
needs the source."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from trainer.nightly.config import NightlyConfig

DOC = Path(__file__).resolve().parents[3] / "docs" / "OPERATIONS.md"
HEADING = "## The nightly config, key by key"
ROW = re.compile(r"^\| `([a-z_][a-z0-9_.]*)` \| ([^|]+) \|")


def _accepted(model: type[BaseModel], defaults: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Every dotted key of `model` (nested sections opened up) with its default in `defaults`
    (a section's own defaults win: model.lambdamart has 300 trees, the class 100)."""
    keys: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        kind = info.annotation
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            keys.update(_accepted(kind, defaults[name], f"{prefix}{name}."))
        else:
            keys[f"{prefix}{name}"] = defaults[name]
    return keys


def _documented() -> dict[str, str]:
    """dotted key → its default cell, from the reference section's table."""
    text = DOC.read_text()
    assert HEADING in text
    section = text.split(HEADING, 1)[1].split("\n## ", 1)[0]
    return {m[1]: m[2].strip() for line in section.splitlines() if (m := ROW.match(line))}


def _default(cell: str) -> Any:
    """`300`, `"data"`, `[256, 128]` as TOML; "unset ..." is None."""
    if cell.startswith("unset"):
        return None
    literal = re.match(r"`([^`]+)`", cell)
    assert literal, cell
    return tomllib.loads(f"v = {literal[1]}")["v"]


def test_every_key_is_documented_with_its_default() -> None:
    # The file-data defaults; the debiased-logs ones are in the same cells, in parentheses.
    files = NightlyConfig().model_dump(mode="json")
    files["gate"]["metric"] = None  # unset: chosen from data.source and data.debias
    accepted = _accepted(NightlyConfig, files)
    documented = _documented()
    assert sorted(set(accepted) - set(documented)) == []  # keys missing from the reference
    assert sorted(set(documented) - set(accepted)) == []  # keys the config refuses
    for key, cell in documented.items():
        assert _default(cell) == accepted[key], f"{key}: documented default {cell}"


def test_the_defaults_that_depend_on_the_data_are_said() -> None:
    documented = _documented()
    logs = NightlyConfig.model_validate({"data": {"source": "logs"}}).gate
    assert f'`"{logs.metric}"` on debiased logs' in documented["gate.metric"]
    assert f"`{logs.tolerance}` on debiased logs" in documented["gate.tolerance"]
    assert f"`{logs.relative_tolerance}` on debiased logs" in documented["gate.relative_tolerance"]
