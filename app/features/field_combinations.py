"""Hashed profile-field combinations: the embedding rows of pairs (and triples, ...) of a user's
field tokens, so that tastes set by a combination of fields (country with device, price level
with age) have a row of their own even when the user's full cluster id is rare.

A combination's key is its field keys sorted (`field:country=US&field:device=mobile`), so it
does not depend on the scheme's field order; the key is hashed (CRC-32, stable across processes
and machines) into one of `buckets` buckets, the hashing trick of Weinberger et al., ICML 2009
("Feature hashing for large scale multitask learning"), as in Wide & Deep's crossed columns
(Cheng et al., DLRS 2016). Only buckets that a combination shared by enough training users hits
get a table row (`combo:<bucket>`); any other combination adds nothing, in training and serving
alike.
"""

from __future__ import annotations

import itertools
import math
import zlib
from collections.abc import Sequence

COMBINATION_ROW_PREFIX = "combo:"
COMBINATION_JOIN = "&"


def combination_count(n_fields: int, max_fields: int) -> int:
    """How many combinations (of 2..max_fields fields) a full profile of n_fields has."""
    return sum(math.comb(n_fields, k) for k in range(2, min(max_fields, n_fields) + 1))


def combination_keys(field_keys: Sequence[str], max_fields: int) -> list[str]:
    """The keys of every combination of 2..max_fields of `field_keys`, sorted within and
    between combinations, so any order of the same field keys gives the same list."""
    ordered = sorted(field_keys)
    return [
        COMBINATION_JOIN.join(combo)
        for k in range(2, min(max_fields, len(ordered)) + 1)
        for combo in itertools.combinations(ordered, k)
    ]


def bucket_of(key: str, buckets: int) -> int:
    """The bucket of one combination key: CRC-32 of its UTF-8 bytes modulo `buckets`."""
    return zlib.crc32(key.encode()) % buckets


def combination_buckets(field_keys: Sequence[str], max_fields: int, buckets: int) -> list[int]:
    """The bucket of each combination of `field_keys` (see `combination_keys`), in that order."""
    return [bucket_of(key, buckets) for key in combination_keys(field_keys, max_fields)]


def combination_row_key(bucket: int) -> str:
    """The table key of a bucket's row: `combo:1234`."""
    return f"{COMBINATION_ROW_PREFIX}{bucket}"


def parse_combination_row_key(key: str, buckets: int) -> int | None:
    """The bucket of a `combo:<n>` key, or None when `key` is not one (or out of range)."""
    if not key.startswith(COMBINATION_ROW_PREFIX):
        return None
    digits = key[len(COMBINATION_ROW_PREFIX) :]
    if not digits.isdigit() or int(digits) >= buckets:
        return None
    return int(digits)
