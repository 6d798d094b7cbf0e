"""`simulate(config, out_dir)`: the whole dataset, streamed chunk by chunk of queries.

Randomness comes from independent streams of one seed (world, users, calibration, then one
stream per chunk), so the output is a pure function of the config and memory stays bounded by
one chunk plus one Parquet row group per split, whatever the number of rows.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel

from trainer.simulate.clicks import ClickModel
from trainer.simulate.config import MAX_LABEL, SPLITS, SimulationConfig
from trainer.simulate.documents import Catalog, DocumentBatch, draw_documents, feature_names
from trainer.simulate.relevance_labels import RelevanceModel, calibrate
from trainer.simulate.users import Users, UserTypes, draw_user_types, draw_users
from trainer.simulate.writer import (
    SplitBatch,
    open_split_writer,
    split_file_name,
    write_truth,
    write_users,
)

_WORLD, _USERS, _CALIBRATION, _CHUNKS = range(4)
# Profile buckets that track the latent types; copied beside the user table.
CLUSTER_SCHEME = Path(__file__).with_name("cluster_scheme.toml")


def _rng(seed: int, *stream: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=stream))


@dataclass(frozen=True)
class World:
    """Everything fixed before the first query: types, users, catalog, relevance, clicks."""

    config: SimulationConfig
    types: UserTypes
    users: Users
    catalog: Catalog
    relevance: RelevanceModel
    click_model: ClickModel | None
    feature_names: list[str]

    @classmethod
    def build(cls, config: SimulationConfig) -> World:
        world_rng = _rng(config.seed, _WORLD)
        types = draw_user_types(config, world_rng)
        catalog = Catalog.draw(config.categories, world_rng)
        users = draw_users(types, config.users, _rng(config.seed, _USERS))
        relevance = calibrate(config, types, users, catalog, _rng(config.seed, _CALIBRATION))
        clicks = (
            ClickModel(config.eta, config.click_noise, config.logging_noise)
            if config.clicks
            else None
        )
        names = feature_names(config.num_features)
        return cls(config, types, users, catalog, relevance, clicks, names)


@dataclass(frozen=True)
class Chunk:
    """One generated chunk of queries, before it is divided between the splits."""

    docs: DocumentBatch
    qids: np.ndarray  # int64 [n_queries], 1-based and global
    user_index: np.ndarray  # int64 [n_queries], row in the user table
    split: np.ndarray  # int64 [n_queries], index into SPLITS
    labels: np.ndarray  # int64 [n_docs]
    positions: np.ndarray | None  # int64 [n_docs]
    clicks: np.ndarray | None  # int8 [n_docs]

    def for_split(self, index: int, users: Users) -> SplitBatch | None:
        keep = self.split == index
        if not keep.any():
            return None
        rows = keep[self.docs.query_index]
        sizes = np.diff(self.docs.offsets)[keep]
        return SplitBatch(
            qids=self.qids[keep],
            offsets=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
            user_ids=users.user_id[self.user_index[keep]],
            labels=self.labels[rows],
            features=self.docs.features[rows],
            positions=None if self.positions is None else self.positions[rows],
            clicks=None if self.clicks is None else self.clicks[rows],
        )


def generate_chunks(world: World) -> Iterator[Chunk]:
    """The dataset's chunks in order; exactly `config.rows` documents in all."""
    cfg = world.config
    lo, hi = cfg.docs_per_query
    split_cdf = np.cumsum(cfg.split)
    done, next_qid, index = 0, 1, 0
    while done < cfg.rows:
        rng = _rng(cfg.seed, _CHUNKS, index)
        sizes = rng.integers(lo, hi + 1, cfg.chunk_queries)
        ends = np.cumsum(sizes)
        remaining = cfg.rows - done
        if ends[-1] >= remaining:
            last = int(np.searchsorted(ends, remaining))
            sizes = sizes[: last + 1]
            sizes[-1] -= ends[last] - remaining
        user_index = world.users.sample_queries(sizes.size, rng)
        split = np.minimum(np.searchsorted(split_cdf, rng.random(sizes.size), side="right"), 2)
        docs = draw_documents(
            sizes, world.catalog, world.relevance.population_taste(), cfg.num_features, rng
        )
        user_type = world.users.true_type[user_index][docs.query_index]
        labels = world.relevance.draw_labels(
            docs.match, docs.quality, docs.category, docs.price_z, user_type, rng
        )
        positions = clicks = None
        if world.click_model is not None:
            positions = world.click_model.serve(docs.features, docs.query_index, docs.offsets, rng)
            clicks = world.click_model.click(positions, labels, rng)
        qids = np.arange(next_qid, next_qid + sizes.size, dtype=np.int64)
        yield Chunk(docs, qids, user_index, split, labels, positions, clicks)
        done += int(sizes.sum())
        next_qid += sizes.size
        index += 1


class SplitSummary(BaseModel):
    file: str
    queries: int
    rows: int
    clicks: int | None


class SimulationSummary(BaseModel):
    out_dir: str
    format: str
    rows: int
    queries: int
    users: int
    splits: dict[str, SplitSummary]
    label_counts: list[int]  # documents per grade 0..4
    users_file: str
    truth_file: str
    seconds: float


def _truth(world: World, splits: dict[str, SplitSummary], labels: np.ndarray) -> dict[str, Any]:
    cfg = world.config
    return {
        "generator": "ltr simulate",
        "config": cfg.model_dump(mode="json"),
        "feature_names": world.feature_names,
        "relevance": world.relevance.to_json(),
        "user_types": world.types.to_json(),
        "documents": world.catalog.to_json(),
        "clicks": None
        if world.click_model is None
        else world.click_model.to_json(cfg.docs_per_query[1]),
        "splits": {name: s.model_dump() for name, s in splits.items()},
        "label_counts": labels.tolist(),
    }


def simulate(
    config: SimulationConfig,
    out_dir: Path,
    progress: Callable[[int, int], None] | None = None,
) -> SimulationSummary:
    """Write train/vali/test files, the user table and `truth.json` into `out_dir`.

    `progress(rows_done, rows_total)` is called after every chunk.
    """
    started = time.perf_counter()
    out_dir.mkdir(parents=True, exist_ok=True)
    world = World.build(config)
    writers = [
        open_split_writer(
            out_dir, s, config.format, world.feature_names, config.clicks, config.row_group_rows
        )
        for s in SPLITS
    ]
    counts = np.zeros((len(SPLITS), 3), dtype=np.int64)  # queries, rows, clicks
    label_counts = np.zeros(MAX_LABEL + 1, dtype=np.int64)
    done = 0
    try:
        for chunk in generate_chunks(world):
            for i, writer in enumerate(writers):
                batch = chunk.for_split(i, world.users)
                if batch is None:
                    continue
                writer.write(batch)
                clicked = 0 if batch.clicks is None else int(batch.clicks.sum())
                counts[i] += (batch.qids.size, batch.num_docs, clicked)
            label_counts += np.bincount(chunk.labels, minlength=MAX_LABEL + 1)
            done += chunk.labels.size
            if progress is not None:
                progress(done, config.rows)
    finally:
        for writer in writers:
            writer.close()
    splits = {
        s: SplitSummary(
            file=split_file_name(s, config.format),
            queries=int(counts[i, 0]),
            rows=int(counts[i, 1]),
            clicks=int(counts[i, 2]) if config.clicks else None,
        )
        for i, s in enumerate(SPLITS)
    }
    users_path = write_users(world.users, out_dir, config.format)
    shutil.copyfile(CLUSTER_SCHEME, out_dir / CLUSTER_SCHEME.name)
    truth_path = write_truth(_truth(world, splits, label_counts), out_dir)
    return SimulationSummary(
        out_dir=str(out_dir),
        format=config.format,
        rows=done,
        queries=int(counts[:, 0].sum()),
        users=world.users.count,
        splits=splits,
        label_counts=label_counts.tolist(),
        users_file=users_path.name,
        truth_file=truth_path.name,
        seconds=round(time.perf_counter() - started, 3),
    )
