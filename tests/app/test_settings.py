"""Settings that must agree with the code's own defaults."""

from app.scoring.compiled import DEFAULT_PARALLEL_MIN_ROWS
from app.settings import Settings


def test_one_default_for_splitting_a_request_over_threads() -> None:
    assert Settings().parallel_min_rows == DEFAULT_PARALLEL_MIN_ROWS
