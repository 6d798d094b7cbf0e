import numpy as np
import pytest

from trainer.lambdamart.binning import ALL_REAL_LEFT, fit_bins


def test_thresholds_compare_exactly_like_the_bins():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(5000, 3)).astype(np.float32)
    x[:, 1] = np.round(x[:, 1] * 3)  # few distinct values
    x[rng.random(x.shape) < 0.1] = np.nan
    mapper = fit_bins(x, max_bin=32)
    bins = mapper.transform(x)
    assert bins.dtype == np.uint8 and bins.shape == (3, 5000)
    for f in range(3):
        col = x[:, f].astype(np.float64)
        real = ~np.isnan(col)
        assert np.all(bins[f][~real] == mapper.n_real[f])
        assert mapper.n_real[f] <= 32
        for b in range(mapper.n_real[f]):
            threshold = mapper.threshold(f, b)
            assert np.array_equal(col[real] <= threshold, bins[f][real] <= b)
    assert mapper.threshold(0, int(mapper.n_real[0]) - 1) == ALL_REAL_LEFT


def test_unseen_values_bin_consistently_with_thresholds():
    train = np.linspace(0, 1, 101, dtype=np.float32)[:, None]
    mapper = fit_bins(train, max_bin=10)
    other = np.random.default_rng(1).uniform(-1, 2, (1000, 1)).astype(np.float32)
    bins = mapper.transform(other)[0]
    for b in range(int(mapper.n_real[0])):
        assert np.array_equal(other[:, 0].astype(np.float64) <= mapper.threshold(0, b), bins <= b)


def test_few_distinct_values_get_a_bin_each_and_quantiles_balance():
    x = np.repeat(np.array([3.0, 1.0, 2.0], dtype=np.float32), [5, 50, 7])[:, None]
    mapper = fit_bins(x, max_bin=255)
    assert mapper.n_real[0] == 3
    np.testing.assert_array_equal(mapper.edges[0, :3], [1.0, 2.0, 3.0])
    y = np.arange(10_000, dtype=np.float32)[:, None]
    counts = np.bincount(fit_bins(y, max_bin=16).transform(y)[0])
    assert counts.size == 16 and counts.min() >= 600 and counts.max() <= 650


def test_all_nan_and_constant_columns():
    x = np.full((10, 2), np.nan, dtype=np.float32)
    x[:, 1] = 4.0
    mapper = fit_bins(x, max_bin=8)
    np.testing.assert_array_equal(mapper.n_real, [0, 1])
    bins = mapper.transform(x)
    assert np.all(bins[0] == 0) and np.all(bins[1] == 0)


def test_wide_bins_use_uint16_and_bad_shapes_fail():
    x = np.arange(1000, dtype=np.float32)[:, None]
    assert fit_bins(x, max_bin=300).transform(x).dtype == np.uint16
    with pytest.raises(ValueError, match="expected features"):
        fit_bins(x, max_bin=8).transform(np.zeros((3, 2), dtype=np.float32))
