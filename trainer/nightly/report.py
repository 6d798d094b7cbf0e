"""The run report: `report.json` for machines, `report.html` (self-contained, inline SVG charts)
for people: data summary, metrics vs the deployed model, metrics per iteration, feature importance,
and the global view of contributions (trainer/explain) with its change from the deployed model."""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

WIDTH, HEIGHT, PAD = 640, 260, 40


def _polyline(
    xs: Sequence[float], ys: Sequence[float], x_max: float, y_lo: float, y_hi: float
) -> str:
    span = (y_hi - y_lo) or 1.0
    pts = " ".join(
        f"{PAD + (WIDTH - 2 * PAD) * x / max(x_max, 1):.1f},"
        f"{HEIGHT - PAD - (HEIGHT - 2 * PAD) * (y - y_lo) / span:.1f}"
        for x, y in zip(xs, ys, strict=True)
    )
    return pts


def line_chart(title: str, series: dict[str, list[float]]) -> str:
    """An SVG line chart of one or more series indexed by iteration (1-based)."""
    values = [v for s in series.values() for v in s]
    if not values:
        return ""
    lo, hi = min(values), max(values)
    x_max = max(len(s) for s in series.values())
    colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]
    lines = []
    for i, (name, ys) in enumerate(series.items()):
        pts = _polyline(range(1, len(ys) + 1), ys, x_max, lo, hi)
        colour = colours[i % len(colours)]
        lines.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{pts}"/>')
        lines.append(
            f'<text x="{WIDTH - PAD - 150}" y="{PAD + 16 * i}" fill="{colour}">'
            f"{html.escape(name)}</text>"
        )
    axes = (
        f'<line x1="{PAD}" y1="{HEIGHT - PAD}" x2="{WIDTH - PAD}" y2="{HEIGHT - PAD}" '
        f'stroke="#444"/><line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{HEIGHT - PAD}" stroke="#444"/>'
        f'<text x="{PAD}" y="{PAD - 8}">{hi:.4f}</text>'
        f'<text x="{PAD}" y="{HEIGHT - PAD + 16}">{lo:.4f}</text>'
        f'<text x="{WIDTH - PAD - 40}" y="{HEIGHT - PAD + 16}">{x_max} it.</text>'
    )
    return (
        f"<h3>{html.escape(title)}</h3>"
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'font-size="12" font-family="sans-serif">{axes}{"".join(lines)}</svg>'
    )


def bar_chart(title: str, values: dict[str, float], top: int = 20) -> str:
    items = sorted(values.items(), key=lambda kv: -kv[1])[:top]
    if not items:
        return ""
    peak = items[0][1] or 1.0
    row = 18
    bars = "".join(
        f'<text x="0" y="{row * i + 13}">{html.escape(name)}</text>'
        f'<rect x="160" y="{row * i + 2}" width="{400 * value / peak:.1f}" height="{row - 4}" '
        f'fill="#1f77b4"/><text x="{165 + 400 * value / peak:.1f}" y="{row * i + 13}">'
        f"{value:g}</text>"
        for i, (name, value) in enumerate(items)
    )
    return (
        f"<h3>{html.escape(title)}</h3>"
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{row * len(items)}" '
        f'font-size="12" font-family="sans-serif">{bars}</svg>'
    )


def _table(rows: dict[str, Any]) -> str:
    cells = "".join(
        f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>"
        for k, v in rows.items()
    )
    return f"<table>{cells}</table>"


def _metrics_table(candidate: dict[str, Any], deployed: dict[str, Any] | None) -> str:
    keys = [k for k in candidate if not k.startswith("rescore")]
    head = "<tr><th>metric</th><th>candidate</th><th>deployed</th></tr>"
    body = "".join(
        f"<tr><th>{html.escape(k)}</th><td>{candidate[k]}</td>"
        f"<td>{'' if deployed is None else deployed.get(k, '')}</td></tr>"
        for k in keys
    )
    return f"<table>{head}{body}</table>"


def _explanations(views: dict[str, Any] | None) -> str:
    """Global view of the new version (and its change from the deployed one), if explained."""
    if not views:
        return ""
    from trainer.explain.html_report import explanation_section

    notes = "".join(f"<li>{html.escape(n)}</li>" for n in views.get("notes", []))
    parts = ["<h2>Why it ranks as it does</h2>", f"<ul>{notes}</ul>" if notes else ""]
    if views.get("candidate") is not None:
        parts.append(explanation_section(views["candidate"], views.get("deployed")))
    return "".join(parts)


def _write(path: Path, data: bytes) -> None:
    """A failed write names its file (a full disk's bare "[Errno 28]" named none) and leaves no
    torn report behind."""
    try:
        path.write_bytes(data)
    except OSError as exc:
        path.unlink(missing_ok=True)
        raise OSError(exc.errno, exc.strerror, str(path)) from None


def write_report(directory: Path, report: dict[str, Any]) -> None:
    """Write report.json and report.html into `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    _write(
        directory / "report.json",
        orjson.dumps(report, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY),
    )
    gate = report.get("gate", {})
    verdict = "PASSED" if gate.get("passed") else "REFUSED"
    history = report.get("history", {})
    names = report.get("history_metrics", {})
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>ltr nightly {html.escape(str(report.get('version', '')))}</title>",
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}</style></head><body>",
        f"<h1>Nightly run: {html.escape(str(report.get('model', '')))} "
        f"{html.escape(str(report.get('version', '')))} — gate {verdict}</h1>",
        "<h2>Gate</h2>",
        "<ul>"
        + "".join(
            f"<li>{html.escape(r)}</li>" for r in gate.get("reasons", []) + gate.get("notes", [])
        )
        + "</ul>",
        _metrics_table(gate.get("candidate", {}), gate.get("deployed")),
        "<h2>Data</h2>",
        _table(report.get("data", {})),
        "<h2>Training</h2>",
        # Each series by its metric's name: on debiased clicks validation is IPW DCG, which
        # is not on NDCG's scale.
        line_chart(
            "Training metrics per iteration",
            {f"{k} {names.get(k, '')}".rstrip(): v for k, v in history.items()},
        ),
        bar_chart("Feature importance (splits)", report.get("feature_importance", {})),
        _table({k: v for k, v in report.get("training", {}).items() if k != "params"}),
        _explanations(report.get("explanations")),
        "</body></html>",
    ]
    try:
        _write(directory / "report.html", "".join(parts).encode())
    except OSError:
        (directory / "report.json").unlink(missing_ok=True)
        raise
