"""Streaming: memory does not grow with the number of rows."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pyarrow as pa
import pytest

from trainer.simulate import SimulationConfig, simulate

MB = 1 << 20


def _streaming_peaks(config: SimulationConfig, out: Path) -> tuple[int, int]:
    """(peak numpy/Python bytes, peak Arrow bytes) while chunks stream, after the first chunk
    (so the one-off set-up, users and label calibration, is left out)."""
    arrow_peak = [0]
    tracemalloc.start()
    try:

        def on_chunk(done: int, _total: int) -> None:
            if done == first_chunk[0] or first_chunk[0] == 0:
                first_chunk[0] = done
                tracemalloc.reset_peak()
            arrow_peak[0] = max(arrow_peak[0], pa.total_allocated_bytes())

        first_chunk = [0]
        simulate(config, out, progress=on_chunk)
        return tracemalloc.get_traced_memory()[1], arrow_peak[0]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("fmt", ["parquet", "letor"])
def test_peak_memory_does_not_grow_with_rows(tmp_path: Path, fmt: str) -> None:
    small = SimulationConfig(
        rows=16_000,
        users=50,
        chunk_queries=64,
        row_group_rows=4_096,
        format=fmt,
        clicks=True,
    )
    large = small.model_copy(update={"rows": 64_000})
    simulate(small.model_copy(update={"rows": 1_000}), tmp_path / "warm-up")  # lazy imports
    peak_small, arrow_small = _streaming_peaks(small, tmp_path / "small")
    peak_large, arrow_large = _streaming_peaks(large, tmp_path / "large")
    # Four times the rows (4 MB more features alone, more in the generator's float64
    # temporaries) within the noise of one chunk.
    assert peak_large < peak_small + MB // 2, (peak_small, peak_large)
    assert arrow_large < arrow_small + MB // 2, (arrow_small, arrow_large)


@pytest.mark.slow
def test_a_million_rows_stream_in_bounded_memory(tmp_path: Path) -> None:
    config = SimulationConfig(rows=1_000_000, users=10_000, clicks=True)
    tracemalloc.start()
    try:
        arrow_peak = [0]

        def on_chunk(_done: int, _total: int) -> None:
            arrow_peak[0] = max(arrow_peak[0], pa.total_allocated_bytes())

        summary = simulate(config, tmp_path, progress=on_chunk)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert summary.rows == 1_000_000
    # The features alone are 80 MB; the run holds one chunk and one row group per split.
    assert peak < 64 * MB, peak / MB
    assert arrow_peak[0] < 96 * MB, arrow_peak[0] / MB
