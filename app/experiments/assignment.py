"""Which requests an experiment takes, and in A/B mode which arm: a stable hash of the user id
(the request id when there is none), so every worker and pod agrees without talking."""

from __future__ import annotations

import hashlib

from app.experiments.spec import CANDIDATE, CONTROL, ExperimentSpec

_SCALE = float(1 << 64)


def unit_hash(salt: str, unit: str) -> float:
    """A uniform number in [0, 1) from (salt, unit); blake2b, so stable across processes and
    Python versions (unlike `hash()`)."""
    digest = hashlib.blake2b(f"{salt}\x1f{unit}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / _SCALE


def assign(spec: ExperimentSpec, user_id: str | None, request_id: str) -> int | None:
    """None when the request is outside the experiment; else the arm (CONTROL or CANDIDATE;
    interleave mode uses only "inside", the arm is then CANDIDATE by convention)."""
    unit = user_id if user_id else request_id
    u = unit_hash(spec.salt, unit)
    if u >= spec.traffic:
        return None
    # The lower and upper halves of the experiment's slice are the two A/B arms.
    return CONTROL if u < spec.traffic / 2 else CANDIDATE
