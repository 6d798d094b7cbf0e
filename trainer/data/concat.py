"""Joining query-grouped datasets (e.g. several date partitions) into one."""

from __future__ import annotations

import numpy as np

from trainer.data.dataset import RankingDataset


def concat_datasets(parts: list[RankingDataset], source: str = "") -> RankingDataset:
    """Stack datasets with the same columns; queries keep their order, part by part."""
    if not parts:
        raise ValueError("nothing to concatenate")
    width = parts[0].num_features
    names = parts[0].feature_names
    for part in parts[1:]:
        if part.num_features != width or part.feature_names != names:
            raise ValueError(
                f"{part.source}: {part.num_features} features do not match "
                f"{parts[0].source}'s {width}"
            )
    sizes = np.concatenate([p.group_sizes for p in parts])
    users = [p.user_ids for p in parts if p.user_ids is not None]
    positions = [p.positions for p in parts if p.positions is not None]
    doc_ids = [p.doc_ids for p in parts if p.doc_ids is not None]
    explored = [p.explored for p in parts if p.explored is not None]
    return RankingDataset(
        features=np.ascontiguousarray(np.vstack([p.features for p in parts])),
        labels=np.concatenate([p.labels for p in parts]),
        group_offsets=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
        query_ids=np.concatenate([p.query_ids.astype(object) for p in parts]),
        feature_names=names,
        source=source or "+".join(p.source for p in parts),
        user_ids=np.concatenate(users) if len(users) == len(parts) else None,
        positions=np.concatenate(positions) if len(positions) == len(parts) else None,
        doc_ids=np.concatenate(doc_ids) if len(doc_ids) == len(parts) else None,
        explored=np.concatenate(explored) if len(explored) == len(parts) else None,
    )
