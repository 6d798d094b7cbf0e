"""Artifact → scorer by the manifest's kind: trees are compiled, networks run in onnxruntime."""

from __future__ import annotations

from pathlib import Path

from app.artifacts.store import Artifact, ArtifactError
from app.artifacts.tree_dump import TreeDumpError, TreeEnsemble
from app.scoring.compiled import (
    DEFAULT_PARALLEL_MIN_ROWS,
    DEFAULT_SPARE_CORE_MIN_ROWS,
    CompiledTreeScorer,
)
from app.scoring.onnx_scorer import OnnxModelError, OnnxScorer
from app.scoring.protocol import Scorer


def load_scorer(
    artifact: Artifact,
    *,
    threads: int = 1,
    onnx_intra_op_threads: int = 1,
    parallel_min_rows: int = DEFAULT_PARALLEL_MIN_ROWS,
    spare_core_min_rows: int = DEFAULT_SPARE_CORE_MIN_ROWS,
    cache_dir: Path | None = None,
) -> Scorer:
    """The scorer for a verified artifact; raises ArtifactError saying what is wrong.

    `threads`, `parallel_min_rows` and `spare_core_min_rows`: compiled trees use up to `threads`
    threads for requests of at least `parallel_min_rows` rows, or `spare_core_min_rows` while a
    core is idle. `onnx_intra_op_threads`: onnxruntime's intra-op pool.
    `cache_dir`: compiled tree code is kept there (keyed by model sha256 and CPU) when given.
    """
    manifest = artifact.manifest
    name = manifest.model_file
    where = artifact.path / name
    data = artifact.files.get(name)
    if data is None:
        raise ArtifactError(f"{where}: missing from the artifact")
    expected = len(manifest.feature_names)
    scorer: Scorer
    if manifest.kind == "lambdamart":
        try:
            ensemble = TreeEnsemble.from_json_bytes(data, where=str(where))
        except TreeDumpError as exc:
            raise ArtifactError(str(exc)) from None
        if ensemble.num_features != expected:
            raise ArtifactError(
                f"{where}: {ensemble.num_features} features, manifest lists {expected}"
            )
        scorer = CompiledTreeScorer(
            ensemble,
            model_sha256=manifest.files.get(name),
            cache_dir=cache_dir,
            threads=threads,
            parallel_min_rows=parallel_min_rows,
            spare_core_min_rows=spare_core_min_rows,
        )
    else:
        uc = manifest.user_clusters
        try:
            scorer = OnnxScorer(
                data,
                intra_op_threads=onnx_intra_op_threads,
                user_input=uc is not None and uc.input == "onnx_input",
            )
        except OnnxModelError as exc:
            raise ArtifactError(f"{where}: {exc}") from None
        if scorer.num_features != expected:
            raise ArtifactError(
                f"{where}: {scorer.num_features} features, manifest lists {expected}"
            )
        if uc is not None and scorer.user_dim is not None and scorer.user_dim != uc.embedding_dim:
            raise ArtifactError(
                f"{where}: user input has width {scorer.user_dim}, manifest says {uc.embedding_dim}"
            )
    return scorer
