"""`ltr evaluate`: score a data file with a model version and report ranking metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import numpy as np
import orjson
import typer

from app.artifacts.store import Artifact, ArtifactError, load_version
from app.artifacts.tree_dump import TreeDumpError
from trainer.commands.errors import CommandError, clear_errors, echo_err, fail
from trainer.commands.options import ItemsIdColumn
from trainer.data.dataset import RankingDataset
from trainer.data.errors import DataFormatError

ONNX_CHUNK_ROWS = 65_536


def evaluate_command(
    model: Annotated[Path, typer.Option("--model", help="Version directory (ltr train --out).")],
    data: Annotated[
        Path,
        typer.Option(
            "--data",
            help="Judged data (LETOR text or Parquet; for a model with item features, Parquet "
            "with the document id column its item features are joined by).",
        ),
    ],
    empty_query_ndcg: Annotated[
        float,
        typer.Option(
            min=0.0,
            max=1.0,
            help="NDCG, MAP and MRR of a query with no relevant document (LightGBM's NDCG and "
            "MAP: 1). ERR@10 and DCG@10 are 0 there, whatever this says.",
        ),
    ] = 1.0,
    propensities: Annotated[
        Path | None,
        typer.Option(
            help="Click data: IPW labels from this propensities.json (compare on dcg@10)."
        ),
    ] = None,
    user_profiles: Annotated[
        Path | None,
        typer.Option(
            help="Models with user clusters: the user_id → profile table (CSV or Parquet) for "
            "the data's users (Parquet column user_id or a .user side file). Each list gets "
            "the vector the service computes from that profile; a user without a row counts "
            "as a request without a profile."
        ),
    ] = None,
    items: Annotated[
        Path | None,
        typer.Option(
            help="Models with item features: the item table (Parquet) to join by the data's "
            "document id column, instead of the snapshot the version carries."
        ),
    ] = None,
    items_id_column: ItemsIdColumn = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """NDCG@1/3/5/10, MAP, MRR, ERR@10 and DCG@10 of a model version on a data file."""
    from trainer.data.model_rows import load_model_rows
    from trainer.dnn.user_clusters import ClusterConfigError
    from trainer.dnn.user_profiles import ProfileTableError
    from trainer.metrics.report import ranking_report

    users: dict[str, Any] | None = None
    with clear_errors(
        ArtifactError, TreeDumpError, DataFormatError, ClusterConfigError, ProfileTableError
    ):
        artifact = load_version(model)
        manifest = artifact.manifest
        if manifest.user_clusters is not None and user_profiles is None:
            raise CommandError(
                f"{model}: the model uses user-cluster embeddings: pass --user-profiles FILE "
                "(the user_id → profile table) so each list gets its user's vector"
            )
        if manifest.user_clusters is None and user_profiles is not None:
            echo_err(
                f"warning: {model} has no user-cluster features: --user-profiles "
                f"{user_profiles} is not used"
            )
        rows = load_model_rows(artifact, data, items, items_id_column)
        join = rows.items
        if join is not None and join.found.size and not join.found.any():
            # Scored with every item feature missing: the figures would be of another model.
            # `ltr train` refuses the same files.
            fail(
                f"{data}: none of its {join.found.size:,} documents is in {join.source} (joined "
                f"by {join.id_column!r}): check the data's document ids and --items-id-column"
            )
        dataset = rows.data
        if propensities is not None:  # clicks, scored without the served ranking's bias
            from trainer.clicks.ipw_eval import ipw_relabel
            from trainer.clicks.propensity import load_propensities

            clicks = _clicks_beside(data)
            if clicks is not None:
                # `ltr simulate`'s layout: the labels are true grades. They were re-weighted
                # as if they were clicks and reported as "clicks, IPW".
                fail(
                    f"{data}: its labels are relevance grades, its clicks are in {clicks}: "
                    "--propensities re-weights click labels (ltr dataset --from-logs writes "
                    "them); leave it out to evaluate on the grades"
                )

            dataset = ipw_relabel(dataset, load_propensities(propensities)[0])
        # An overflow is reported below, as the documents it concerns, not as numpy's warning.
        with np.errstate(over="ignore", invalid="ignore"):
            if manifest.user_clusters is not None and user_profiles is not None:
                scores, users = _scores_with_users(artifact, dataset, user_profiles)
            else:
                scores = _scores(artifact, dataset.features)
        report = ranking_report(
            scores, dataset.labels, dataset.group_offsets, empty_value=empty_query_ndcg
        )
    not_finite = int(np.count_nonzero(~np.isfinite(scores)))
    if not_finite:
        # The service answers such lists degraded (scores_not_finite); the metrics here rank
        # them all the same (NaN last), which is no ranking of those documents.
        echo_err(
            f"warning: the model's score is not finite for {not_finite} of {scores.size} "
            "documents (values far beyond its training data overflow a network): the metrics "
            "rank them last"
        )
    out: dict[str, Any] = {
        **report,
        "model": {"name": manifest.name, "version": manifest.version, "kind": manifest.kind},
        "data": str(data),
        "empty_query_ndcg": empty_query_ndcg,
        "labels": "clicks, IPW" if propensities is not None else "as given",
    }
    if not_finite:
        out["scores_not_finite"] = not_finite
    if users is not None:
        out["users"] = users
    if rows.items is not None:
        out["items"] = rows.items.summary()
    if as_json:
        typer.echo(orjson.dumps(out).decode())
        return
    typer.echo(f"{manifest.name} {manifest.version} ({manifest.kind}) on {data}")
    for key, value in report.items():
        typer.echo(f"  {key:<9} {value:.4f}" if isinstance(value, float) else f"  {key:<9} {value}")
    if users is not None:
        typer.echo(
            f"  users     {users['lists_with_profile']} of {users['lists']} lists with a profile; "
            f"resolved to: {', '.join(f'{k} {v}' for k, v in users['resolved_to'].items())}"
        )
    if rows.items is not None:
        typer.echo(f"  items     {rows.items.text()}")


def _scores_with_users(
    artifact: Artifact, dataset: RankingDataset, profiles_path: Path
) -> tuple[np.ndarray, dict[str, Any]]:
    """Scores float64 [n_docs] with each list's user vector, and how the users resolved
    (how many lists kept their full cluster id, fell back to a coarser one, or to unknown)."""
    from app.features.clusters import cluster_id
    from app.features.embedding_table import EmbeddingTable
    from trainer.dataset_scoring import score_dataset
    from trainer.dnn.user_clusters import ClusterConfigError, user_vectors
    from trainer.dnn.user_profiles import read_profiles

    if dataset.user_ids is None:
        raise ClusterConfigError(
            f"{dataset.source}: the model uses user clusters and needs the user of every list "
            "(Parquet column user_id or a .user side file)"
        )
    profiles = read_profiles(profiles_path)
    table = EmbeddingTable.from_files(artifact.manifest, artifact.files)
    scheme = table.user_clusters.scheme
    resolved = {"full_cluster": 0, "coarser_cluster": 0, "unknown": 0}
    with_profile = 0
    for user in dataset.user_ids:
        profile = profiles.get(str(user))
        with_profile += bool(profile)
        raw = cluster_id(scheme, profile) if profile else scheme.unknown
        got = table.resolve(raw)
        key = (
            "unknown"
            if got == scheme.unknown
            else "full_cluster"
            if got == raw
            else "coarser_cluster"
        )
        resolved[key] += 1
    vectors = user_vectors(table, profiles, list(dataset.user_ids))
    users = {
        "profiles": str(profiles_path),
        "lists": dataset.num_queries,
        "lists_with_profile": with_profile,
        "resolved_to": resolved,
        "field_embeddings": table.user_clusters.field_embeddings,
        "combination_buckets": table.user_clusters.combination_buckets,
    }
    return score_dataset(artifact, dataset, vectors).astype(np.float64), users


def _scores(artifact: Artifact, features: np.ndarray) -> np.ndarray:
    """float64 [n_docs] for features float32 [n_docs, n_features]."""
    if artifact.manifest.kind == "lambdamart":
        from app.artifacts.tree_dump import TreeEnsemble
        from app.scoring.reference import predict

        where = str(artifact.path / "model.json")
        return predict(TreeEnsemble.from_json_bytes(artifact.files["model.json"], where), features)
    from app.scoring.loader import load_scorer

    scorer = load_scorer(artifact)
    parts = [
        scorer.score(features[start : start + ONNX_CHUNK_ROWS])
        for start in range(0, features.shape[0], ONNX_CHUNK_ROWS)
    ]
    return np.concatenate(parts).astype(np.float64)


def register(app: typer.Typer) -> None:
    app.command("evaluate")(evaluate_command)


def _clicks_beside(data: Path) -> str | None:
    """Where `data` keeps clicks apart from its labels (a `.click` side file, a Parquet
    `click` column, as `ltr simulate` writes them), else None."""
    from trainer.data.loader import PARQUET_SUFFIXES, parquet_columns

    if data.suffix.lower() in PARQUET_SUFFIXES:
        return "its `click` column" if "click" in parquet_columns(data) else None
    side = Path(f"{data}.click")
    return str(side) if side.exists() else None
