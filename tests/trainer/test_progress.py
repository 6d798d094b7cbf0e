from __future__ import annotations

import io
import time

from tests.support.manual_clock import ManualClock
from trainer.progress import TrainingProgress


class TtyStream(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_lines_format_and_schedule() -> None:
    clock, stream = ManualClock(), io.StringIO()
    with TrainingProgress(100, stream=stream, clock=clock) as progress:
        assert progress.mode == "lines"  # StringIO is not a terminal
        for it in range(1, 13):
            clock.now += 0.5
            progress.update(it, train_metric=0.71, valid_metric=0.69)
    lines = stream.getvalue().splitlines()
    # No eta on the first line: one iteration tells no pace (tests/trainer/commands/
    # test_train_progress.py); from the second on, the pace since the first.
    assert lines[0] == "iter 1/100 train ndcg@10 0.7100 valid ndcg@10 0.6900 elapsed 0.5s"
    # every total/20 = 5 iterations, and the last update when the context exits
    assert [line.split()[1] for line in lines] == ["1/100", "5/100", "10/100", "12/100"]
    assert lines[-1].endswith("elapsed 6.0s eta 44s")


def test_a_validation_metric_of_its_own_is_named_as_such() -> None:
    # --unbiased validates on IPW-weighted DCG while the training metric stays NDCG.
    stream = io.StringIO()
    with TrainingProgress(1, stream=stream, metric="ndcg@10", valid_metric="IPW dcg@10") as p:
        p.update(1, train_metric=0.98, valid_metric=0.91)
    line = stream.getvalue().splitlines()[0]
    assert line.startswith("iter 1/1 train ndcg@10 0.9800 valid IPW dcg@10 0.9100 elapsed")


def test_missing_metrics_and_units() -> None:
    clock, stream = ManualClock(), io.StringIO()
    with TrainingProgress(4, stream=stream, clock=clock, unit="epoch", metric="ndcg@5") as p:
        clock.now += 2.0
        p.update(1, train_metric=0.5)
        clock.now += 2.0
        p.update(2)
    lines = stream.getvalue().splitlines()
    assert lines == [
        "epoch 1/4 train ndcg@5 0.5000 elapsed 2.0s",
        "epoch 2/4 elapsed 4.0s eta 4s",
    ]


def test_slow_iterations_still_log_every_ten_seconds() -> None:
    clock, stream = ManualClock(), io.StringIO()
    with TrainingProgress(1000, stream=stream, clock=clock, every=100) as progress:
        for it in range(1, 6):
            clock.now += 4.0
            progress.update(it, 0.1, None)
    printed = [line.split()[1] for line in stream.getvalue().splitlines()]
    # 1 is the first, 4 comes 12 s after it, 5 is the last update (printed on exit)
    assert printed == ["1/1000", "4/1000", "5/1000"]


def test_no_duplicate_final_line_and_messages() -> None:
    stream = io.StringIO()
    with TrainingProgress(2, stream=stream) as progress:
        progress.update(1, 0.2, 0.3)
        progress.update(2, 0.4, 0.5)
        progress.message("early stopping at 2")
    lines = stream.getvalue().splitlines()
    assert [line.split()[1] for line in lines[:2]] == ["1/2", "2/2"]
    assert lines[2] == "early stopping at 2"
    assert len(lines) == 3


def test_bar_on_a_terminal() -> None:
    stream = TtyStream()
    with TrainingProgress(50, stream=stream) as progress:
        assert progress.mode == "bar"
        progress.update(10, train_metric=0.8123, valid_metric=0.7456)
        progress.message("hello")
    out = stream.getvalue()
    assert "ndcg@10" in out and "10/50" in out
    assert "train 0.8123 valid 0.7456" in out
    assert "hello" in out
    assert "iter 10/50" not in out  # no plain lines on a terminal


def test_off_prints_nothing() -> None:
    stream = io.StringIO()
    with TrainingProgress(3, stream=stream, mode="off") as progress:
        progress.update(1, 0.1, 0.2)
        progress.message("quiet")
    assert stream.getvalue() == ""


def test_eta_extrapolates_average_iteration_time_after_the_first() -> None:
    clock = ManualClock()
    progress = TrainingProgress(10, stream=io.StringIO(), clock=clock, mode="off")
    with progress:
        clock.now += 30.0
        progress.update(1)
        clock.now += 2.0
        assert progress.eta(3) == 7.0
        assert progress.eta(10) == 0.0


def test_updates_after_the_fact_say_no_time_and_draw_no_bar() -> None:
    # A Dask cluster's rounds arrive when training ends: every line said the whole run's
    # elapsed time and an eta computed from it (a held-out trial: `elapsed 59.1s eta 5849s`).
    clock, stream = ManualClock(), TtyStream()
    with TrainingProgress(100, stream=stream, clock=clock, live=False) as progress:
        assert progress.mode == "lines"  # not a bar, even on a terminal
        clock.now += 59.1
        for it in range(1, 13):
            progress.update(it, valid_metric=0.8 + it / 100)
    lines = stream.getvalue().splitlines()
    assert lines[0] == "iter 1/100 valid ndcg@10 0.8100"
    assert [line.split()[1] for line in lines] == ["1/100", "5/100", "10/100", "12/100"]
    assert not any("elapsed" in line or "eta" in line for line in lines)


def test_a_slow_first_iteration_is_explained_once() -> None:
    """A first run's compile kept `ltr train` silent for ~28 s before its first line."""
    stream = io.StringIO()
    note = "still on the first tree: compiling"
    with TrainingProgress(
        10, stream=stream, mode="lines", slow_start_note=note, slow_start_seconds=0.05
    ) as progress:
        deadline = time.monotonic() + 10
        while note not in stream.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)
        progress.update(1, 0.5, 0.4)
    lines = stream.getvalue().splitlines()
    assert lines[0] == f"iter 0/10 {note}" and lines[1].startswith("iter 1/10")
    quick = io.StringIO()
    with TrainingProgress(10, stream=quick, mode="lines", slow_start_note=note) as progress:
        progress.update(1, 0.5, 0.4)
    assert note not in quick.getvalue()  # the first update came in time; the timer is cancelled
