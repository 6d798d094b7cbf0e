"""`ltr features inspect` and `diff` reports as text for a terminal (their `--json` form is
the report itself): one fact a line, versions and changed features as aligned columns."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

# Features named on one line before the rest are counted: a table of 100 columns would
# otherwise print a screenful of names before anything else.
NAMES_SHOWN = 12


def inspect_lines(report: dict[str, Any]) -> list[str]:
    """The lines of an inspect report, of a Redis set or of a file / model version."""
    if "set" in report:
        return _redis_lines(report)
    lines = [
        f"{report['source']}: {_count(report['items'], 'item')} x "
        f"{_count(len(report['features']), 'feature')}, version {report['version']}, "
        f"{_count(report['missing_values'], 'missing value')}",
        f"features: {_names(report['features'])}",
    ]
    return lines + _sample_lines(report["sample"], None)


def diff_lines(report: dict[str, Any]) -> list[str]:
    """The lines of a diff report: what each side holds, then each kind of difference."""
    lines = [
        f"{side}: {report[side]['source']} ({_count(report[side]['items'], 'item')}, "
        f"{_count(report[side]['features'], 'feature')})"
        for side in ("a", "b")
    ]
    if report["identical"]:
        return [*lines, "identical: the same features, items and values"]
    for side in ("a", "b"):
        if names := report[f"features_only_in_{side}"]:
            lines.append(f"features only in {side} ({len(names)}): {_names(names)}")
    for side in ("a", "b"):
        only = report[f"items_only_in_{side}"]
        if only["count"]:
            more = ", ..." if only["count"] > len(only["sample"]) else ""
            shown = ", ".join(only["sample"])
            lines.append(f"items only in {side}: {only['count']:,} ({shown}{more})")
    lines.append(f"items with a changed value: {report['items_changed']:,}")
    if report["features_changed"]:
        rows = [
            (
                row["feature"],
                f"{row['items_changed']:,}",
                "-" if row["max_abs_diff"] is None else f"{row['max_abs_diff']:.6g}",
            )
            for row in report["features_changed"]
        ]
        lines += _columns(("feature", "items changed", "max |a - b|"), rows)
    return lines


def _redis_lines(report: dict[str, Any]) -> list[str]:
    live = report["live"] or "none"
    lines = [f"item set {report['set']}: live version {live}"]
    rows = [
        (
            ("* " if v["live"] else "  ") + v["version"],
            "-" if v["items"] is None else f"{v['items']:,}",
            f"{v['items_present']:,}",
            "yes" if v["complete"] else "NO",
            v["created_at"] or "-",
        )
        for v in report["versions"]
    ]
    lines += _columns(("  version", "items", "present", "complete", "created"), rows)
    if report["features"] is not None:
        count = len(report["features"])
        lines.append(f"features ({count}): {_names(report['features'])}")
    return lines + _sample_lines(report["sample"], report["shown"])


def _sample_lines(sample: list[dict[str, Any]], version: str | None) -> list[str]:
    if not sample:
        return []
    of = f" of {version}" if version else ""
    lines = [f"sample{of} ({_count(len(sample), 'item')}; a missing value shows as nan):"]
    for row in sample:
        values = ", ".join(f"{n}={_value(v)}" for n, v in row["features"].items())
        lines.append(f"  {row['id']}: {values}")
    return lines


def _value(value: float | str | None) -> str:
    if value is None:
        return "nan"
    if isinstance(value, str):  # "Infinity" / "-Infinity", as the JSON report spells them
        return "inf" if value == "Infinity" else "-inf"
    return str(np.float32(value))  # the shortest digits that read back as the stored float32


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def _names(names: Sequence[str]) -> str:
    shown = ", ".join(names[:NAMES_SHOWN])
    rest = len(names) - NAMES_SHOWN
    return f"{shown}, ... ({rest} more)" if rest > 0 else shown


def _columns(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=True)]
    return [
        "  ".join(str(cell).ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in (header, *rows)
    ]
