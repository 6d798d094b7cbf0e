"""`ltr features inspect` / `diff` reports as text."""

from __future__ import annotations

from trainer.features.report_text import NAMES_SHOWN, diff_lines, inspect_lines


def test_a_table_report_names_its_size_and_shortens_long_feature_lists() -> None:
    names = [f"f{i}" for i in range(NAMES_SHOWN + 3)]
    report = {
        "source": "items.parquet",
        "items": 1_000_000,
        "features": names,
        "version": "v1",
        "missing_values": 1,
        "sample": [{"id": "d1", "features": {"f0": -1e-8, "f1": "-Infinity", "f2": None}}],
    }
    assert inspect_lines(report) == [
        "items.parquet: 1,000,000 items x 15 features, version v1, 1 missing value",
        "features: " + ", ".join(names[:NAMES_SHOWN]) + ", ... (3 more)",
        "sample (1 item; a missing value shows as nan):",
        "  d1: f0=-1e-08, f1=-inf, f2=nan",
    ]
    # A sample item shows as many features as the list above it (280 were three screens).
    report["sample"] = [{"id": "d1", "features": dict.fromkeys(names, 0.5)}]
    shown = ", ".join(f"{n}=0.5" for n in names[:NAMES_SHOWN])
    assert inspect_lines(report)[-1] == f"  d1: {shown}, ... (3 more; --json has all)"


def test_a_redis_report_marks_the_live_version_and_an_incomplete_one() -> None:
    report = {
        "set": "s",
        "live": "v2",
        "versions": [
            {"version": "v1", "live": False, "items": 10, "items_present": 7,
             "complete": False, "created_at": None, "expires_in": 5400},
            {"version": "v2", "live": True, "items": 1200, "items_present": 1200,
             "complete": True, "created_at": 1796378400.0, "expires_in": None,
             "memory_bytes": 612_000_000},
        ],
        "shown": "v2",
        "features": ["a"],
        "sample": [],
    }  # fmt: skip
    assert inspect_lines(report) == [
        "item set s: live version v2",
        "  version  items  present  complete  created (UTC)        expires  memory",
        "  v1       10     7        NO        -                    in 2 h   -",
        "* v2       1,200  1,200    yes       2026-12-04 10:00:00  -        ~584 MB",
        "features (1): a",
    ]


def test_a_diff_lists_changed_features_in_columns() -> None:
    side = {"source": "x", "items": 3, "features": 2}
    report = {
        "a": side,
        "b": side,
        "identical": False,
        "features_only_in_a": [],
        "features_only_in_b": [],
        "items_only_in_a": {"count": 7, "sample": ["a", "b", "c", "d", "e"]},
        "items_only_in_b": {"count": 0, "sample": []},
        "items_changed": 2,
        "items_changed_sample": ["p", "q"],
        "features_changed": [
            {
                "feature": "price",
                "items_changed": 2,
                "became_or_stopped_missing": 0,
                "max_abs_diff": 0.5,
            },
            {
                "feature": "ctr",
                "items_changed": 1,
                "became_or_stopped_missing": 1,
                "max_abs_diff": None,
            },
            {
                "feature": "cost",
                "items_changed": 1,
                "became_or_stopped_missing": 0,
                "max_abs_diff": "Infinity",
            },
        ],
    }
    assert diff_lines(report) == [
        "a: x (3 items, 2 features)",
        "b: x (3 items, 2 features)",
        "items only in a: 7 (a, b, c, d, e, ...)",
        "items with a changed value: 2 (p, q)",
        "feature  items changed  to/from missing  max |a - b|",
        "price    2              0                0.5",
        "ctr      1              1                -",
        "cost     1              0                inf",
    ]
    assert diff_lines({**report, "identical": True})[-1] == (
        "identical: the same features, items and values"
    )
