"""What `ltr simulate` generates: sizes, the personalised relevance model and the click model.

Every field is part of the dataset's identity: the same config gives the same bytes.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

SPLITS: tuple[str, ...] = ("train", "vali", "test")
MAX_LABEL = 4
# The named features (documents.FEATURE_NAMES) that carry signal; the rest are noise columns.
MIN_FEATURES = 9


class SimulationConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    rows: int = Field(default=100_000, ge=1, le=100_000_000)  # documents in all splits together
    docs_per_query: tuple[int, int] = (10, 40)  # inclusive range of a query list's length
    users: int = Field(default=2_000, ge=1, le=10_000_000)
    user_types: int = Field(default=6, ge=1, le=32)  # latent types the profiles are drawn from
    categories: int = Field(default=8, ge=2, le=64)
    # Columns: the named features first (query match, quality, price, category, user-independent
    # popularity, uninformative realistic ones), then `noise_<i>` columns up to this count.
    num_features: int = Field(default=20, ge=MIN_FEATURES, le=1_000)
    # Weight of the user-type x category/price affinity in relevance; 0 = no personalisation.
    personalization: float = Field(default=1.0, ge=0)
    label_noise: float = Field(default=0.5, ge=0)  # sd of the Gaussian noise on the relevance score
    # Target share of each grade 0..4; label thresholds are calibrated to it once per seed.
    label_shares: tuple[float, float, float, float, float] = (0.45, 0.27, 0.15, 0.09, 0.04)
    seed: int = Field(default=0, ge=0)
    format: Literal["letor", "parquet"] = "parquet"
    clicks: bool = False
    eta: float = Field(default=1.0, ge=0)  # examination theta_k = (1/k)^eta
    click_noise: float = Field(
        default=0.1, ge=0, lt=1
    )  # epsilon: attractiveness of a grade-0 document
    # Temperature of the Gumbel noise of the logging (production) ranker; larger = more random.
    logging_noise: float = Field(default=0.5, ge=0)
    split: tuple[float, float, float] = (0.8, 0.1, 0.1)  # train/vali/test share of queries
    # Queries generated per vectorised step; part of the random stream, hence of the output.
    chunk_queries: int = Field(default=2_048, ge=1, le=1_000_000)
    # Rows buffered per Parquet row group (memory bound of the writer, not part of the data).
    row_group_rows: int = Field(default=131_072, ge=1_024)

    @model_validator(mode="after")
    def _check(self) -> SimulationConfig:
        lo, hi = self.docs_per_query
        if not 1 <= lo <= hi <= 10_000:
            raise ValueError(
                f"docs_per_query must satisfy 1 <= min <= max <= 10000, got {lo}..{hi}"
            )
        if any(s < 0 for s in self.split) or abs(sum(self.split) - 1.0) > 1e-9:
            raise ValueError(f"split fractions must be >= 0 and sum to 1, got {self.split}")
        if self.split[0] <= 0:
            raise ValueError("the train split must get a positive share of queries")
        if any(s < 0 for s in self.label_shares) or abs(sum(self.label_shares) - 1.0) > 1e-9:
            raise ValueError(f"label_shares must be >= 0 and sum to 1, got {self.label_shares}")
        return self
