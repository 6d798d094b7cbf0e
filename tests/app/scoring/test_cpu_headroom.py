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
    headroom = CpuHeadroom(str(stat), str(tmp_path))
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
    headroom = CpuHeadroom(str(stat), str(tmp_path))
    headroom.cores = 2
    headroom.spare_cores(now=0.0)
    _stat(stat, user=0, system=0, idle=100, iowait=0, steal=300)  # the hypervisor took most
    assert headroom.spare_cores(now=1.0) == pytest.approx(0.5)


@pytest.mark.parametrize("content", [None, "", "intr 1 2 3\n", "cpu 1 2\n"])
def test_no_readable_stat_means_no_spare_core(tmp_path: Path, content: str | None) -> None:
    stat = tmp_path / "stat"
    if content is not None:
        stat.write_text(content)
    headroom = CpuHeadroom(str(stat), str(tmp_path))
    assert headroom.spare_cores(now=0.0) == 0.0
    assert headroom.spare_cores(now=1.0) == 0.0


def _container(path: Path, limit: str, used_us: int) -> None:
    (path / "cpu.max").write_text(f"{limit} 100000\n")
    (path / "cpu.stat").write_text(f"usage_usec {used_us}\nuser_usec 1\nsystem_usec 2\n")


def _sampled_once(tmp_path: Path, cores: int, limit: str) -> tuple[CpuHeadroom, Path]:
    stat = tmp_path / "stat"
    _stat(stat, user=0, system=0, idle=0, iowait=0)
    _container(tmp_path, limit, used_us=0)
    headroom = CpuHeadroom(str(stat), str(tmp_path))
    headroom.cores = cores
    headroom.spare_cores(now=0.0)
    return headroom, stat


def test_a_container_limit_caps_the_idle_cores_of_the_machine(tmp_path: Path) -> None:
    headroom, stat = _sampled_once(tmp_path, cores=64, limit="200000")  # 2 cores of 64
    # The machine is 7/8 idle (56 cores), the container used 1.5 cores of its 2 for 1 s.
    _stat(stat, user=100, system=0, idle=700, iowait=0)
    _container(tmp_path, "200000", used_us=1_500_000)
    assert headroom.spare_cores(now=1.0) == pytest.approx(0.5)
    # Its limit used up: nothing spare, however idle the machine.
    _stat(stat, user=200, system=0, idle=1400, iowait=0)
    _container(tmp_path, "200000", used_us=3_600_000)
    assert headroom.spare_cores(now=2.0) == 0.0


def test_no_container_limit_leaves_the_machine_reading(tmp_path: Path) -> None:
    headroom, stat = _sampled_once(tmp_path, cores=4, limit="max")
    _stat(stat, user=100, system=0, idle=300, iowait=0)
    _container(tmp_path, "max", used_us=9_000_000)
    assert headroom.spare_cores(now=1.0) == pytest.approx(3.0)


@pytest.mark.parametrize(
    ("content", "idle"),
    [
        ("0.50 0.40 0.30 1/180 4242\n", 1.0),  # only the caller runs: one core idle
        ("2.10 1.90 1.50 2/180 4242\n", 0.0),
        ("9.00 8.00 7.00 7/180 4242\n", 0.0),
        ("", 0.0),
        (None, 0.0),  # not Linux: never idle
    ],
)
def test_idle_now_counts_the_cores_nothing_runs_on(
    tmp_path: Path, content: str | None, idle: float
) -> None:
    loadavg = tmp_path / "loadavg"
    if content is not None:
        loadavg.write_text(content)
    headroom = CpuHeadroom(str(tmp_path / "stat"), str(tmp_path), str(loadavg))
    headroom.cores = 2
    assert headroom.idle_now() == idle
