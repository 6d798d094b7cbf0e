"""A stable pseudo-random number per query id: the same query falls on the same side of a
split in every run, whatever else the data holds."""

from __future__ import annotations

import hashlib

import numpy as np


def query_hash_fraction(query_ids: np.ndarray) -> np.ndarray:
    """A stable pseudo-random number in [0, 1) per query id (same id → same number, any run)."""
    out = np.empty(len(query_ids), dtype=np.float64)
    for i, qid in enumerate(query_ids):
        digest = hashlib.blake2b(str(qid).encode(), digest_size=8).digest()
        out[i] = int.from_bytes(digest, "little") / 2.0**64
    return out
