"""How `pytest -n 2` (pytest-xdist, what `make test` runs) shares the suite between workers.

A unit of work is a test directory, not a file: a directory's session fixtures (trained
models, published registries) are then built by one worker only. The tests that share the
`make run` demo server form one unit, the Dask tests another, and each real-process file in
tests/integration is its own. The longest units are handed out first, so neither worker is
left with one at the end. (xdist's own `--dist loadgroup` reads groups from node ids, which
pytest 9.2 no longer lets a plugin rename.)
"""

from __future__ import annotations

from typing import Any

import pytest

DEMO_SERVER_FILES = ("test_examples.py", "test_quickstart.py", "test_metrics_workers.py")
DASK_FILES = ("test_lightgbm_dask.py", "test_dask_parquet.py", "test_nightly_cluster.py")
# Units measured at 30 s or more in a serial run, longest first; the rest follow in file order.
LONGEST_FIRST = (
    "demo",
    "dask",
    "tests/app/api",
    "tests/integration/test_service.py",
    "tests/integration/test_overload.py",
    "tests/integration/test_experiment_loop.py",
    "tests/trainer/commands",
    "tests/trainer/nightly",
)


def unit_of(nodeid: str) -> str:
    path = nodeid.split("::", 1)[0]
    directory, _, name = path.rpartition("/")
    if name in DEMO_SERVER_FILES:
        return "demo"
    if name in DASK_FILES:
        return "dask"
    return path if directory == "tests/integration" else directory


def _rank(item: pytest.Item) -> int:
    unit = unit_of(item.nodeid)
    return LONGEST_FIRST.index(unit) if unit in LONGEST_FIRST else len(LONGEST_FIRST)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if hasattr(config, "workerinput"):  # a worker: the controller hands out units in this order
        items.sort(key=_rank)  # stable: file order within and after the longest units


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler import LoadScopeScheduling

    class ByUnit(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

        def remove_node(self, node: Any) -> str | None:
            """A crashed worker's work, fixed for xdist 3.8: its completed units were queued
            again as empty work that no worker ever completes, and the run hung with idle
            workers (a CI run whose worker the OOM killer took; pytest-xdist #1378), and the
            test it crashed on went to the replacement to crash it again (#1371)."""
            workload = self.assigned_work.get(node, {})
            for scope in [s for s, unit in workload.items() if all(unit.values())]:
                del workload[scope]
            crashed: str | None = super().remove_node(node)
            if crashed is not None:
                for scope, unit in list(self.workqueue.items()):
                    if crashed in unit:
                        unit[crashed] = True  # reported failed by xdist; not run again
                    if all(unit.values()):
                        del self.workqueue[scope]
            return crashed

    config.option.loadscopereorder = False  # keep the order above
    return ByUnit(config, log)
