"""Candidate documents of a batch of queries: latent attributes and the noisy features seen.

Candidates never depend on who asked, so nothing about the user leaks into the features: the
personal part of relevance can only be learnt through the user's profile.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

# Named columns in order, with how each is made (n ~ Normal(0, 1) noise); `noise_<i>` columns
# (pure n) follow up to num_features. The first MIN_FEATURES (config) carry signal, the next
# three are realistic but uninformative.
FEATURES: tuple[tuple[str, str], ...] = (
    ("bm25", "max(12 * match + 2 n, 0)"),
    ("tfidf_cosine", "clip(match + 0.2 n, 0, 1)"),
    ("title_match", "1 if match + 0.25 n > 0.5 else 0"),
    ("rating", "clip(1 + 4 * quality + 0.7 n, 1, 5)"),
    ("log_reviews", "max(1 + 3 * quality + n, 0)"),
    ("popularity", "sigmoid(population_taste[category] + 2 * quality - 1 + 0.5 n)"),
    ("log_price", "category_log_price[category] + 0.4 n"),
    ("price_vs_query", "log_price - mean log_price of the query list"),
    ("category", "category id; half a list from its focus category, the rest uniform"),
    ("freshness_days", "Uniform(0, 365), uninformative"),
    ("distance_km", "LogNormal(1, 1), uninformative"),
    ("doc_length", "LogNormal(6, 0.8), uninformative"),
)
FEATURE_NAMES: tuple[str, ...] = tuple(name for name, _ in FEATURES)
LATENT = {"match": "Beta(1.2, 2.2)", "quality": "Beta(2, 2)"}
LOG_PRICE_SD = 0.4  # within-category spread of log price
FOCUS_SHARE = 0.5  # share of a query's candidates from its focus category
DECIMALS = 4  # features are rounded so LETOR text and Parquet carry the same float32 values


def feature_names(num_features: int) -> list[str]:
    named = list(FEATURE_NAMES[:num_features])
    return named + [f"noise_{i + 1}" for i in range(num_features - len(named))]


@dataclass(frozen=True)
class Catalog:
    """Per-category price levels and the constants that standardise log price."""

    category_log_price: np.ndarray  # float64 [n_categories]
    price_mean: float
    price_sd: float

    @classmethod
    def draw(cls, categories: int, rng: np.random.Generator) -> Catalog:
        base = rng.uniform(3.0, 6.0, categories)
        return cls(base, float(base.mean()), float(np.sqrt(base.var() + LOG_PRICE_SD**2)))

    def to_json(self) -> dict[str, Any]:
        return {
            "category_log_price": self.category_log_price.tolist(),
            "log_price_sd_within_category": LOG_PRICE_SD,
            "price_z": "(log_price - price_mean) / price_sd",
            "price_mean": self.price_mean,
            "price_sd": self.price_sd,
            "latent": LATENT,
            "features": dict(FEATURES),
            "rounding": f"every feature rounded to {DECIMALS} decimals, stored as float32",
        }


@dataclass(frozen=True)
class DocumentBatch:
    """Documents of consecutive queries; query j owns rows offsets[j]:offsets[j + 1]."""

    offsets: np.ndarray  # int64 [n_queries + 1]
    query_index: np.ndarray  # int64 [n_docs], query of each row within the batch
    category: np.ndarray  # int64 [n_docs]
    match: np.ndarray  # float64 [n_docs], latent query match in [0, 1]
    quality: np.ndarray  # float64 [n_docs], latent quality in [0, 1]
    price_z: np.ndarray  # float64 [n_docs], standardised log price
    features: np.ndarray  # float32 [n_docs, n_features]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    out: np.ndarray = 1.0 / (1.0 + np.exp(-x))
    return out


def draw_documents(
    sizes: np.ndarray,
    catalog: Catalog,
    taste: np.ndarray,
    num_features: int,
    rng: np.random.Generator,
) -> DocumentBatch:
    """Candidates for queries of the given list lengths (int [n_queries]).

    `taste` (float [n_categories]) is the population-average category affinity, which the
    user-independent `popularity` feature reflects.
    """
    sizes = np.asarray(sizes, dtype=np.int64)
    n_q, n = sizes.size, int(sizes.sum())
    n_cat = catalog.category_log_price.size
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    qi = np.repeat(np.arange(n_q, dtype=np.int64), sizes)

    focus = rng.integers(0, n_cat, n_q)[qi]
    category = np.where(rng.random(n) < FOCUS_SHARE, focus, rng.integers(0, n_cat, n))
    match = rng.beta(1.2, 2.2, n)
    quality = rng.beta(2.0, 2.0, n)
    log_price = catalog.category_log_price[category] + rng.normal(0.0, LOG_PRICE_SD, n)
    price_z = (log_price - catalog.price_mean) / catalog.price_sd
    query_mean_price = np.add.reduceat(log_price, offsets[:-1]) / sizes

    noise = rng.standard_normal((n, 6))
    columns = [
        np.maximum(12.0 * match + 2.0 * noise[:, 0], 0.0),
        np.clip(match + 0.2 * noise[:, 1], 0.0, 1.0),
        (match + 0.25 * noise[:, 2] > 0.5).astype(np.float64),
        np.clip(1.0 + 4.0 * quality + 0.7 * noise[:, 3], 1.0, 5.0),
        np.maximum(1.0 + 3.0 * quality + noise[:, 4], 0.0),
        _sigmoid(taste[category] + 2.0 * quality - 1.0 + 0.5 * noise[:, 5]),
        log_price,
        log_price - query_mean_price[qi],
        category.astype(np.float64),
        rng.uniform(0.0, 365.0, n),
        rng.lognormal(1.0, 1.0, n),
        rng.lognormal(6.0, 0.8, n),
    ]
    features = np.empty((n, num_features), dtype=np.float32)
    for j in range(num_features):
        col = columns[j] if j < len(columns) else rng.standard_normal(n)
        # `+ 0.0` turns -0.0 into 0.0 so the text form never reads `-0`.
        features[:, j] = np.round(col, DECIMALS) + 0.0
    return DocumentBatch(
        offsets=offsets,
        query_index=qi,
        category=category,
        match=match,
        quality=quality,
        price_z=price_z,
        features=features,
    )
