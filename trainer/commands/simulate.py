"""`ltr simulate`: write a personalised ranking dataset with known ground truth."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Literal

import orjson
import typer
from pydantic import ValidationError

from trainer.commands.errors import clear_errors, echo_err, fail
from trainer.staged_dir import staged_dir

CLICK_LOG = "click_logs.jsonl"  # --sessions: the service's impression + feedback log format
# Runs smaller than this finish in a couple of seconds: no progress output.
PROGRESS_MIN_ROWS = 500_000


def _config_error(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(x) for x in err["loc"])
        parts.append(f"{where}: {err['msg']}" if where else err["msg"])
    return "invalid simulation settings: " + "; ".join(parts)


def _parse_split(text: str) -> tuple[float, float, float]:
    try:
        values = tuple(float(x) for x in text.split(","))
    except ValueError:
        fail(f"--split {text!r}: expected three numbers like 0.8,0.1,0.1")
    if len(values) != 3:
        fail(f"--split {text!r}: expected three fractions train,vali,test")
    return values[0], values[1], values[2]


@contextmanager
def _progress(rows: int) -> Iterator[Callable[[int, int], None] | None]:
    """A bar on a terminal, a plain line every 10% elsewhere, nothing for small runs."""
    if rows < PROGRESS_MIN_ROWS:
        yield None
        return
    if sys.stderr.isatty():
        from rich.progress import Progress

        with Progress(transient=True) as bar:
            task = bar.add_task("simulate", total=rows)
            yield lambda done, _total: bar.update(task, completed=done)
        return
    started, next_report = time.perf_counter(), [0.1]

    def report(done: int, total: int) -> None:
        if done / total >= next_report[0] or done == total:
            elapsed = time.perf_counter() - started
            echo_err(f"simulate: {done:,}/{total:,} rows ({done / total:.0%}) in {elapsed:.1f} s")
            next_report[0] = done / total + 0.1

    yield report


def _check_out_dir(out: Path, config: dict[str, object]) -> None:
    """Refuse to write over anything but the same simulation (which rewrites the same bytes):
    another dataset's files, or a directory of other files, would be mixed with this one's."""
    if not out.is_dir() or not any(out.iterdir()):
        return
    truth = out / "truth.json"
    try:
        previous = orjson.loads(truth.read_bytes()).get("config")
    except (OSError, orjson.JSONDecodeError, AttributeError):
        fail(f"--out {out}: not empty and not a simulated dataset; choose an empty directory")
    if previous != config:
        fail(
            f"--out {out}: holds a dataset simulated with other settings (its truth.json); "
            "choose another directory or remove that one"
        )


def simulate_command(
    out: Annotated[
        Path,
        typer.Option(
            "--out", help="Output directory: new, empty, or holding this same simulation."
        ),
    ],
    rows: Annotated[int, typer.Option(help="Documents in all splits together.")] = 100_000,
    users: Annotated[int, typer.Option(help="Users in the profile table.")] = 2_000,
    seed: Annotated[int, typer.Option(help="Same seed and settings give the same bytes.")] = 0,
    fmt: Annotated[
        Literal["letor", "parquet"], typer.Option("--format", help="letor or parquet.")
    ] = "parquet",
    clicks: Annotated[
        bool, typer.Option("--clicks", help="Add served positions and clicks (PBM).")
    ] = False,
    sessions: Annotated[
        int | None,
        typer.Option(
            help=(
                "With --clicks: also write click_logs.jsonl, the service's log format with every "
                "train query served N times (session 1 as in the train file, the rest replayed "
                "with fresh noise), for ltr dataset --from-logs."
            ),
            show_default="none",
            metavar="N",
        ),
    ] = None,
    eta: Annotated[float, typer.Option(help="Examination theta_k = (1/k)^eta.")] = 1.0,
    click_noise: Annotated[
        float, typer.Option(help="epsilon: click probability of an examined grade-0 document.")
    ] = 0.1,
    user_types: Annotated[int, typer.Option(help="Latent user types.")] = 6,
    num_features: Annotated[
        int, typer.Option("--features", help="Feature columns (named ones, then noise).")
    ] = 20,
    min_docs: Annotated[int, typer.Option(help="Shortest query list.")] = 10,
    max_docs: Annotated[int, typer.Option(help="Longest query list.")] = 40,
    personalization: Annotated[
        float, typer.Option(help="Weight of the user-type affinity in relevance (0 = none).")
    ] = 1.0,
    label_noise: Annotated[float, typer.Option(help="sd of the relevance score noise.")] = 0.5,
    split: Annotated[str, typer.Option(help="train,vali,test shares of queries.")] = "0.8,0.1,0.1",
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Simulate users with latent types, documents, graded relevance and (optionally) clicks;
    write train/vali/test files, the user table and truth.json."""
    from trainer.simulate import SimulationConfig, simulate

    try:
        config = SimulationConfig(
            rows=rows,
            users=users,
            seed=seed,
            format=fmt,
            clicks=clicks,
            eta=eta,
            click_noise=click_noise,
            user_types=user_types,
            num_features=num_features,
            docs_per_query=(min_docs, max_docs),
            personalization=personalization,
            label_noise=label_noise,
            split=_parse_split(split),
        )
    except ValidationError as exc:
        fail(_config_error(exc))
    if sessions is not None and (sessions < 1 or not clicks):
        fail(f"--sessions {sessions}: give a number >= 1, with --clicks")
    if out.exists() and not out.is_dir():
        fail(f"--out {out}: exists and is not a directory")
    if rows < min_docs:
        fail(f"--rows {rows}: fewer than --min-docs {min_docs}, not one whole query")
    _check_out_dir(out, config.model_dump(mode="json"))
    # Written beside `out` and renamed into place (trainer.staged_dir): a run stopped
    # part-way leaves `out` as it was, an earlier run of the same simulation included.
    with clear_errors(OSError, ValueError), staged_dir(out) as into:
        with _progress(rows) as progress:
            summary = simulate(config, into, progress=progress)
        report = {**summary.model_dump(), "out_dir": str(out)}  # not the staging directory
        if sessions is not None:
            from trainer.simulate.sessions import write_session_logs

            logs = write_session_logs(into, fmt, sessions, seed, into / CLICK_LOG)
            report["click_log"] = {
                "file": CLICK_LOG,
                "sessions": sessions,
                "impressions": logs.impressions,
                "clicks": logs.clicks,
            }
    if as_json:
        typer.echo(orjson.dumps(report).decode())
        return
    for name, split_summary in summary.splits.items():
        if split_summary.queries == 0:
            echo_err(f"warning: {name} got no queries; give more --rows or another --split")
    parts = ", ".join(f"{name} {s.queries:,} queries" for name, s in summary.splits.items())
    typer.echo(
        f"wrote {summary.rows:,} rows ({parts}) and {summary.users:,} users to {out} "
        f"in {summary.seconds:.1f} s"
    )
    if sessions is not None:
        log = report["click_log"]
        typer.echo(
            f"wrote {log['impressions']:,} impressions ({sessions} sessions per train query, "
            f"{log['clicks']:,} clicks) to {out / CLICK_LOG}"
        )


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate_command)
