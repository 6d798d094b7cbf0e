"""Fixtures every test package may use, registered once."""

from hypothesis import settings

pytest_plugins = [
    "tests.support.redis_server",
    "tests.support.dask_cluster",
    "tests.support.gc_pauses",
    "tests.support.compiled_kernels",
    "tests.support.parallel_runs",
]

# Hypothesis's per-example deadline (200 ms) is a timing assertion, not a property: on a shared
# 2-vCPU machine one example in thousands stalls past it (a VM pause, a collection), and a
# trivial example (0.12 ms when re-run) that took 320 ms once failed a suite otherwise green.
# How fast things run is bench/'s to measure; a test names its own deadline where it means one.
settings.register_profile("ltr", deadline=None)
settings.load_profile("ltr")
