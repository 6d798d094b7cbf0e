"""Options of the neural (LambdaDNN) engine, used by `ltr train --engine dnn` and `ltr nightly`."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from trainer.lambdamart.params import MAX_EVAL_AT, MAX_NUM_TREES, MAX_SEED, MAX_THREADS

# Refused up front rather than by the allocator after the data is read (a 50-line traceback):
# the widest layer, and the weights between consecutive hidden layers (float32, kept four times
# while training: weights, gradients and Adam's two moments, Kingma & Ba 2015), 2^27 of them
# being 2 GiB. Activations add batch_queries x list length x width per layer on top.
MAX_LAYER_WIDTH = 16384
MAX_HIDDEN_WEIGHTS = 2**27
# Depth: a million one-unit layers passed the width checks and built for minutes before the
# first batch; ranking networks use 2-4 hidden layers, DCN 1-6 cross layers (Wang et al. 2017).
MAX_LAYERS = 64


def combinations_need_fields(buckets: int, info: ValidationInfo) -> int:
    """Combination rows are sums of field rows: asked for without them they were dropped
    silently (pydantic validates a default only when given, so only an explicit value fails)."""
    if buckets > 0 and info.data.get("field_embeddings") is False:
        raise PydanticCustomError(
            "needs_field_embeddings",
            "{buckets} combination buckets need field embeddings (--field-embeddings); "
            "give 0 to train without combination rows",
            {"buckets": buckets},
        )
    return buckets


class DNNOptions(BaseModel):
    # No float parameter has a use for inf or NaN: inf passes the gt/ge bounds below and
    # would only fail once the trained model is exported.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    loss: Literal["lambdarank", "ranknet", "listnet", "pointwise"] = "lambdarank"
    arch: Literal["mlp", "dcn"] = "mlp"
    hidden: list[Annotated[int, Field(ge=1)]] = Field(
        default_factory=lambda: [256, 128], min_length=1, max_length=MAX_LAYERS
    )
    cross_layers: int = Field(3, ge=1, le=MAX_LAYERS)  # DCN only
    dropout: float = Field(0.1, ge=0, lt=1)
    # Bounded like the trees' rounds: 10^12 epochs without early stopping never ends.
    epochs: int = Field(100, ge=1, le=MAX_NUM_TREES)
    batch_queries: int = Field(32, ge=1)  # query lists per batch; a list is never split
    learning_rate: float = Field(1e-3, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    sigma: float = Field(1.0, gt=0)
    ndcg_k: int | None = Field(None, ge=1)  # truncation of |delta NDCG| in the lambdarank loss
    early_stopping_rounds: int | None = Field(10, ge=1)  # in epochs
    eval_at: int = Field(10, ge=1, le=MAX_EVAL_AT)
    seed: int = Field(0, ge=0, le=MAX_SEED)
    # 0 = all cores. One by default: on a loaded 2-core machine two torch threads were measured
    # to collapse (each waits on the other's spin barrier); small networks gain little from more.
    # torch crashed (a segmentation fault) asked for 100,000 threads; LightGBM's bound.
    threads: int = Field(1, ge=0, le=MAX_THREADS)
    # User-cluster embeddings: the profile table (user_id → fields) and the cluster scheme config.
    user_profiles: Path | None = None
    cluster_config: Path | None = None
    embedding_dim: int = Field(32, ge=1, le=MAX_LAYER_WIDTH)
    min_cluster_count: int = Field(20, ge=1)
    # Per-field rows summed with the cluster's row (trainer.dnn.user_clusters).
    field_embeddings: bool = True
    # Hashed field-combination rows (app.features.field_combinations), with field embeddings
    # only: buckets of the hash (0 = none) and the most fields a combination joins.
    combination_buckets: int = Field(65536, ge=0)
    combination_max_fields: int = Field(3, ge=2)

    _combinations_need_fields = field_validator("combination_buckets")(combinations_need_fields)

    @field_validator("hidden")
    @classmethod
    def _fits_in_memory(cls, hidden: list[int]) -> list[int]:
        for width in hidden:
            if width > MAX_LAYER_WIDTH:
                raise PydanticCustomError(
                    "layer_too_wide",
                    "a layer of {width} units is wider than the {limit} allowed",
                    {"width": width, "limit": MAX_LAYER_WIDTH},
                )
        weights = sum(a * b for a, b in pairwise(hidden))
        if weights > MAX_HIDDEN_WEIGHTS:
            raise PydanticCustomError(
                "layers_too_large",
                "these layers need {weights} weights between them, more than the {limit} "
                "allowed (each costs 16 bytes while training)",
                {"weights": weights, "limit": MAX_HIDDEN_WEIGHTS},
            )
        return hidden
