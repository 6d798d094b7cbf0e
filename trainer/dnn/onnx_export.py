"""A trained ranker → a self-contained `model.onnx` as the service runs it: one query list per
call, input `features` float32 [N, F] (raw, NaN = missing; N dynamic), optional input `user`
float32 [1, D] (the list's user-cluster embedding row), output `scores` float32 [N].
Standardisation and NaN imputation are inside the graph."""

from __future__ import annotations

import copy
import tempfile
import warnings
from pathlib import Path

import numpy as np
import onnx
import torch
from torch import nn

from trainer.dnn.models import Ranker

OPSET = 17
FEATURES_INPUT = "features"
USER_INPUT = "user"
SCORES_OUTPUT = "scores"


class _ServingGraph(nn.Module):
    def __init__(self, ranker: Ranker) -> None:
        super().__init__()
        self.ranker = ranker

    def forward(self, features: torch.Tensor, user: torch.Tensor | None = None) -> torch.Tensor:
        return self.ranker.score_list(features, user)


def export_onnx(ranker: Ranker, opset: int = OPSET) -> bytes:
    """The serialised ONNX model (weights inline, no external data files)."""
    graph = _ServingGraph(copy.deepcopy(ranker).eval())
    example_features = torch.zeros(3, ranker.num_features)
    inputs: tuple[torch.Tensor, ...] = (example_features,)
    names = [FEATURES_INPUT]
    if ranker.embedding is not None:
        inputs += (torch.zeros(1, ranker.embedding_dim),)
        names.append(USER_INPUT)
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        # The TorchScript exporter is deprecated in favour of the torch.export one, which needs
        # onnxscript (not a dependency); its output is the same plain opset-17 graph.
        warnings.simplefilter("ignore", category=DeprecationWarning)
        warnings.simplefilter("ignore", category=FutureWarning)
        warnings.filterwarnings("ignore", message=".*legacy TorchScript-based ONNX export.*")
        path = Path(tmp) / "model.onnx"
        torch.onnx.export(
            graph,
            inputs,
            path,
            dynamo=False,
            opset_version=opset,
            input_names=names,
            output_names=[SCORES_OUTPUT],
            dynamic_axes={FEATURES_INPUT: {0: "n_docs"}, SCORES_OUTPUT: {0: "n_docs"}},
        )
        written = sorted(p.name for p in Path(tmp).iterdir())
        if written != ["model.onnx"]:
            raise RuntimeError(f"the ONNX export wrote external data files: {written}")
        model = onnx.load_from_string(path.read_bytes())
    onnx.checker.check_model(model, full_check=True)
    return model.SerializeToString()


def onnx_session(model_bytes: bytes, threads: int = 1) -> object:
    """An onnxruntime session for the exported bytes, `threads` intra-op threads."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])


def onnx_scores(
    session: object, features: np.ndarray, user: np.ndarray | None = None
) -> np.ndarray:
    """Scores float32 [n_docs] of one list: features [n_docs, n_features], user [embedding_dim]."""
    feeds = {FEATURES_INPUT: np.ascontiguousarray(features, dtype=np.float32)}
    if user is not None:
        feeds[USER_INPUT] = np.asarray(user, dtype=np.float32).reshape(1, -1)
    (scores,) = session.run([SCORES_OUTPUT], feeds)  # type: ignore[attr-defined]
    return np.asarray(scores)


def torch_scores(
    ranker: Ranker, features: np.ndarray, user: np.ndarray | None = None
) -> np.ndarray:
    """The same list scored by the ranker in PyTorch (eval mode): float32 [n_docs]."""
    was_training = ranker.training
    ranker.eval()
    with torch.no_grad():
        x = torch.as_tensor(np.ascontiguousarray(features, dtype=np.float32))
        u = None if user is None else torch.as_tensor(user, dtype=torch.float32).reshape(1, -1)
        scores = ranker.score_list(x, u).numpy()
    ranker.train(was_training)
    return scores


def torch_list_scores(ranker: Ranker, features: np.ndarray, user_rows: np.ndarray) -> np.ndarray:
    """One list scored by the ranker from its user's table rows (int64 scalar or [1 + n_fields],
    as in training) in PyTorch, eval mode: float32 [n_docs]."""
    was_training = ranker.training
    ranker.eval()
    with torch.no_grad():
        x = torch.as_tensor(np.ascontiguousarray(features, dtype=np.float32))[None]
        rows = torch.as_tensor(np.asarray(user_rows, dtype=np.int64))[None]
        scores = ranker(x, rows)[0].numpy()
    ranker.train(was_training)
    return scores
