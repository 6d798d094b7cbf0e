"""Networks from `model.onnx` through onnxruntime: one session, shared by every request.

Graph contract (what trainer/dnn exports): input `features` float32 [N, F] (N dynamic), optional
input `user` float32 [1, D] (the user-cluster embedding, when the manifest says `onnx_input`),
output `scores` float32 [N]. onnxruntime's `run` is thread-safe, so one session serves all threads.

A model must be self-contained: before onnxruntime sees it, the protobuf is walked (no `onnx`
import) for any tensor stored outside the file, which is refused. onnxruntime alone is not enough
of a guard: whether it reads such a file relative to the working directory depends on its version.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import onnxruntime as ort

from app.errors import LtrError

FEATURES_INPUT = "features"
USER_INPUT = "user"
SCORES_OUTPUT = "scores"

# Field numbers from onnx.proto3.
_MODEL_GRAPH, _MODEL_FUNCTIONS, _FUNCTION_NODE = 7, 25, 7
_GRAPH_NODE, _GRAPH_INITIALIZER, _GRAPH_SPARSE_INITIALIZER = 1, 5, 15
_NODE_ATTRIBUTE = 5
_ATTR_T, _ATTR_G, _ATTR_TENSORS, _ATTR_GRAPHS, _ATTR_SPARSE, _ATTR_SPARSES = 5, 6, 10, 11, 22, 23
_SPARSE_VALUES, _SPARSE_INDICES = 1, 2
_TENSOR_NAME, _TENSOR_EXTERNAL_DATA, _TENSOR_DATA_LOCATION = 8, 13, 14
_LOCATION_EXTERNAL = 1


class OnnxModelError(LtrError, ValueError):
    """A `model.onnx` the service refuses: unreadable, external data, or the wrong interface."""


def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise OnnxModelError("model.onnx: truncated or malformed protobuf")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(buf: memoryview) -> Iterator[tuple[int, int | memoryview]]:
    """(field number, value) of one protobuf message: ints for varints, views for the rest."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
            yield field, value
        elif wire == 2:
            size, pos = _varint(buf, pos)
            if pos + size > len(buf):
                raise OnnxModelError("model.onnx: truncated or malformed protobuf")
            yield field, buf[pos : pos + size]
            pos += size
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            yield field, buf[pos : pos + width]
            pos += width
        else:
            raise OnnxModelError("model.onnx: truncated or malformed protobuf")


def _external_tensors(buf: memoryview, kind: str) -> Iterator[str]:
    """Names of tensors stored outside the file, anywhere in a message of type `kind`."""
    for field, value in _fields(buf):
        if not isinstance(value, memoryview):
            if kind == "tensor" and field == _TENSOR_DATA_LOCATION and value == _LOCATION_EXTERNAL:
                yield _tensor_name(buf)
            continue
        child = {
            ("model", _MODEL_GRAPH): "graph",
            ("model", _MODEL_FUNCTIONS): "function",
            ("function", _FUNCTION_NODE): "node",
            ("graph", _GRAPH_NODE): "node",
            ("graph", _GRAPH_INITIALIZER): "tensor",
            ("graph", _GRAPH_SPARSE_INITIALIZER): "sparse",
            ("node", _NODE_ATTRIBUTE): "attribute",
            ("attribute", _ATTR_T): "tensor",
            ("attribute", _ATTR_TENSORS): "tensor",
            ("attribute", _ATTR_G): "graph",
            ("attribute", _ATTR_GRAPHS): "graph",
            ("attribute", _ATTR_SPARSE): "sparse",
            ("attribute", _ATTR_SPARSES): "sparse",
            ("sparse", _SPARSE_VALUES): "tensor",
            ("sparse", _SPARSE_INDICES): "tensor",
        }.get((kind, field))
        if kind == "tensor" and field == _TENSOR_EXTERNAL_DATA:
            yield _tensor_name(buf)
        elif child is not None:
            yield from _external_tensors(value, child)


def _tensor_name(buf: memoryview) -> str:
    for field, value in _fields(buf):
        if field == _TENSOR_NAME and isinstance(value, memoryview):
            return bytes(value).decode("utf-8", "replace")
    return "<unnamed>"


def check_self_contained(model_bytes: bytes) -> None:
    """Raise OnnxModelError when any tensor of the model lives in an external file."""
    names = sorted(set(_external_tensors(memoryview(model_bytes), "model")))
    if names:
        shown = ", ".join(names[:5]) + (" ..." if len(names) > 5 else "")
        raise OnnxModelError(
            f"model.onnx stores {len(names)} tensor(s) as external data ({shown}); "
            "artifacts must be self-contained: export with all tensors inside the file"
        )


class OnnxScorer:
    """Scores rows with an ONNX network; see the module docstring for the graph contract."""

    def __init__(
        self,
        model_bytes: bytes,
        *,
        intra_op_threads: int = 1,
        inter_op_threads: int = 1,
        user_input: bool = False,
    ) -> None:
        check_self_contained(model_bytes)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = intra_op_threads
        opts.inter_op_num_threads = inter_op_threads
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.log_severity_level = 3  # errors come back as exceptions; keep stderr quiet
        try:
            self._session = ort.InferenceSession(
                model_bytes, sess_options=opts, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # onnxruntime raises its own unrelated exception types
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise OnnxModelError(f"model.onnx cannot be loaded by onnxruntime: {first}") from None
        inputs = {i.name: i for i in self._session.get_inputs()}
        outputs = {o.name for o in self._session.get_outputs()}
        feats = inputs.get(FEATURES_INPUT)
        if feats is None or feats.type != "tensor(float)" or len(feats.shape) != 2:
            raise OnnxModelError(f"model.onnx needs input {FEATURES_INPUT!r} float32 [N, F]")
        if not isinstance(feats.shape[1], int):
            raise OnnxModelError(f"model.onnx: input {FEATURES_INPUT!r} needs a fixed width F")
        if SCORES_OUTPUT not in outputs:
            raise OnnxModelError(f"model.onnx needs an output named {SCORES_OUTPUT!r}")
        extra = set(inputs) - {FEATURES_INPUT, USER_INPUT}
        if extra:
            raise OnnxModelError(f"model.onnx has unexpected inputs {sorted(extra)}")
        self.num_features: int = feats.shape[1]
        self.user_dim: int | None = None
        user = inputs.get(USER_INPUT)
        if user_input != (user is not None):
            want = "an input" if user_input else "no input"
            raise OnnxModelError(f"model.onnx: the manifest expects {want} named {USER_INPUT!r}")
        if user is not None:
            batch = user.shape[0] if len(user.shape) == 2 else 0
            if user.type != "tensor(float)" or not (batch == 1 or isinstance(batch, str)):
                raise OnnxModelError(f"model.onnx: input {USER_INPUT!r} must be float32 [1, D]")
            if not isinstance(user.shape[1], int):
                raise OnnxModelError(f"model.onnx: input {USER_INPUT!r} needs a fixed width D")
            self.user_dim = user.shape[1]

    def score(self, features: np.ndarray, user: np.ndarray | None = None) -> np.ndarray:
        """Scores float64 [n_docs] for features float32 [n_docs, n_features] (NaN = missing).

        `user`: float32 [embedding_dim] (or [1, embedding_dim]) when the graph has a `user` input.
        """
        x = np.asarray(features)
        if x.ndim != 2 or x.shape[1] != self.num_features:
            raise ValueError(f"expected features of shape [n, {self.num_features}], got {x.shape}")
        n = x.shape[0]
        feeds = {FEATURES_INPUT: np.ascontiguousarray(x, dtype=np.float32)}
        if self.user_dim is not None:
            if user is None:
                raise ValueError("this model needs the user-cluster embedding (`user`)")
            u = np.asarray(user, dtype=np.float32).reshape(1, -1)
            if u.shape[1] != self.user_dim:
                raise ValueError(f"expected a user embedding of {self.user_dim}, got {u.shape[1]}")
            feeds[USER_INPUT] = u
        elif user is not None:
            raise ValueError("this model takes no user-cluster embedding input")
        if n == 0:
            return np.zeros(0, dtype=np.float64)
        (scores,) = self._session.run([SCORES_OUTPUT], feeds)
        scores = np.asarray(scores).reshape(-1)
        if scores.shape[0] != n:
            raise ValueError(f"model returned {scores.shape[0]} scores for {n} rows")
        return scores.astype(np.float64)
