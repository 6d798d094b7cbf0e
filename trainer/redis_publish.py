"""Publish a model's user-cluster embeddings to Redis and announce a new version.

Redis contract: `{prefix}emb:{model}:{version}` hash cluster id → float32 little-endian bytes
(embedding_dim * 4); `{prefix}events` carries `{"model", "version"}` JSON announcements.
"""

from __future__ import annotations

import json
import secrets

import numpy as np
import redis

from app.artifacts.manifest import Manifest
from app.settings import redis_url_problem


def redacted(url: str) -> str:
    """`url` with its password (or a lone user part, which may be one) shown as `***`, in the
    address (`redis://:pw@host`) and in the query (`?password=pw`, how redis-py also takes one,
    and the only way for a `unix://` socket)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
    except ValueError:
        return "(an unparsable URL)"
    if "@" in parts.netloc:
        userinfo, _, host = parts.netloc.rpartition("@")
        user, colon, _ = userinfo.partition(":")
        hidden = f"{user}:***" if colon else "***"
        url = parts._replace(netloc=f"{hidden}@{host}").geturl()
    # By hand: urlunsplit writes `unix:///x.sock` (no host) back as `unix:/x.sock`.
    head, mark, rest = url.partition("?")
    query, hash_mark, fragment = rest.partition("#")
    fields = [
        f"{name}=***" if sep and name.lower() == "password" else field
        for field in query.split("&")
        for name, sep, _ in (field.partition("="),)
    ]
    return head + mark + "&".join(fields) + hash_mark + fragment


def check_redis_url(url: str, option: str = "--redis-url") -> str:
    """`url` when redis-py can use it as it stands; ValueError naming `option` and what is
    wrong (app.settings.redis_url_problem), never the URL itself, which may hold a password."""
    problem = redis_url_problem(url)
    if problem is not None:
        raise ValueError(f"{option}: {problem}")
    return url


def embeddings_key(prefix: str, model: str, version: str) -> str:
    return f"{prefix}emb:{model}:{version}"


def embedding_rows(
    manifest: Manifest, clusters: list[str], embeddings: np.ndarray
) -> dict[str, bytes]:
    """Cluster id → its row as the hash holds it (float32 little-endian), checked."""
    uc = manifest.user_clusters
    if uc is None:
        raise ValueError(f"model {manifest.name!r} has no user clusters to publish")
    array = np.asarray(embeddings)
    if array.shape != (len(clusters), uc.embedding_dim):
        raise ValueError(
            f"embeddings shape {array.shape}, expected ({len(clusters)}, {uc.embedding_dim})"
        )
    if len(set(clusters)) != len(clusters) or not all(clusters):
        raise ValueError("cluster ids must be unique and non-empty")
    if not np.all(np.isfinite(array)):
        raise ValueError("embeddings hold NaN or infinite values")
    rows = array.astype("<f4")
    return {cid: rows[i].tobytes() for i, cid in enumerate(clusters)}


def push_embeddings(
    redis_url: str,
    prefix: str,
    manifest: Manifest,
    clusters: list[str],
    embeddings: np.ndarray,
) -> None:
    """Write the hash for `manifest`'s model version; embeddings: [len(clusters), embedding_dim].

    The hash is built under a temporary key and renamed into place, so readers see the old
    hash or the complete new one, never a partial one.
    """
    mapping = embedding_rows(manifest, clusters, embeddings)
    key = embeddings_key(prefix, manifest.name, manifest.version)
    tmp = f"{key}:tmp:{secrets.token_hex(4)}"
    with redis.Redis.from_url(redis_url) as client:
        try:
            if mapping:
                client.hset(tmp, mapping=mapping)
                client.rename(tmp, key)
            else:
                client.delete(key)
        finally:
            client.delete(tmp)


def announce(redis_url: str, prefix: str, model: str, version: str) -> int:
    """Publish `{"model", "version"}` on `{prefix}events`; returns how many listeners got it."""
    payload = json.dumps({"model": model, "version": version})
    with redis.Redis.from_url(redis_url) as client:
        return int(client.publish(f"{prefix}events", payload))
