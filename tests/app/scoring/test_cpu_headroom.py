from __future__ import annotations

from pathlib import Path

import pytest

from app.scoring.cpu_headroom import SAMPLE_INTERVAL_S, CpuHeadroom


def _stat(path: Path, user: int, system: int, idle: int, iowait: int, steal: int = 0) -> None:
    path.write_text(
        f"cpu  {user} 0 {system} {idle} {iowait} 0 0 {steal} 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n"
    )


def test_spare_cores_is_the_idle_share_of_the_last_interval(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    _stat(stat, user=100, system=100, idle=700, iowait=100)
    headroom = CpuHeadroom(str(stat))
    headroom.cores = 2
    assert headroom.spare_cores(now=0.0) == 0.0  # one reading: no interval yet
    # 800 jiffies later: 100 user, 100 system, 500 idle, 100 iowait -> 3/4 idle of 2 cores.
    _stat(stat, user=200, system=200, idle=1200, iowait=200)
    assert headroom.spare_cores(now=SAMPLE_INTERVAL_S) == pytest.approx(1.5)
    # Read again only after the interval: a busy second in between is not seen yet.
    _stat(stat, user=1000, system=200, idle=1200, iowait=200)
    assert headroom.spare_cores(now=SAMPLE_INTERVAL_S * 1.5) == pytest.approx(1.5)
    assert headroom.spare_cores(now=SAMPLE_INTERVAL_S * 2) == 0.0


def test_stolen_time_is_not_spare(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    _stat(stat, user=0, system=0, idle=0, iowait=0)
    headroom = CpuHeadroom(str(stat))
    headroom.cores = 2
    headroom.spare_cores(now=0.0)
    _stat(stat, user=0, system=0, idle=100, iowait=0, steal=300)  # the hypervisor took most
    assert headroom.spare_cores(now=1.0) == pytest.approx(0.5)


@pytest.mark.parametrize("content", [None, "", "intr 1 2 3\n", "cpu 1 2\n"])
def test_no_readable_stat_means_no_spare_core(tmp_path: Path, content: str | None) -> None:
    stat = tmp_path / "stat"
    if content is not None:
        stat.write_text(content)
    headroom = CpuHeadroom(str(stat))
    assert headroom.spare_cores(now=0.0) == 0.0
    assert headroom.spare_cores(now=1.0) == 0.0
