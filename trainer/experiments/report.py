"""`ltr experiment report`: the numbers as text/JSON and an HTML page with the cumulative
preference over time (an inline SVG plot, so the page has no dependencies)."""

from __future__ import annotations

import datetime as dt
import html
import math
from pathlib import Path
from typing import Any

from app.registry.experiments import ExperimentRecord
from trainer.experiments.analysis import ExperimentAnalysis
from trainer.experiments.statistics import InterleavingResult

WIDTH, HEIGHT, PAD = 720, 300, 48


def summary_lines(
    record: ExperimentRecord, analysis: ExperimentAnalysis, paused: str | None = None
) -> list[str]:
    """`paused`: why a running experiment is not served (trainer.experiments.lifecycle)."""
    spec = record.spec
    lines = [
        f"experiment {spec.name} ({spec.mode}, {100 * spec.traffic:g} % of traffic): "
        f"control {spec.control} vs candidate {spec.candidate} of {spec.model} "
        f"[{'paused' if paused else record.status}]",
        f"impressions: {analysis.impressions}",
    ]
    if paused:
        lines.append(f"paused: {paused}")
    il = analysis.interleaving
    if il is not None:
        ci = _interval(il.ci_low, il.ci_high, "no clicks yet")
        lines += [
            f"clicked: {il.clicked}  wins: {il.wins}  losses: {il.losses}  ties: {il.ties}",
            f"preference: {il.preference:+.4f} (95 % CI {ci})",
            f"click difference per clicked impression: {_click_difference(il)}",
            f"p (sign test): {il.p_value:.3g}  always-valid p (mSPRT on click differences): "
            f"{il.p_always_valid:.3g}",
        ]
    if analysis.ab is not None and analysis.arm_impressions is not None:
        arms = analysis.arm_impressions
        lines.append(f"impressions: control {arms['control']}, candidate {arms['candidate']}")
        for r in analysis.ab.values():
            relative = (
                "relative change n/a" if math.isnan(r.relative) else f"{100 * r.relative:+.1f} %"
            )
            lines.append(
                f"{r.metric}/impression: control {_number(r.control, '')} "
                f"candidate {_number(r.candidate, '')} diff {_number(r.difference, '+')} "
                f"(95 % CI {_interval(r.ci_low, r.ci_high, 'too few users')}, {relative}), "
                f"p {r.p_value:.3g}, always-valid p {r.p_always_valid:.3g}"
            )
    if record.reason:
        lines.append(f"ended: {record.reason}")
    return lines


def _number(value: float, sign: str) -> str:
    return "n/a" if math.isnan(value) else f"{value:{sign}.4f}"


def _interval(low: float, high: float, why_not: str) -> str:
    # Too little data gives NaN bounds, which printed as "+nan .. +nan".
    if math.isnan(low) or math.isnan(high):
        return f"n/a ({why_not})"
    return f"{low:+.4f} .. {high:+.4f}"


def _click_difference(il: InterleavingResult) -> str:
    # A mean over no clicked impressions is NaN, which printed as "+nan".
    if not math.isnan(il.click_difference):
        return f"{il.click_difference:+.4f}"
    return "n/a (no clicks yet)" if il.clicked == 0 else "n/a (per-team clicks not logged)"


def _svg(series: list[tuple[float, int, float]], label: str) -> str:
    if len(series) < 2:
        return "<p>Not enough impressions for a plot yet.</p>"
    xs = [p[1] for p in series]
    ys = [p[2] for p in series]
    top = max(max(abs(y) for y in ys), 1e-6) * 1.1
    x0, x1 = xs[0], xs[-1] if xs[-1] > xs[0] else xs[0] + 1

    def px(x: float) -> float:
        return PAD + (x - x0) / (x1 - x0) * (WIDTH - 2 * PAD)

    def py(y: float) -> float:
        return HEIGHT / 2 - y / top * (HEIGHT / 2 - PAD / 2)

    points = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(xs, ys, strict=True))
    first, last = (
        dt.datetime.fromtimestamp(series[0][0], dt.UTC),
        dt.datetime.fromtimestamp(series[-1][0], dt.UTC),
    )
    return f"""<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}"
 role="img" aria-label="{html.escape(label)} over impressions">
<line x1="{PAD}" y1="{HEIGHT / 2}" x2="{WIDTH - PAD}" y2="{HEIGHT / 2}" stroke="#999"
 stroke-dasharray="4 3"/>
<polyline fill="none" stroke="#1f6feb" stroke-width="2" points="{points}"/>
<text x="{PAD}" y="14" font-size="12">{html.escape(label)}
 (+{top:.3g} top, -{top:.3g} bottom)</text>
<text x="{PAD}" y="{HEIGHT - 6}" font-size="12">{x0} impressions ({first:%Y-%m-%d %H:%M} UTC)</text>
<text x="{WIDTH - PAD}" y="{HEIGHT - 6}" font-size="12" text-anchor="end">{x1} impressions
 ({last:%Y-%m-%d %H:%M} UTC)</text>
</svg>"""


def write_html(
    path: Path, record: ExperimentRecord, analysis: ExperimentAnalysis, paused: str | None = None
) -> Path:
    label = (
        "cumulative preference for the candidate"
        if analysis.mode == "interleave"
        else "cumulative clicks/impression, candidate minus control"
    )
    rows = "\n".join(
        f"<li>{html.escape(line)}</li>" for line in summary_lines(record, analysis, paused)
    )
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>Experiment {html.escape(record.spec.name)}</title>
<style>body{{font-family:sans-serif;max-width:800px;margin:2em auto}}</style></head>
<body><h1>Experiment {html.escape(record.spec.name)}</h1>
<ul>{rows}</ul>
<h2>{html.escape(label)}</h2>
{_svg(analysis.series, label)}
<p>Preference = (wins + ties / 2) / clicked impressions − 1/2 (Chapelle et al., TOIS 2012).
Decisions use the always-valid p-value (mSPRT), which stays valid however often one looks.</p>
</body></html>
"""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page)
    return path


def report_json(
    record: ExperimentRecord, analysis: ExperimentAnalysis, paused: str | None = None
) -> dict[str, Any]:
    return {
        "experiment": record.model_dump(mode="json"),
        "paused": paused,
        "analysis": analysis.to_json(),
    }
