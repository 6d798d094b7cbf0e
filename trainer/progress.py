"""Progress of long training runs: a rich bar on a terminal, plain log lines elsewhere.

Every engine (native LambdaMART, LightGBM, DNN) reports through `TrainingProgress`:

    with TrainingProgress(total=500, metric="ndcg@10") as progress:
        for it in ...:
            progress.update(it + 1, train_metric=0.71, valid_metric=0.69)

Plain lines look like `iter 10/100 train ndcg@10 0.7100 valid ndcg@10 0.6900 elapsed 3.2s eta 28s`
(the first says no eta: one iteration, compile time and all, tells no pace).
"""

from __future__ import annotations

import math
import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Literal, TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

Mode = Literal["auto", "bar", "lines", "off"]
LINE_INTERVAL_SECONDS = 10.0  # a plain line at least this often, however slow the iterations


class TrainingProgress:
    """Context manager reporting (iteration, total, train metric, valid metric) updates.

    `total` is an upper bound (early stopping may end sooner). `unit` names an iteration in the
    lines ("iter", "epoch"); `description` heads the bar (default: the metric's name).
    mode "auto" picks the bar when `stream` is a terminal.
    Plain lines come at the first iteration, every `every` iterations (default total/20),
    at least every 10 s, and for the last update when the context exits.
    `live=False`: the updates come after the fact (a Dask cluster reports its rounds when it
    ends), so the lines say no elapsed time or eta, and there is no bar.
    """

    def __init__(
        self,
        total: int,
        *,
        metric: str = "ndcg@10",
        valid_metric: str | None = None,
        unit: str = "iter",
        description: str | None = None,
        stream: TextIO | None = None,
        mode: Mode = "auto",
        every: int | None = None,
        clock: Callable[[], float] = time.perf_counter,
        live: bool = True,
        slow_start_note: str | None = None,
        slow_start_seconds: float = 10.0,
    ) -> None:
        self.total = max(int(total), 1)
        self.metric = metric
        self.valid_metric = valid_metric or metric
        self.unit = unit
        self.description = description or metric
        self.stream = stream if stream is not None else sys.stderr
        if mode == "auto":
            mode = "bar" if self.stream.isatty() and live else "lines"
        self.mode = mode
        self.live = live
        self.every = every or max(1, self.total // 20)
        self._clock = clock
        self._start = clock()
        self._last_line_at = self._start
        self._last: tuple[int, float | None, float | None] | None = None
        self._last_printed: int | None = None
        # (iteration, time) of the first update: the eta's pace is measured from it, because
        # the first iteration also pays one-off costs (numba compiling the kernels took 37 s
        # of a 38 s first tree: its eta read 5643 s for a run of a few minutes).
        self._first: tuple[int, float] | None = None
        self._bar: Progress | None = None
        self._task: TaskID | None = None
        # Plain lines only: said once if the first update is this late (a first run's numba
        # compile kept `ltr train` silent for ~28 s before its first line).
        self._slow_start = (
            threading.Timer(slow_start_seconds, self._say_slow_start, (slow_start_note,))
            if slow_start_note is not None and live and mode == "lines"
            else None
        )

    def _say_slow_start(self, note: str) -> None:
        if self._first is None:
            print(f"{self.unit} 0/{self.total} {note}", file=self.stream, flush=True)

    def __enter__(self) -> TrainingProgress:
        self._start = self._last_line_at = self._clock()
        if self._slow_start is not None:
            self._slow_start.daemon = True
            self._slow_start.start()
        if self.mode == "bar":
            console = Console(file=self.stream, force_terminal=True)
            # Short columns so the whole line fits an 80-column terminal.
            self._bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(bar_width=15),
                MofNCompleteColumn(),
                TextColumn("{task.fields[metrics]}"),
                TimeElapsedColumn(),
                TextColumn("eta"),
                TimeRemainingColumn(),
                console=console,
            )
            self._bar.start()
            self._task = self._bar.add_task(self.description, total=self.total, metrics="")
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._slow_start is not None:
            self._slow_start.cancel()
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
        elif self.mode == "lines" and self._last and self._last[0] != self._last_printed:
            self._print_line(*self._last)

    @property
    def elapsed(self) -> float:
        return self._clock() - self._start

    def eta(self, iteration: int) -> float:
        """Seconds left if the remaining iterations take as long, on average, as those done
        since the first update; NaN (unknown) until one is."""
        left = max(self.total - iteration, 0)
        if left == 0:
            return 0.0
        if self._first is None or iteration <= self._first[0]:
            return float("nan")
        first_iteration, first_at = self._first
        return (self._clock() - first_at) / (iteration - first_iteration) * left

    def update(
        self, iteration: int, train_metric: float | None = None, valid_metric: float | None = None
    ) -> None:
        """`iteration` iterations are done (1-based), with their latest metrics (None = unknown)."""
        self._last = (iteration, train_metric, valid_metric)
        if self._first is None:
            self._first = (iteration, self._clock())
        if self._bar is not None and self._task is not None:
            self._bar.update(
                self._task,
                completed=min(iteration, self.total),
                metrics=self._metrics_text(train_metric, valid_metric, named=False),
            )
        elif self.mode == "lines":
            now = self._clock()
            due = iteration == 1 or iteration % self.every == 0 or iteration >= self.total
            if due or (self.live and now - self._last_line_at >= LINE_INTERVAL_SECONDS):
                self._print_line(iteration, train_metric, valid_metric)

    def message(self, text: str) -> None:
        """A line of text that does not break the bar (e.g. "early stopping at 120")."""
        if self._bar is not None:
            self._bar.console.print(text, markup=False, highlight=False)
        elif self.mode != "off":
            print(text, file=self.stream, flush=True)

    def _metrics_text(
        self, train_metric: float | None, valid_metric: float | None, named: bool = True
    ) -> str:
        """`train ndcg@10 0.7100 valid ndcg@10 0.6900` (the bar names the metric once, first;
        a validation metric of its own is named there too)."""
        name = f" {self.metric}" if named else ""
        valid_name = f" {self.valid_metric}" if named or self.valid_metric != self.metric else ""
        parts = []
        if train_metric is not None:
            parts.append(f"train{name} {train_metric:.4f}")
        if valid_metric is not None:
            parts.append(f"valid{valid_name} {valid_metric:.4f}")
        return " ".join(parts)

    def _print_line(
        self, iteration: int, train_metric: float | None, valid_metric: float | None
    ) -> None:
        metrics = self._metrics_text(train_metric, valid_metric)
        line = f"{self.unit} {iteration}/{self.total} {metrics}".rstrip()
        if self.live:
            line += f" elapsed {self.elapsed:.1f}s"
            eta = self.eta(iteration)
            if not math.isnan(eta):
                line += f" eta {eta:.0f}s"
        print(line, file=self.stream, flush=True)
        self._last_printed = iteration
        self._last_line_at = self._clock()
