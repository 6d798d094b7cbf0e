"""`ltr convert`: a LightGBM model.txt or XGBoost JSON model → a verified version directory."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import numpy as np
import orjson
import typer

from app.artifacts.store import ArtifactError, sha256_hex
from app.artifacts.tree_dump import ZERO_THRESHOLD, TreeEnsemble
from app.errors import counted
from trainer.commands.errors import CommandError, clear_errors, fail
from trainer.data.errors import DataFormatError
from trainer.export import ExportError, check_out_dir

SOURCES = ("lightgbm", "xgboost")
LIBRARY_RTOL = 0.0  # LightGBM: bit-identical (same decisions, same float64 sum in tree order)
FLOAT32_RTOL = 4 * 2.0**-24  # a few float32 roundings of the largest score
PROBE_ROWS = 2_000


def convert_command(
    model_file: Annotated[
        Path, typer.Argument(help="model.txt (LightGBM) or model.json (XGBoost).")
    ],
    source: Annotated[str, typer.Option("--from", help="lightgbm | xgboost")],
    out: Annotated[
        Path, typer.Option(help="Version directory to create; its name is the version.")
    ],
    name: Annotated[str, typer.Option(help="Model name.")] = "default",
    feature_names: Annotated[
        str | None,
        typer.Option(help="Comma-separated names, or @FILE with one name per line."),
    ] = None,
    data: Annotated[
        Path | None, typer.Option(help="Judged data: verify on it and record its metrics.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Convert a LightGBM or XGBoost model and check it scores like the library did."""
    from trainer.convert import ModelFormatError, convert_lightgbm, convert_xgboost
    from trainer.convert.xgboost_model import early_stopping_note

    notes: list[str | None] = []
    if source not in SOURCES:
        fail(f"--from {source!r}: choose lightgbm or xgboost")
    with clear_errors(ModelFormatError, ExportError, ArtifactError, DataFormatError):
        check_out_dir(out, name)
        raw = _read(model_file)
        names = _names(feature_names)
        if source == "lightgbm":
            ensemble = convert_lightgbm(
                _text(raw, model_file, "a LightGBM text model"), names, source=str(model_file)
            )
        else:
            ensemble = convert_xgboost(raw, source=str(model_file))
            notes.append(early_stopping_note(raw, len(ensemble.trees)))
        own = ensemble.meta.get("feature_names")
        if own == automatic_lightgbm_names(ensemble.num_features):
            # LightGBM names the columns of a plain array itself; they name nothing the
            # caller's data has, so the version takes f1..fN as for a model without names.
            own = None
            notes.append(
                "the model's feature names are LightGBM's own Column_0.. (trained on an array "
                "without names): the version takes f1..fN; --feature-names names them"
            )
        final_names = names or own or [f"f{i + 1}" for i in range(ensemble.num_features)]
        if len(final_names) != ensemble.num_features:
            raise CommandError(
                f"--feature-names: {len(final_names)} names, the model has "
                f"{ensemble.num_features} features"
            )
        _check_unique(final_names, "--feature-names" if names else str(model_file))
        summary = _export(ensemble, source, raw, model_file, out, name, list(final_names), data)
        if source == "xgboost" and data is not None:
            notes.append(_sparse_letor_note(data, ensemble.num_features))
        summary["notes"] = [note for note in notes if note]
    for note in summary["notes"]:
        typer.echo(f"note: {model_file}: {note}", err=True)
    if as_json:
        typer.echo(orjson.dumps(summary).decode())
    else:
        typer.echo(summary["model_dir"])
        trees = summary["trees"]
        typer.echo(
            f"{source} → {counted(trees, 'tree')}, verified on {summary['verified_rows']} rows"
        )


def _sparse_letor_note(data: Path, width: int) -> str | None:
    """XGBoost reads a feature left out of a LETOR/libsvm line as missing, ltr as 0 (SVMlight's
    and LightGBM's reading): a trial's model trained on such files scored the same file
    differently here (max 1.32) than XGBoost did, while convert said "verified" (it gives both
    the same dense rows), and /rerank with the keys left out of a name map agreed with XGBoost."""
    from trainer.data.loader import PARQUET_SUFFIXES

    if data.suffix.lower() in PARQUET_SUFFIXES:
        return None
    absent = 0
    for line in data.read_bytes().splitlines():
        body = line.split(b"#", 1)[0]
        if body.strip():
            values = sum(1 for t in body.split() if b":" in t and not t.startswith(b"qid:"))
            absent += max(width - values, 0)
    if absent == 0:
        return None
    return (
        f"{data} leaves {counted(absent, 'feature value')} out of its lines, read as 0 here "
        "(as SVMlight and LightGBM read them) but as missing by XGBoost trained on such a file: "
        "if the model was trained so, give the data as Parquet with nulls for missing values, "
        "and send null (or leave the name out of a feature map) to /rerank"
    )


def automatic_lightgbm_names(n: int) -> list[str]:
    """The names LightGBM gives the columns of data passed without names."""
    return [f"Column_{i}" for i in range(n)]


def _check_unique(names: list[str], where: str) -> None:
    seen: dict[str, int] = {}
    for i, name in enumerate(names):
        if name in seen:
            raise CommandError(
                f"{where}: feature name {name!r} is given twice (features {seen[name] + 1} and "
                f"{i + 1}); each feature needs its own name"
            )
        seen[name] = i


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise CommandError(f"{path}: cannot read ({exc.strerror})") from None


def _text(raw: bytes, path: Path, what: str = "a text file") -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise CommandError(f"{path}: not {what} (not UTF-8 text)") from None


def _names(option: str | None) -> list[str] | None:
    if option is None:
        return None
    if option.startswith("@"):
        lines = _text(_read(Path(option[1:])), Path(option[1:])).splitlines()
        return [line.strip() for line in lines if line.strip()]
    parts = [part.strip() for part in option.split(",")]
    if option.strip() and "" in parts:
        # Dropping it said "7 feature names for a model of 8 features" of an 8-name list.
        at = parts.index("")
        raise CommandError(f"--feature-names: name {at + 1} of {len(parts)} is empty")
    return [part for part in parts if part]


def _export(
    ensemble: TreeEnsemble,
    source: str,
    raw: bytes,
    model_file: Path,
    out: Path,
    name: str,
    names: list[str],
    data: Path | None,
) -> dict[str, Any]:
    from app.scoring.reference import predict
    from trainer.export import export_tree_model, metric_entries, scores_match
    from trainer.metrics.report import ranking_report

    metrics: dict[str, Any] = {}
    if data is not None:
        from trainer.data.loader import load_dataset

        dataset = load_dataset(data, feature_names=names)
        features = dataset.features
        ours = predict(ensemble, features)
        metrics = metric_entries(
            ranking_report(ours, dataset.labels, dataset.group_offsets), dataset, 1.0
        )
    else:
        features = probe_features(ensemble, PROBE_ROWS, infinities=source == "lightgbm")
        ours = predict(ensemble, features)
    theirs = library_scores(source, raw, features, model_file)
    # XGBoost adds leaf values in float32: the routing is checked against the same float32
    # sum; the dump's float64 sum differs from XGBoost's by the rounding that sum accumulates.
    comparable = ours if source == "lightgbm" else float32_sum_scores(ensemble, features)
    rtol = LIBRARY_RTOL if source == "lightgbm" else FLOAT32_RTOL
    if not scores_match(comparable, theirs, rtol):
        worst = float(np.max(np.abs(comparable - theirs)))
        raise CommandError(
            f"{model_file}: the converted model scores differently from {source} "
            f"(max abs difference {worst:.3g}); nothing was written"
        )
    scale = max(float(np.max(np.abs(theirs), initial=0.0)), 1e-300)
    training = {
        "engine": source,
        "converted_from": str(model_file),
        "source_sha256": sha256_hex(raw),
        "objective": ensemble.meta.get("objective"),
        "trees": len(ensemble.trees),
    }
    path = export_tree_model(
        ensemble,
        out,
        name=name,
        feature_names=names,
        metrics=metrics,
        training=training,
        verify_features=features,
        expected_scores=ours,
    )
    return {
        "model_dir": str(path),
        "name": name,
        "version": path.name,
        "kind": "lambdamart",
        "engine": source,
        "trees": len(ensemble.trees),
        "verified_rows": int(features.shape[0]),
        "max_rel_diff": float(np.max(np.abs(ours - theirs), initial=0.0)) / scale,
        "metrics": {k: v["value"] for k, v in metrics.items()},
    }


def library_scores(
    source: str, raw: bytes, features: np.ndarray, model_file: Path | str = "model"
) -> np.ndarray:
    """The library's own scores, float64 [n_rows], for float32 [n_rows, n_features].

    A model or rows the library refuses is a CommandError naming `model_file`.
    """
    if source == "lightgbm":
        import lightgbm as lgb

        try:
            booster = lgb.Booster(model_str=raw.decode("utf-8"))
            scores = booster.predict(features, raw_score=True)
        except (lgb.basic.LightGBMError, ValueError) as exc:
            raise _refused(model_file, source, exc) from None
        return np.asarray(scores, dtype=np.float64)
    import xgboost as xgb

    try:
        xbooster = xgb.Booster()
        xbooster.load_model(bytearray(raw))
        # A model fitted on named columns (a DataFrame, a named DMatrix) refuses unnamed rows;
        # the rows are in the model's column order whatever names the user gave the copy.
        matrix = xgb.DMatrix(features, missing=np.nan, feature_names=xbooster.feature_names)
        scores = xbooster.predict(matrix, output_margin=True)
    except ValueError as exc:  # XGBoostError and its feature-name checks are ValueErrors
        raise _refused(model_file, source, exc) from None
    return np.asarray(scores, dtype=np.float64)


def _refused(model_file: Path | str, source: str, exc: Exception) -> CommandError:
    """One line: the library's first line says what it rejects, the rest is its call stack."""
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return CommandError(
        f"{model_file}: {source} cannot score the verification rows ({first}); nothing was written"
    )


def float32_sum_scores(ensemble: TreeEnsemble, features: np.ndarray) -> np.ndarray:
    """Scores float64 [n_rows] summed as XGBoost does: float32, base score first, tree order."""
    from app.scoring.reference import tree_leaf_index

    total = np.full(features.shape[0], np.float32(ensemble.base_score), dtype=np.float32)
    for tree in ensemble.trees:
        total += tree.leaf_value[tree_leaf_index(tree, features)].astype(np.float32)
    return total.astype(np.float64)


def probe_features(ensemble: TreeEnsemble, n_rows: int, *, infinities: bool) -> np.ndarray:
    """Rows that exercise every split: float32 [n_rows, num_features].

    Values sit on, just below and just above the model's thresholds, with NaN, ±0, the edges of
    LightGBM's zero band (|x| <= kZeroThreshold reads as 0) and, when the library accepts them,
    ±inf mixed in, so both branches and the missing direction are taken.
    """
    rng = np.random.default_rng(0)
    per_feature: list[list[np.ndarray]] = [[np.zeros(1)] for _ in range(ensemble.num_features)]
    for tree in ensemble.trees:
        for feature, threshold in zip(tree.split_feature, tree.threshold, strict=True):
            per_feature[feature].append(np.array([threshold]))
    out = np.empty((n_rows, ensemble.num_features), dtype=np.float32)
    for j, values in enumerate(per_feature):
        pool = np.concatenate(values)
        with np.errstate(over="ignore"):  # a threshold past float32 (LightGBM's 1e300) is inf
            out[:, j] = rng.choice(pool[np.isfinite(pool)], size=n_rows).astype(np.float32)
    nudge = rng.integers(-1, 2, size=out.shape)
    toward = np.where(nudge < 0, -np.inf, np.inf).astype(np.float32)
    out = np.where(nudge == 0, out, np.nextafter(out, toward)).astype(np.float32)
    special = rng.random(out.shape)
    out[special < 0.10] = np.nan
    out[(special >= 0.10) & (special < 0.15)] = 0.0
    band = special >= 0.95
    out[band] = rng.choice(ZERO_BAND_PROBES, size=int(band.sum()))
    if infinities:
        out[(special >= 0.15) & (special < 0.16)] = np.inf
        out[(special >= 0.16) & (special < 0.17)] = -np.inf
    return out


def _zero_band_probes() -> np.ndarray:
    """float32 values at and one step either side of ±kZeroThreshold, and both zeros."""
    edge = np.float32(ZERO_THRESHOLD)
    steps = [np.nextafter(edge, np.float32(0)), edge, np.nextafter(edge, np.float32(1))]
    return np.array([*steps, *(-v for v in steps), 0.0, -0.0], dtype=np.float32)


ZERO_BAND_PROBES = _zero_band_probes()


def register(app: typer.Typer) -> None:
    app.command("convert")(convert_command)
