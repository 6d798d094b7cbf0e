"""The served models that read an item set, for `ltr features push`: a table pushed without
features a served model reads leaves them missing for every item, and the service says so
only per request (`item_set_mismatch`)."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from app.artifacts.manifest import Manifest
from app.artifacts.store import MANIFEST_FILE, list_models, read_current


def lacking_readers(registry: Path, set_name: str, names: list[str]) -> list[str]:
    """A warning per model of `registry` whose CURRENT version reads item set `set_name` and
    features of it that `names` (the pushed table's columns) lacks. Nothing for a registry
    that is not there or a version that does not read (checked where it is served)."""
    if not registry.is_dir():
        return []
    pushed = set(names)
    warnings = []
    for model in list_models(registry):
        try:
            version = read_current(registry, model)
            if version is None:
                continue
            path = registry / model / version / MANIFEST_FILE
            manifest = Manifest.model_validate_json(path.read_bytes())
        except (OSError, ValueError, ValidationError):
            continue
        items = manifest.item_features
        if items is None or items.set != set_name:
            continue
        lacking = [n for n in manifest.names_from("item") if n not in pushed]
        if lacking:
            more = len(lacking) - 5
            shown = ", ".join(lacking[:5]) + (f" and {more} more" if more > 0 else "")
            warnings.append(
                f"warning: model {model} (version {version}, in {registry}) reads item set "
                f"{set_name!r} and features this table lacks: {shown}; once this push is live, "
                "its answers are degraded (item_set_mismatch: scored from its in-process "
                "snapshot if it carries one, else with those features missing)"
            )
    return warnings
