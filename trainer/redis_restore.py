"""Put back in Redis what the registry's deployed versions need: `ltr redis restore`.

Redis may lose everything (a restart without persistence, FLUSHALL, eviction); the service
then serves every model from its versions' own copies, degraded, until the embeddings and item
sets are pushed again. For every model's CURRENT version, and the candidate of a running
experiment, this re-pushes the user embeddings (`{prefix}emb:{model}:{version}`) unless Redis
holds them byte for byte, and makes the version's item set live unless a complete version of
it already is; then it announces each model it restored something for, so every worker drops
what it cached from Redis. Overrides (`{prefix}user:{id}`) are not in the registry and cannot
be restored. A key it reads that holds the wrong type of value (a string where the embeddings'
hash belongs, say) is not intact either: it is replaced, as `ltr publish` replaces it, where
reading it would fail with WRONGTYPE and leave it broken.

One item set has one live version, whoever uses it: CURRENT versions are restored first (in
name order) and a set made or found live is left as it is for the versions after them, so a
candidate never takes its set away from a CURRENT (docs/EXPERIMENTS.md). A live version that
no model's CURRENT was trained with, where every CURRENT using the set was trained with one
other version, is switched back to that one: a rollback without a Redis URL leaves the newer
version's set live, and the restored model scored with it (a held-out trial).
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import orjson
import redis

from app.artifacts.lock import model_lock
from app.artifacts.manifest import Manifest
from app.artifacts.store import Artifact, list_models, load_version, read_current
from app.errors import LtrError, error_text
from app.features.item_redis import meta_key, pointer_key
from trainer.experiments.experiment_file import read_experiment
from trainer.features.redis_sets import live_version, read_meta, versions_key
from trainer.features.set_keys import item_counts, scan_batches, version_pattern
from trainer.publish import push_model_item_set
from trainer.redis_publish import announce, embedding_rows, embeddings_key, push_embeddings

Role = Literal["current", "candidate"]
# intact: Redis held it as it should; restored: written now; none: the version has none;
# kept: another complete version of the set is live and stays so; error: see `errors`.
State = Literal["intact", "restored", "none", "kept", "error"]


@dataclass
class Restored:
    model: str
    version: str
    role: Role
    embeddings: State = "none"
    item_set: str | None = None  # "set@version" the version was trained with
    item_set_state: State = "none"
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def wrote(self) -> bool:
        return "restored" in (self.embeddings, self.item_set_state)


@dataclass
class RestoreReport:
    versions: list[Restored]
    announced: list[str]  # models announced on `{prefix}events`
    missing_models: list[str]  # asked for by name, not deployed in the registry

    @property
    def errors(self) -> list[str]:
        return [f"{r.model} {r.version}: {e}" for r in self.versions for e in r.errors]


def restore_redis(
    registry: Path, redis_url: str, prefix: str, names: list[str] | None = None
) -> RestoreReport:
    """Restore what the deployed versions of `names` (default: every model) need in Redis."""
    wanted = list_models(registry) if names is None else sorted(set(names))
    deployed = [(n, v) for n in wanted if (v := read_current(registry, n)) is not None]
    missing = sorted(set(wanted) - {n for n, _ in deployed}) if names is not None else []
    versions: list[Restored] = []
    with redis.Redis.from_url(redis_url, socket_timeout=30) as client:
        run = _Restorer(Path(registry), client, redis_url, prefix, _sets_deployed(registry))
        for name, current in deployed:
            with model_lock(registry, name):
                # CURRENT may have moved since it was read: restore what it names now.
                current = read_current(registry, name) or current
                versions.append(run.version(name, current, "current"))
        for name, _ in deployed:
            with model_lock(registry, name):
                done = run.candidate(name)
            if done is not None:
                versions.append(done)
    announced = []
    for name in sorted({r.model for r in versions if r.wrote}):
        now = read_current(registry, name)
        if now is not None:
            announce(redis_url, prefix, name, now)
            announced.append(name)
    return RestoreReport(versions, announced, missing)


@dataclass
class _Restorer:
    registry: Path
    client: redis.Redis
    url: str
    prefix: str
    deployed_sets: dict[str, set[str]]  # set -> the versions of it CURRENT versions use
    live_sets: dict[str, str] = field(default_factory=dict)  # set -> version left live

    def candidate(self, name: str) -> Restored | None:
        """The candidate of `name`'s running experiment, if one runs."""
        try:
            spec = read_experiment(self.registry, name)
        except LtrError as exc:
            failed = Restored(name, "(experiment)", "candidate", "error", item_set_state="error")
            failed.errors.append(error_text(exc))
            return failed
        return None if spec is None else self.version(name, spec.candidate, "candidate")

    def version(self, name: str, version: str, role: Role) -> Restored:
        report = Restored(name, version, role)
        try:
            artifact = load_version(self.registry / name / version)  # verified, file by file
        except (LtrError, OSError) as exc:
            report.embeddings = report.item_set_state = "error"
            report.errors.append(error_text(exc))
            return report
        try:
            report.embeddings = self._embeddings(artifact, report)
        except (redis.RedisError, ValueError) as exc:
            report.embeddings = "error"
            report.errors.append(f"user embeddings: {error_text(exc)}")
        items = artifact.manifest.item_features
        if items is not None:
            report.item_set = f"{items.set}@{items.version}"
            try:
                report.item_set_state = self._item_set(artifact, report, role)
            except (redis.RedisError, LtrError) as exc:
                report.item_set_state = "error"
                report.errors.append(error_text(exc))
        return report

    def _embeddings(self, artifact: Artifact, report: Restored) -> State:
        manifest = artifact.manifest
        uc = manifest.user_clusters
        if uc is None:
            return "none"
        clusters = orjson.loads(artifact.files[uc.clusters_file])
        embeddings = np.load(io.BytesIO(artifact.files[uc.embeddings_file]), allow_pickle=False)
        rows = embedding_rows(manifest, clusters, embeddings)
        key = embeddings_key(self.prefix, manifest.name, manifest.version)
        kind = _str(self.client.type(key))
        if kind == "hash" and {_str(k): v for k, v in self.client.hgetall(key).items()} == rows:
            return "intact"
        if kind not in ("hash", "none"):
            report.notes.append(f"{key} held a {kind}, not a hash: replaced")
        push_embeddings(self.url, self.prefix, manifest, clusters, embeddings)
        return "restored"

    def _item_set(self, artifact: Artifact, report: Restored, role: Role) -> State:
        items = artifact.manifest.item_features
        assert items is not None
        claimed = self.live_sets.get(items.set)
        if claimed is None:
            self._drop_wrong_types(items.set, items.version, report)
            live = live_version(self.client, self.prefix, items.set)
            stale = role == "current" and self.deployed_sets.get(items.set) == {items.version}
            if live is not None and live != items.version and stale:
                report.notes.append(
                    f"item set {items.set}: version {live} was live, which no deployed version "
                    f"was trained with; switched back to {items.version}"
                )
            elif live is not None and self._complete(items.set, live):
                claimed = self.live_sets[items.set] = live
        if claimed is not None:
            if claimed == items.version:
                return "intact"
            report.notes.append(
                f"item set {items.set}: version {claimed} is live and complete and stays live "
                f"(one live version per set); this version was trained with {items.version}"
            )
            return "kept"
        push_model_item_set(artifact, self.url, self.prefix)  # switch back, or push snapshot
        self.live_sets[items.set] = live_version(self.client, self.prefix, items.set) or ""
        return "restored"

    def _drop_wrong_types(self, set_name: str, version: str | None, report: Restored) -> None:
        """Deletes the set's keys that restoring reads (its pointer and versions list, and the
        meta and items of the trained and the live version) when they hold the wrong type:
        each read of one failed with WRONGTYPE, and a push or switch then writes them anew."""
        dropped = self._drop_wrong(
            {
                pointer_key(self.prefix, set_name): "string",
                versions_key(self.prefix, set_name): "zset",
            }
        )
        live = live_version(self.client, self.prefix, set_name)
        versions = sorted({v for v in (version, live) if v})
        dropped += self._drop_wrong(
            {meta_key(self.prefix, set_name, v): "string" for v in versions}
        )
        for v in versions:
            for batch in scan_batches(self.client, version_pattern(self.prefix, set_name, v)):
                dropped += self._drop_wrong(dict.fromkeys(batch, "string"))
        if dropped:
            shown = ", ".join(dropped[:3]) + (f" and {len(dropped) - 3} more" * (len(dropped) > 3))
            report.notes.append(f"deleted {len(dropped)} key(s) holding the wrong type: {shown}")

    def _drop_wrong(self, expected: dict[str | bytes, str]) -> list[str]:
        """Deletes the keys of `expected` (key -> type) that hold another type; their names."""
        pipe = self.client.pipeline(transaction=False)
        for key in expected:
            pipe.type(key)
        kinds = [_str(kind) for kind in pipe.execute()]
        wrong = [
            k for k, kind in zip(expected, kinds, strict=True) if kind not in (expected[k], "none")
        ]
        if wrong:
            self.client.delete(*wrong)
        return [k.decode("utf-8", "replace") if isinstance(k, bytes) else k for k in wrong]

    def _complete(self, set_name: str, version: str) -> bool:
        """As rollback checks it: the version's meta, and every item's key of the right size."""
        meta = read_meta(self.client, self.prefix, set_name, version)
        if meta is None:
            return False
        width = 4 * len(meta["names"])
        found = item_counts(self.client, self.prefix, set_name, {version: width})[version]
        return bool(found == meta["count"])


def _sets_deployed(registry: Path) -> dict[str, set[str]]:
    """Item set -> the versions of it every model's CURRENT version was trained with (from the
    manifests alone: the versions themselves are verified when restored)."""
    out: dict[str, set[str]] = {}
    for name in list_models(registry):
        current = read_current(registry, name)
        if current is None:
            continue
        try:
            manifest = Manifest.model_validate_json(
                (registry / name / current / "manifest.json").read_bytes()
            )
        except (OSError, ValueError):
            continue  # refused when restored, if in the names asked for
        items = manifest.item_features
        if items is not None and items.version is not None:
            out.setdefault(items.set, set()).add(items.version)
    return out


def _str(raw: bytes | str) -> str:
    return raw.decode() if isinstance(raw, bytes) else raw
