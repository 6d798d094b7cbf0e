"""`ltr evaluate`: score a data file with a model version and report ranking metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import numpy as np
import orjson
import typer

from app.artifacts.store import Artifact, ArtifactError, load_version
from app.artifacts.tree_dump import TreeDumpError
from trainer.commands.errors import CommandError, clear_errors
from trainer.data.errors import DataFormatError

ONNX_CHUNK_ROWS = 65_536


def evaluate_command(
    model: Annotated[Path, typer.Option("--model", help="Version directory (ltr train --out).")],
    data: Annotated[Path, typer.Option("--data", help="Judged data (LETOR text or Parquet).")],
    empty_query_ndcg: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="Metric value of a query with no relevant doc.")
    ] = 1.0,
    propensities: Annotated[
        Path | None,
        typer.Option(
            help="Click data: IPW labels from this propensities.json (compare on dcg@10)."
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """NDCG@1/3/5/10, MAP, MRR, ERR@10 and DCG@10 of a model version on a data file."""
    from trainer.data.loader import load_dataset
    from trainer.metrics.report import ranking_report

    with clear_errors(ArtifactError, TreeDumpError, DataFormatError):
        artifact = load_version(model)
        manifest = artifact.manifest
        if manifest.user_clusters is not None:
            raise CommandError(
                f"{model}: the model uses user-cluster embeddings; "
                "ltr evaluate scores models without them only"
            )
        dataset = load_dataset(data, feature_names=manifest.feature_names)
        if propensities is not None:  # clicks, scored without the served ranking's bias
            from trainer.clicks.ipw_eval import ipw_relabel
            from trainer.clicks.propensity import load_propensities

            dataset = ipw_relabel(dataset, load_propensities(propensities)[0])
        scores = _scores(artifact, dataset.features)
        report = ranking_report(
            scores, dataset.labels, dataset.group_offsets, empty_value=empty_query_ndcg
        )
    out: dict[str, Any] = {
        **report,
        "model": {"name": manifest.name, "version": manifest.version, "kind": manifest.kind},
        "data": str(data),
        "empty_query_ndcg": empty_query_ndcg,
        "labels": "clicks, IPW" if propensities is not None else "as given",
    }
    if as_json:
        typer.echo(orjson.dumps(out).decode())
        return
    typer.echo(f"{manifest.name} {manifest.version} ({manifest.kind}) on {data}")
    for key, value in report.items():
        typer.echo(f"  {key:<9} {value:.4f}" if isinstance(value, float) else f"  {key:<9} {value}")


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
