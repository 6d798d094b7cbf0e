"""The nightly job with `model.engine = "lightgbm-dask"`: the Dask workers find the dated
Parquet partitions, read them and train; this process plans, then gates and publishes as the
local engines do.

Time split: the newest partition is held out for the gate, the one before it validates (global
NDCG@k, early stopping), the older ones train. With two partitions there is no validation set
(all trees are kept). The gate scores the held-out partition in this process, as it always has
(the workers read it and send it here); the training data never comes here.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from app.artifacts.store import load_version
from trainer.commands.errors import CommandError
from trainer.data.dataset import RankingDataset
from trainer.engines.lightgbm_ranker import EngineError
from trainer.nightly.config import NightlyConfig
from trainer.nightly.partitions import find_url_partitions


def cluster_partitions(config: NightlyConfig) -> list[tuple[dt.date, list[str]]]:
    """The newest dated partitions, listed by a worker (the data need not be visible here)."""
    from trainer.engines.lightgbm_dask import connect

    assert config.dask.scheduler is not None
    url = config.data.url or str(config.data.dir)
    with connect(config.dask.scheduler) as client:
        future = client.submit(find_url_partitions, url, config.data.partitions, pure=False)
        partitions: list[tuple[dt.date, list[str]]] = future.result()
    return partitions


def train_on_cluster(
    config: NightlyConfig, out: Path, progress: Any = None
) -> tuple[Path, RankingDataset, dict[str, Any]] | None:
    """Train the candidate `out` on the cluster: (its directory, the held-out set, the data
    summary), or None when there is no partition and the bundled demo data may be used."""
    from trainer.engines.dask_model import train_cluster_model

    assert config.dask.scheduler is not None
    try:
        partitions = cluster_partitions(config)
    except EngineError as exc:
        raise CommandError(str(exc)) from None
    url = config.data.url or str(config.data.dir)
    if not partitions:
        if config.data.bundled_demo:
            return None
        raise CommandError(f"{url}: no dated Parquet partitions (seen from the Dask cluster)")
    if len(partitions) < 2:
        raise CommandError(
            f"{url}: the cluster engine needs two dated partitions or more (time split: the "
            f"newest is held out), found {partitions[0][0]}"
        )
    *training, (held_date, held_files) = partitions
    valid = training.pop() if len(training) >= 2 else None
    train_files = [f for _, files in training for f in files]
    try:
        result = train_cluster_model(
            f"{url} ({', '.join(str(d) for d, _ in training)})",
            None if valid is None else f"{url} ({valid[0]})",
            config.model.lambdamart,
            out,
            scheduler=config.dask.scheduler,
            name=config.model.name,
            partition_rows=config.dask.partition_rows,
            on_iteration=None if progress is None else progress,
            train_files=train_files,
            valid_files=None if valid is None else valid[1],
            listen_port=config.dask.listen_port,
        )
    except EngineError as exc:
        raise CommandError(str(exc)) from None
    model_dir = result.model_dir
    names = load_version(model_dir).manifest.feature_names
    holdout = _held_out(config, f"{url} ({held_date})", held_files, names)
    data = {
        "source": url,
        "engine": "lightgbm-dask",
        "scheduler": config.dask.scheduler,
        "partitions": [str(d) for d, _ in partitions],
        "split": f"time: trained on {len(training)} partitions, "
        + (f"validated on {valid[0]}, " if valid else "no validation partition, ")
        + f"held out {held_date}",
        "holdout_queries": holdout.num_queries,
        "holdout_documents": holdout.num_docs,
    }
    return model_dir, holdout, data


def _held_out(
    config: NightlyConfig, source: str, files: list[str], feature_names: list[str]
) -> RankingDataset:
    """The held-out partition, read by the workers and sent here for the gate."""
    import numpy as np

    from trainer.data.dask_parquet import open_cluster_dataset
    from trainer.engines.lightgbm_dask import connect

    assert config.dask.scheduler is not None
    with connect(config.dask.scheduler) as client:
        held = open_cluster_dataset(client, source, feature_names, files=files)
        features, labels, sizes, qids = client.gather(
            client.compute([held.features, held.labels, held.query_sizes, held.query_ids])
        )
        held.release()
    offsets = np.concatenate([[0], np.cumsum(sizes.to_numpy())]).astype(np.int64)
    return RankingDataset(
        features=np.ascontiguousarray(features.to_numpy(np.float32)),
        labels=labels.to_numpy(np.float64),
        group_offsets=offsets,
        query_ids=qids.to_numpy(),
        feature_names=held.feature_names,
        source=source,
    )
