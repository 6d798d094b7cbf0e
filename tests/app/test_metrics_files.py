"""prometheus-client's multiprocess files get their blocks when made or grown (a write into a
sparse page of a full filesystem killed the worker with SIGBUS), and a full disk costs series,
never a request."""

from __future__ import annotations

import errno
import logging
import os
import time
from pathlib import Path

import pytest

from app import metrics_files
from app.metrics_files import INITIAL_BYTES, AllocatedMmapedDict


def _allocated(path: Path) -> bool:
    stat = path.stat()
    return stat.st_blocks * 512 >= stat.st_size


def test_a_file_is_allocated_when_made_and_when_it_grows(tmp_path: Path) -> None:
    path = tmp_path / "counter_1.db"
    values = AllocatedMmapedDict(str(path))
    assert path.stat().st_size == INITIAL_BYTES and _allocated(path)
    for i in range(3000):  # ~100 bytes each: the file doubles a few times
        values.write_value(f"series-{i}", float(i), 0.0)
    assert path.stat().st_size > INITIAL_BYTES and _allocated(path)
    assert values.read_value("series-2999") == (2999.0, 0.0)
    again = AllocatedMmapedDict(str(path))  # a worker's file opened again keeps its values
    assert again.read_value("series-7") == (7.0, 0.0)
    values.close()
    again.close()


@pytest.fixture
def full_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_space(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(metrics_files, "_told", False)
    monkeypatch.setattr(metrics_files.os, "posix_fallocate", no_space)


def test_a_file_that_cannot_be_made_keeps_its_values_in_memory(
    tmp_path: Path, full_disk: None, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="app.metrics_files"):
        values = AllocatedMmapedDict(str(tmp_path / "gauge_livesum_1.db"))
        values.write_value("up", 1.0, 0.0)
        AllocatedMmapedDict(str(tmp_path / "histogram_1.db")).close()
    assert values.read_value("up") == (1.0, 0.0)
    values.close()
    assert [r.getMessage().split(":")[0] for r in caplog.records] == ["metrics directory full"]
    assert "its values are kept in memory" in caplog.records[0].getMessage()


def test_a_series_the_file_cannot_grow_for_is_not_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "counter_1.db"
    values = AllocatedMmapedDict(str(path))
    for i in range(300):  # fits the first 64 KiB
        values.write_value(f"series-{i}", 1.0, 0.0)

    def no_space(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(metrics_files, "_told", False)
    monkeypatch.setattr(metrics_files.os, "posix_fallocate", no_space)
    with caplog.at_level(logging.ERROR, logger="app.metrics_files"):
        for i in range(300, 3000):
            values.write_value(f"series-{i}", 2.0, 0.0)
    assert values.read_value("series-299") == (1.0, 0.0)  # recorded before: kept
    assert values.read_value("series-2999") == (0.0, 0.0)  # never recorded
    assert len(caplog.records) == 1 and "new series are not recorded" in caplog.text
    assert path.stat().st_size == INITIAL_BYTES and _allocated(path)
    values.write_value("series-5", 3.0, 0.0)  # the ones it holds still count
    assert values.read_value("series-5") == (3.0, 0.0)
    values.close()


def test_workers_make_their_files_allocated(tmp_path: Path) -> None:
    """In a process started with PROMETHEUS_MULTIPROC_DIR set, as `ltr serve` starts workers."""
    import subprocess
    import sys

    code = (
        "import app.metrics, prometheus_client.values as v; "
        "from app.metrics_files import AllocatedMmapedDict as A; "
        "assert v.MmapedDict is A; app.metrics.SHED.labels('shed').inc()"
    )
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)
    made = list(tmp_path.glob("*.db"))
    assert made and all(_allocated(p) for p in made)


def test_a_file_that_cannot_be_made_leaves_nothing_the_collector_trips_on(
    tmp_path: Path, full_disk: None
) -> None:
    """A worker replaced while the directory was full left 0-byte files: every scrape then
    failed (500) until the service restarted, space freed or not."""
    from app import metrics

    AllocatedMmapedDict(str(tmp_path / "counter_7.db")).close()
    assert list(tmp_path.glob("*.db")) == []
    left = tmp_path / "histogram_8.db"  # as a file made before this fix
    left.write_bytes(b"")
    making = tmp_path / f"gauge_livesum_{os.getpid()}.db"  # between open and allocation
    making.write_bytes(b"")
    old = time.time() - 2 * metrics.EMPTY_FILE_GRACE_S
    os.utime(left, (old, old))
    metrics.forget_dead_workers(tmp_path)
    assert list(tmp_path.glob("*.db")) == [making]
