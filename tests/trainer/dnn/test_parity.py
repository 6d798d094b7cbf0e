from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch", reason="the dnn extra (torch) is not installed")

from trainer.data.dataset import RankingDataset
from trainer.data.letor import read_letor
from trainer.dnn import parity
from trainer.dnn.options import DNNOptions
from trainer.dnn.parity import PARITY_MAX_ABS_DIFF, ParityReport, same_ranking
from trainer.engines.dnn_model import train_dnn_model
from trainer.export import ExportError

DEMO = Path(__file__).parents[3] / "trainer" / "demo_data"
FAST = {"hidden": [16], "epochs": 2, "early_stopping_rounds": 2, "threads": 1, "dropout": 0.0}
TOL = 1e-5


def test_a_tie_broken_either_way_is_the_same_ranking() -> None:
    onnx = np.array([0.5, 0.2, 0.2, -1.0], dtype=np.float32)
    torch = onnx.copy()
    torch[2] = np.nextafter(torch[2], np.float32(1))  # the duplicate one ulp above its twin
    assert same_ranking(onnx, torch, TOL) and same_ranking(torch, onnx, TOL)
    torch[2] = 0.2 + 0.9 * TOL  # still within the tolerance
    assert same_ranking(onnx, torch, TOL)


def test_a_reversal_beyond_the_tolerance_is_not() -> None:
    onnx = np.array([0.3, 0.2, 0.1], dtype=np.float64)
    assert not same_ranking(onnx, np.array([0.3, 0.1, 0.2]), TOL)
    # Separated by more than the tolerance in one, tied in the other: the served order of
    # those two is arbitrary, so that is a different ranking too.
    assert not same_ranking(onnx, np.array([0.3, 0.2, 0.2]), TOL)
    # A chain of near-ties: neighbours within the tolerance, the ends beyond it, reversed.
    chain = np.array([0.0, 0.6, 1.2]) * TOL
    assert not same_ranking(chain, chain[::-1].copy(), TOL)
    assert same_ranking(np.zeros(0), np.zeros(0), TOL)


def with_duplicates(data: RankingDataset, queries: int) -> RankingDataset:
    """The first `queries` lists with each list's first document twice in a row (LETOR
    collections have exact duplicates)."""
    rows, labels, offsets = [], [], [0]
    for q in range(queries):
        lo, hi = data.group_offsets[q], data.group_offsets[q + 1]
        take = np.r_[lo, lo:hi]
        rows.append(data.features[take])
        labels.append(data.labels[take])
        offsets.append(offsets[-1] + take.size)
    return RankingDataset(
        np.concatenate(rows), np.concatenate(labels), np.array(offsets), data.query_ids[:queries]
    )


@pytest.fixture(scope="module")
def duplicated() -> tuple[RankingDataset, RankingDataset]:
    train = read_letor(DEMO / "rank.train")
    test = read_letor(DEMO / "rank.test", train.num_features)
    return with_duplicates(train, 60), with_duplicates(test, 20)


def nudged_torch_scores(step: float):
    """PyTorch's scores with each list's duplicated first row moved by `step` (the real runs
    saw one ulp between twins in PyTorch and none in onnxruntime)."""
    real = parity.torch_scores

    def scores(ranker, features, user=None):
        out = real(ranker, features, user).copy()
        out[1] = np.nextafter(out[1], np.float32(np.inf)) if step == 0 else out[1] + step
        return out

    return scores


def test_duplicated_rows_one_ulp_apart_keep_the_version(duplicated, tmp_path, monkeypatch):
    train, valid = duplicated
    monkeypatch.setattr(parity, "torch_scores", nudged_torch_scores(0.0))
    out = tmp_path / "dnn" / "v1"
    assert train_dnn_model(train, valid, DNNOptions(**FAST), out).model_dir == out
    assert (out / "model.onnx").is_file()


def test_scores_beyond_the_tolerance_remove_the_version(duplicated, tmp_path, monkeypatch):
    train, valid = duplicated
    # 1e-3 on scores of order 1: far beyond rounding, a graph that computes something else.
    monkeypatch.setattr(parity, "torch_scores", nudged_torch_scores(100 * PARITY_MAX_ABS_DIFF))
    out = tmp_path / "dnn" / "v1"
    with pytest.raises(ExportError, match="onnxruntime scores list 0 differently"):
        train_dnn_model(train, valid, DNNOptions(**FAST), out)
    assert not out.exists()


def scaled(monkeypatch: pytest.MonkeyPatch, factor: float, onnx_ulps: int = 0) -> None:
    """Both runtimes' scores times `factor` (as a network with huge weights or inputs gives),
    onnxruntime's `onnx_ulps` float32 steps above PyTorch's: rounding at that magnitude."""
    real_torch, real_onnx = parity.torch_scores, parity.onnx_scores

    def torch_scores(ranker, features, user=None):
        return (real_torch(ranker, features, user) * np.float32(factor)).astype(np.float32)

    def onnx_scores(session, features, user=None):
        out = (real_onnx(session, features, user) * np.float32(factor)).astype(np.float32)
        for _ in range(onnx_ulps):
            out = np.nextafter(out, np.float32(np.inf))
        return out

    monkeypatch.setattr(parity, "torch_scores", torch_scores)
    monkeypatch.setattr(parity, "onnx_scores", onnx_scores)


def test_rounding_relative_to_large_scores_keeps_the_version(duplicated, tmp_path, monkeypatch):
    # Constant training features give std 1, so held-out features that vary give scores in the
    # hundreds, where one float32 ulp is 3e-5: the same model in both runtimes.
    train, valid = duplicated
    scaled(monkeypatch, 1e4, onnx_ulps=2)
    out = tmp_path / "dnn" / "v1"
    assert train_dnn_model(train, valid, DNNOptions(**FAST), out).model_dir == out


def test_huge_scores_keep_the_version_and_say_the_training_diverged(
    duplicated, tmp_path, monkeypatch, capsys
):
    train, valid = duplicated
    scaled(monkeypatch, 1e12, onnx_ulps=1)
    out = tmp_path / "dnn" / "v1"
    assert train_dnn_model(train, valid, DNNOptions(**FAST), out).model_dir == out
    err = capsys.readouterr().err
    assert "warning: scores reach " in err and "the training probably diverged" in err
    assert "differently" not in err


def test_non_finite_scores_say_the_training_diverged(duplicated, tmp_path, monkeypatch):
    train, valid = duplicated
    scaled(monkeypatch, float("nan"))
    out = tmp_path / "dnn" / "v1"
    with pytest.raises(ExportError, match="NaN or infinite: the training diverged"):
        train_dnn_model(train, valid, DNNOptions(**FAST), out)
    assert not out.exists()


def test_the_report_warns_only_about_huge_scores() -> None:
    assert ParityReport(max_abs_diff=3e-5, max_abs_score=345.0).warning is None
    warning = ParityReport(max_abs_diff=1.7e7, max_abs_score=1.7e14).warning
    assert warning is not None and "1.7e+14" in warning and "--learning-rate" in warning
