"""Fixtures every test package may use, registered once."""

pytest_plugins = [
    "tests.support.redis_server",
    "tests.support.dask_cluster",
    "tests.support.gc_pauses",
    "tests.support.compiled_kernels",
    "tests.support.parallel_runs",
]
