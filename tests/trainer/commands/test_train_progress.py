"""`ltr train`'s progress lines: the eta comes from the iterations after the first, whose time
includes numba compiling the kernels (a held-out trial: `iter 1/150 ... elapsed 37.9s eta
5643s` for a run of about a minute); elapsed stays the whole time."""

from __future__ import annotations

import io
import math

from tests.support.manual_clock import ManualClock
from trainer.progress import TrainingProgress


def test_compile_time_in_the_first_iteration_does_not_inflate_the_eta() -> None:
    clock, stream = ManualClock(), io.StringIO()
    with TrainingProgress(150, stream=stream, clock=clock, every=10) as progress:
        clock.advance(37.9)  # compiling, then the first tree
        progress.update(1, train_metric=0.5)
        for it in range(2, 21):
            clock.advance(0.2)
            progress.update(it, train_metric=0.5)
    first, tenth, twentieth = stream.getvalue().splitlines()
    assert first == "iter 1/150 train ndcg@10 0.5000 elapsed 37.9s"
    # 9 iterations in 1.8 s since the first: 140 more take 28 s (the old eta said 556 s).
    assert tenth == "iter 10/150 train ndcg@10 0.5000 elapsed 39.7s eta 28s"
    assert twentieth == "iter 20/150 train ndcg@10 0.5000 elapsed 41.7s eta 26s"


def test_the_pace_is_measured_from_the_first_update_whatever_its_iteration() -> None:
    """Updates that start later than iteration 1 (every 5th, say) still give an eta at once."""
    clock = ManualClock()
    with TrainingProgress(100, stream=io.StringIO(), clock=clock, mode="off") as progress:
        clock.advance(20.0)
        progress.update(5)
        assert math.isnan(progress.eta(5))  # unknown
        clock.advance(1.0)
        progress.update(10)
        assert progress.eta(10) == 18.0  # 0.2 s per iteration since the first update, 90 left
