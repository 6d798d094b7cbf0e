"""`ltr features inspect` and `diff` reports as text for a terminal (their `--json` form is
the report itself): one fact a line, versions and changed features as aligned columns."""

from __future__ import annotations

import datetime as dt
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
    changed = report["items_changed"]
    sample = report.get("items_changed_sample") or []
    shown = f" ({', '.join(sample)}{', ...' if changed > len(sample) else ''})" if sample else ""
    lines.append(f"items with a changed value: {changed:,}{shown}")
    if report["features_changed"]:
        rows = [
            (
                row["feature"],
                f"{row['items_changed']:,}",
                f"{row.get('became_or_stopped_missing', 0):,}",
                _difference(row["max_abs_diff"]),
            )
            for row in report["features_changed"]
        ]
        header = ("feature", "items changed", "to/from missing", "max |a - b|")
        lines += _columns(header, rows)
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
            _created(v["created_at"]),
            _expiry(v.get("expires_in")),
            _megabytes(v.get("memory_bytes")),
        )
        for v in report["versions"]
    ]
    header = ("  version", "items", "present", "complete", "created (UTC)", "expires", "memory")
    lines += _columns(header, rows)
    if report["features"] is not None:
        count = len(report["features"])
        lines.append(f"features ({count}): {_names(report['features'])}")
    return lines + _sample_lines(report["sample"], report["shown"])


def _difference(value: float | str | None) -> str:
    """ "-" when every change was to or from missing (nothing to measure)."""
    if value is None:
        return "-"
    return "inf" if isinstance(value, str) else f"{value:.6g}"


def _created(epoch: float | str | None) -> str:
    if not isinstance(epoch, int | float):
        return epoch or "-"
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _megabytes(size: int | None) -> str:
    return "-" if size is None else f"~{size / 2**20:,.0f} MB"


def _expiry(seconds: int | None) -> str:
    """ "-" for a version Redis keeps; else when it goes, as the nearest whole unit."""
    if seconds is None:
        return "-"
    if seconds >= 3600:
        return f"in {seconds / 3600:.0f} h"
    return f"in {seconds / 60:.0f} min" if seconds >= 60 else f"in {seconds} s"


def _sample_lines(sample: list[dict[str, Any]], version: str | None) -> list[str]:
    if not sample:
        return []
    of = f" of {version}" if version else ""
    lines = [f"sample{of} ({_count(len(sample), 'item')}; a missing value shows as nan):"]
    for row in sample:
        # As the feature list above it: a sample of 280 features was three screens of text.
        pairs = [f"{n}={_value(v)}" for n, v in row["features"].items()]
        rest = len(pairs) - NAMES_SHOWN
        more = f", ... ({rest} more; --json has all)" if rest > 0 else ""
        lines.append(f"  {row['id']}: {', '.join(pairs[:NAMES_SHOWN])}{more}")
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
