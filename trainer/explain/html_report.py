"""The global view as self-contained HTML (inline SVG, no scripts): mean |contribution| bars
(with the deployed model's beside them when given), a beeswarm of contributions coloured by
feature value, and dependence plots (value → contribution) for the top features."""

from __future__ import annotations

import html
from typing import Any

import numpy as np

from trainer.explain.global_view import changes

WIDTH, ROW, LABEL = 720, 26, 170
BEESWARM_FEATURES = 15
DEPENDENCE_FEATURES = 6
LOW, HIGH, MISSING = (59, 76, 192), (180, 4, 38), "#999999"


def _svg(width: float, height: float, body: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'font-size="12" font-family="sans-serif">{body}</svg>'
    )


def _colour(q: float) -> str:
    """Blue (low value) → red (high value) for a value quantile q in [0, 1]."""
    r, g, b = (round(lo + (hi - lo) * q) for lo, hi in zip(LOW, HIGH, strict=True))
    return f"#{r:02x}{g:02x}{b:02x}"


def _quantiles(values: list[float | None]) -> list[float | None]:
    finite = np.array([v for v in values if v is not None], dtype=np.float64)
    if finite.size == 0:
        return [None] * len(values)
    ranks = np.sort(finite)
    span = max(finite.size - 1, 1)
    return [
        None if v is None else float(np.searchsorted(ranks, v, side="left")) / span for v in values
    ]


def importance_bars(summary: dict[str, Any], deployed: dict[str, Any] | None = None) -> str:
    """Mean |contribution| per top feature; the deployed model's as a thin grey bar below."""
    feats = summary["features"]
    if not feats:
        return "<p>No feature contributes (the model is constant on these rows).</p>"
    old = deployed["mean_abs"] if deployed else {}
    peak = max([f["mean_abs"] for f in feats] + [old.get(f["name"], 0.0) for f in feats])
    scale = (WIDTH - LABEL - 90) / (peak or 1.0)
    parts = []
    for i, f in enumerate(feats):
        y = i * ROW
        parts.append(f'<text x="0" y="{y + 14}">{html.escape(f["name"])}</text>')
        parts.append(
            f'<rect x="{LABEL}" y="{y + 3}" width="{f["mean_abs"] * scale:.1f}" height="12" '
            f'fill="#1f77b4"/><text x="{LABEL + 4 + f["mean_abs"] * scale:.1f}" y="{y + 14}">'
            f"{f['mean_abs']:.4g}</text>"
        )
        if deployed is not None:
            width = old.get(f["name"], 0.0) * scale
            parts.append(
                f'<rect x="{LABEL}" y="{y + 17}" width="{width:.1f}" height="5" fill="#888"/>'
            )
    legend = "<p>Blue: this model; grey: the deployed model.</p>" if deployed is not None else ""
    return legend + _svg(WIDTH, ROW * len(feats), "".join(parts))


def beeswarm(summary: dict[str, Any]) -> str:
    """One row per top feature: each point a row's contribution (x), coloured by the
    feature's value (blue low, red high, grey missing), stacked where points crowd."""
    feats = summary["features"][:BEESWARM_FEATURES]
    if not feats:
        return ""
    values = [c for f in feats for c in f["contribution"]]
    lo, hi = min(min(values), 0.0), max(max(values), 0.0)
    span = (hi - lo) or 1.0
    x0, x1 = LABEL, WIDTH - 20
    height = ROW * 1.6
    parts = []
    zero = x0 + (x1 - x0) * (0.0 - lo) / span
    total = height * len(feats)
    parts.append(f'<line x1="{zero:.1f}" y1="0" x2="{zero:.1f}" y2="{total:.0f}" stroke="#ccc"/>')
    for i, f in enumerate(feats):
        mid = i * height + height / 2
        parts.append(f'<text x="0" y="{mid + 4:.1f}">{html.escape(f["name"])}</text>')
        crowd: dict[int, int] = {}
        for c, q in zip(f["contribution"], _quantiles(f["value"]), strict=True):
            x = x0 + (x1 - x0) * (c - lo) / span
            k = crowd.get(int(x // 3), 0)
            crowd[int(x // 3)] = k + 1
            offset = min((k + 1) // 2 * 2.0, height / 2 - 2) * (1 if k % 2 else -1)
            colour = MISSING if q is None else _colour(q)
            parts.append(
                f'<circle cx="{x:.1f}" cy="{mid + offset:.1f}" r="2" fill="{colour}" '
                'fill-opacity="0.8"/>'
            )
    axis = (
        f'<text x="{x0}" y="{total + 14:.0f}">{lo:.3g}</text>'
        f'<text x="{x1 - 40}" y="{total + 14:.0f}">{hi:.3g}</text>'
        f'<text x="{zero - 4:.1f}" y="{total + 14:.0f}">0</text>'
    )
    return _svg(WIDTH, total + 20, "".join(parts) + axis)


def dependence(feature: dict[str, Any]) -> str:
    """Feature value (x) → its contribution (y); missing values in a strip on the left."""
    w, h, pad, strip = 340, 220, 36, 24
    pairs = list(zip(feature["value"], feature["contribution"], strict=True))
    finite = [v for v, _ in pairs if v is not None]
    cs = [c for _, c in pairs]
    vlo, vhi = (min(finite), max(finite)) if finite else (0.0, 1.0)
    clo, chi = min(cs), max(cs)
    vspan, cspan = (vhi - vlo) or 1.0, (chi - clo) or 1.0
    parts = [
        f'<line x1="{pad + strip}" y1="{h - pad}" x2="{w - 8}" y2="{h - pad}" stroke="#444"/>',
        f'<line x1="{pad + strip}" y1="8" x2="{pad + strip}" y2="{h - pad}" stroke="#444"/>',
        f'<text x="{w / 2 - 40:.0f}" y="{h - 8}">{html.escape(feature["name"])}</text>',
        f'<text x="2" y="14">{chi:.3g}</text><text x="2" y="{h - pad}">{clo:.3g}</text>',
        f'<text x="{pad + strip}" y="{h - pad + 14}">{vlo:.3g}</text>',
        f'<text x="{w - 50}" y="{h - pad + 14}">{vhi:.3g}</text>',
    ]
    if any(v is None for v, _ in pairs):
        parts.append(f'<text x="{pad - 6}" y="{h - pad + 14}" fill="{MISSING}">NaN</text>')
    for v, c in pairs:
        y = h - pad - (h - pad - 8) * (c - clo) / cspan
        if v is None:
            x, colour = pad + strip / 2, MISSING
        else:
            x = pad + strip + (w - 8 - pad - strip) * (v - vlo) / vspan
            colour = "#1f77b4"
        parts.append(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2" fill="{colour}" fill-opacity="0.7"/>'
        )
    return _svg(w, h, "".join(parts))


def _change_table(summary: dict[str, Any], deployed: dict[str, Any]) -> str:
    head = "<tr><th>feature</th><th>this model</th><th>deployed</th><th>change</th></tr>"
    body = "".join(
        f"<tr><td>{html.escape(r['name'])}</td><td>{r['candidate']:.4g}</td>"
        f"<td>{r['deployed']:.4g}</td><td>{r['change']:+.4g}</td></tr>"
        for r in changes(summary, deployed)[:15]
    )
    return f"<table>{head}{body}</table>"


def explanation_section(summary: dict[str, Any], deployed: dict[str, Any] | None = None) -> str:
    """The global view as an HTML fragment (used by `ltr explain` and the nightly report)."""
    method = {
        "treeshap": "exact TreeSHAP (Shapley values; each row's contributions sum to its score)",
        "occlusion": "occlusion against the missing-value document (score minus score without it)",
    }.get(summary["method"], summary["method"])
    parts = [
        f"<p>{summary['rows']} rows; {html.escape(method)}; expected value "
        f"{summary['expected_value']:.6g}.</p>"
        if summary["rows"]
        else "<p>No rows.</p>",
        "<h3>Mean |contribution| per feature</h3>",
        importance_bars(summary, deployed),
    ]
    if deployed is not None:
        parts += ["<h3>Change from the deployed model</h3>", _change_table(summary, deployed)]
    parts += [
        "<h3>Contributions per row (blue: low value, red: high, grey: missing)</h3>",
        beeswarm(summary),
        "<h3>Dependence: value → contribution</h3>",
        "".join(dependence(f) for f in summary["features"][:DEPENDENCE_FEATURES]),
    ]
    return "".join(parts)


def render_page(title: str, summary: dict[str, Any], deployed: dict[str, Any] | None = None) -> str:
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title>"
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}</style></head><body>"
        f"<h1>{html.escape(title)}</h1>{explanation_section(summary, deployed)}</body></html>"
    )
