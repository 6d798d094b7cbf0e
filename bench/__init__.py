"""Benchmark scripts: `python -m bench.<script>`; never part of the test suite."""
