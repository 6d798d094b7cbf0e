"""A second personalised ranking generator, written apart from `ltr simulate`, for the
user-feature benchmark: tastes depend on *combinations* of profile fields.

Users have four observable fields (country, device, price_level, age). A user's affinity for
each document category is the sum of two interaction tables, one indexed by (country, device)
and one by (price_level, age bucket), plus a small personal term; the preferred price follows
price_level. No single field carries the taste, so a model must see the fields together, and
a coarse-to-fine cluster id that drops trailing fields loses half of it.

Writes `train|vali|test.parquet` (qid, label, user_id, features), `users.csv` (user_id and the
four fields) and two cluster schemes with the same fields in opposite orders:
`scheme_cdpa.toml` (country, device, price_level, age) and `scheme_apdc.toml`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

COUNTRIES = ("US", "GB", "DE", "FR", "ES", "IT", "JP", "BR")
DEVICES = ("mobile", "desktop", "tablet")
AGE_EDGES = (25, 35, 45, 55, 65)
PRICE_EDGES = (2, 3, 4, 5)
CATEGORIES = 8
NOISE_FEATURES = 5
FEATURE_NAMES = [
    "text_match",
    "quality",
    "category",
    "price_z",
    "popularity",
    *[f"noise_{i}" for i in range(NOISE_FEATURES)],
]
LABEL_SHARES = (0.45, 0.27, 0.15, 0.09, 0.04)
SPLIT = (0.8, 0.1, 0.1)

_FIELDS = {
    "country": f'kind = "categorical"\nvalues = {list(COUNTRIES)!r}'.replace("'", '"'),
    "device": f'kind = "categorical"\nvalues = {list(DEVICES)!r}'.replace("'", '"'),
    "price_level": f'kind = "numeric"\nprefix = "p"\nedges = {list(PRICE_EDGES)}',
    "age": f'kind = "numeric"\nprefix = "a"\nedges = {list(AGE_EDGES)}',
}
ORDERS = {
    "cdpa": ("country", "device", "price_level", "age"),
    "apdc": ("age", "price_level", "device", "country"),
}


def scheme_toml(order: tuple[str, ...]) -> str:
    """A cluster scheme with the four fields in `order`."""
    return "\n".join(f'[[fields]]\nname = "{name}"\n{_FIELDS[name]}\n' for name in order)


def generate(out: Path, *, rows: int = 40_000, users: int = 2_000, seed: int = 0) -> Path:
    """Write the dataset into `out` (created); returns `out`."""
    rng = np.random.default_rng(seed)
    out.mkdir(parents=True, exist_ok=True)
    country = rng.choice(len(COUNTRIES), users, p=rng.dirichlet(np.full(len(COUNTRIES), 3.0)))
    device = rng.choice(len(DEVICES), users, p=[0.55, 0.35, 0.10])
    price_level = rng.integers(1, 6, users)
    age = np.clip(np.rint(rng.normal(42, 13, users)), 18, 80).astype(np.int64)
    age_bucket = np.searchsorted(AGE_EDGES, age, side="right")
    by_country_device = rng.normal(0, 1, (len(COUNTRIES), len(DEVICES), CATEGORIES))
    by_price_age = rng.normal(0, 1, (5, len(AGE_EDGES) + 1, CATEGORIES))
    taste = (
        by_country_device[country, device]
        + by_price_age[price_level - 1, age_bucket]
        + rng.normal(0, 0.3, (users, CATEGORIES))
    )
    preferred_price = 0.6 * (price_level - 3.0)
    ids = np.array([f"p{i:06d}" for i in range(users)])
    with open(out / "users.csv", "w", encoding="utf-8") as fh:
        fh.write("user_id,country,device,price_level,age\n")
        for i in range(users):
            fh.write(
                f"{ids[i]},{COUNTRIES[country[i]]},{DEVICES[device[i]]},{price_level[i]},{age[i]}\n"
            )
    for name, order in ORDERS.items():
        (out / f"scheme_{name}.toml").write_text(scheme_toml(order))

    sizes: list[int] = []
    while sum(sizes) < rows:
        sizes.append(int(rng.integers(20, 41)))
    sizes_a = np.array(sizes)
    n_q, n = sizes_a.size, int(sizes_a.sum())
    activity = rng.lognormal(0, 1, users)
    query_user = rng.choice(users, n_q, p=activity / activity.sum())
    doc_user = np.repeat(query_user, sizes_a)
    match = rng.beta(2, 5, n)
    quality = rng.normal(0, 1, n)
    category = rng.integers(0, CATEGORIES, n)
    price_z = rng.normal(0, 1, n)
    popularity = 0.5 * quality + rng.normal(0, 1, n)
    noise = rng.normal(0, 1, (n, NOISE_FEATURES))
    relevance = (
        2.0 * match
        + 0.4 * quality
        + 0.9 * taste[doc_user, category]
        - 0.5 * (price_z - preferred_price[doc_user]) ** 2
        + rng.normal(0, 0.5, n)
    )
    cuts = np.quantile(relevance, np.cumsum(LABEL_SHARES)[:-1])
    labels = np.searchsorted(cuts, relevance, side="right").astype(np.int32)
    features = np.column_stack([match, quality, category, price_z, popularity, noise]).astype(
        np.float32
    )
    offsets = np.concatenate([[0], np.cumsum(sizes_a)])
    split_of = rng.choice(3, n_q, p=SPLIT)
    for s, split in enumerate(("train", "vali", "test")):
        queries = np.flatnonzero(split_of == s)
        docs = np.concatenate([np.arange(offsets[q], offsets[q + 1]) for q in queries])
        columns = {
            "qid": pa.array(np.repeat(queries, sizes_a[queries]).astype(np.int64)),
            "label": pa.array(labels[docs]),
            "user_id": pa.array(ids[doc_user[docs]]),
        }
        for j, fname in enumerate(FEATURE_NAMES):
            columns[fname] = pa.array(features[docs, j])
        pq.write_table(pa.table(columns), out / f"{split}.parquet")
    return out
