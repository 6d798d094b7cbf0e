"""`ltr train`: learn a ranker (native LambdaMART, LightGBM lambdarank or LambdaDNN) and write
it as a verified version directory."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import orjson
import typer
from pydantic import BaseModel

from app.artifacts.store import ArtifactError
from trainer.commands.errors import CommandError, clear_errors, echo_err, fail
from trainer.config import ConfigError, build_params, read_config
from trainer.data.errors import DataFormatError
from trainer.export import ExportError, check_out_dir

if TYPE_CHECKING:
    # trainer.lambdamart's package imports numba: keep `ltr --help` and `ltr serve` light.
    from trainer.data.dataset import RankingDataset
    from trainer.dnn.options import DNNOptions
    from trainer.engines.training_result import TrainingResult
    from trainer.engines.user_embeddings import TreeUserOptions, TreeUserTable
    from trainer.features.source_checks import ItemCoverage
    from trainer.lambdamart.lambdas import LambdaObjective
    from trainer.lambdamart.params import LambdaMARTParams

ENGINES = ("native", "lightgbm", "lightgbm-dask", "dnn")
TREE = "Tree engines (native, lightgbm, lightgbm-dask)"
DNN = "DNN engine"
CLICKS = "Click logs (native engine)"
SOURCES = "Feature sources (query columns, item table)"
USERS = "User features (all engines; docs/PERSONALISATION.md)"
# DNN flags that, for a tree engine with user features, shape the network learning the table.
EMBEDDING_NETWORK_KEYS = ("loss", "arch", "hidden", "epochs", "batch_queries", "dropout")
Opt = typer.Option
M = TypeVar("M", bound=BaseModel)


def train_command(
    train_file: Annotated[Path, Opt("--train", help="Training data (LETOR text or Parquet).")],
    out: Annotated[
        Path, Opt("--out", help="Version directory to create; its name is the version.")
    ],
    valid_file: Annotated[
        Path | None,
        Opt(
            "--valid",
            help="Validation data: early stopping and the metrics recorded in the manifest.",
            show_default="none, metrics on the training data",
        ),
    ] = None,
    engine: Annotated[
        str | None,
        Opt(
            help="native | lightgbm | lightgbm-dask | dnn.",
            show_default="the config's engine, else native",
        ),
    ] = None,
    dask_scheduler: Annotated[
        str | None,
        Opt(
            help="Dask scheduler address for --engine lightgbm-dask.",
            rich_help_panel=TREE,
            show_default="none",
        ),
    ] = None,
    dask_listen_port: Annotated[
        int | None,
        Opt(
            help="--engine lightgbm-dask: the port LightGBM's own network listens on, on every "
            "worker machine (one worker per machine), for a firewalled cluster.",
            rich_help_panel=TREE,
            show_default="free ports LightGBM picks",
            min=1,
            max=65535,
        ),
    ] = None,
    config: Annotated[
        Path | None,
        Opt(
            help="Params TOML file: top-level keys named as the flags with underscores "
            '(num_trees = 200, learning_rate = 0.05, engine = "lightgbm"; --early-stopping is '
            "early_stopping_rounds), the keys of a nightly config's model.lambdamart / "
            "model.dnn table; flags override it.",
            show_default="none",
        ),
    ] = None,
    name: Annotated[str, Opt(help="Model name.")] = "default",
    num_trees: Annotated[
        int | None,
        Opt(
            help="Boosting rounds: the most trees grown (early stopping may keep fewer).",
            rich_help_panel=TREE,
            show_default="100",
        ),
    ] = None,
    num_leaves: Annotated[
        int | None, Opt(help="Leaves per tree, at most.", rich_help_panel=TREE, show_default="31")
    ] = None,
    min_data_in_leaf: Annotated[
        int | None,
        Opt(help="Documents per leaf, at least.", rich_help_panel=TREE, show_default="20"),
    ] = None,
    max_bin: Annotated[
        int | None,
        Opt(help="Histogram bins per feature.", rich_help_panel=TREE, show_default="255"),
    ] = None,
    learning_rate: Annotated[
        float | None,
        Opt(
            help="Shrinkage of each tree (tree engines); Adam step size (dnn).",
            show_default="0.1 for trees, 0.001 for dnn",
        ),
    ] = None,
    early_stopping: Annotated[
        int | None,
        Opt(
            help=(
                "Stop after ROUNDS trees (tree engines) or epochs (dnn) without a gain on "
                "--valid: NDCG@k, or IPW DCG@k for click data given --propensities and served "
                "positions. The best iteration is kept."
            ),
            metavar="ROUNDS",
            show_default="off for trees, 10 epochs for dnn",
        ),
    ] = None,
    eval_at: Annotated[
        int | None,
        Opt(help="k of the NDCG@k to report and early-stop on.", show_default="10"),
    ] = None,
    seed: Annotated[
        int | None,
        Opt(help="Random seed: same seed, data and threads, same model.", show_default="0"),
    ] = None,
    threads: Annotated[
        int | None,
        Opt(
            help=(
                "CPU threads; 0 = all cores. The DNN defaults to 1: more torch threads "
                "collapse on a loaded machine."
            ),
            show_default="all cores for trees, 1 for dnn",
        ),
    ] = None,
    loss: Annotated[
        str | None,
        Opt(
            help="lambdarank | ranknet | listnet | pointwise.",
            rich_help_panel=DNN,
            show_default="lambdarank",
        ),
    ] = None,
    arch: Annotated[
        str | None,
        Opt(
            help="mlp | dcn (deep and cross network, Wang et al. 2017).",
            rich_help_panel=DNN,
            show_default="mlp",
        ),
    ] = None,
    hidden: Annotated[
        str | None,
        Opt(
            help="Hidden layer widths, comma-separated.",
            rich_help_panel=DNN,
            show_default="256,128",
        ),
    ] = None,
    epochs: Annotated[
        int | None,
        Opt(
            help="Passes over the training lists, at most.", rich_help_panel=DNN, show_default="100"
        ),
    ] = None,
    batch_queries: Annotated[
        int | None,
        Opt(
            help="Query lists per batch (a list is never split).",
            rich_help_panel=DNN,
            show_default="32",
        ),
    ] = None,
    dropout: Annotated[
        float | None,
        Opt(help="Dropout after each hidden layer.", rich_help_panel=DNN, show_default="0.1"),
    ] = None,
    user_profiles: Annotated[
        Path | None,
        Opt(
            help="User profile table (CSV with a header line, or Parquet): a user_id column "
            "and the fields the cluster scheme names; the data gives each list's user (Parquet "
            "column user_id or a .user side file). See docs/PERSONALISATION.md.",
            rich_help_panel=USERS,
            show_default="none",
        ),
    ] = None,
    cluster_config: Annotated[
        Path | None,
        Opt(
            help="Cluster scheme TOML: the profile fields, coarse to fine, with their values "
            "or numeric bucket edges (e.g. the cluster_scheme.toml ltr simulate writes).",
            rich_help_panel=USERS,
            show_default="none",
        ),
    ] = None,
    embedding_dim: Annotated[
        int | None,
        Opt(
            help="Width of the user vector (the sum of its cluster, field and combination rows).",
            rich_help_panel=USERS,
            show_default="32",
        ),
    ] = None,
    min_cluster_count: Annotated[
        int | None,
        Opt(
            help="Training users a cluster id (or a field value) needs for its own row; rarer "
            "ids fall back to coarser ones (trailing fields dropped), then to unknown.",
            rich_help_panel=USERS,
            show_default="20",
        ),
    ] = None,
    field_embeddings: Annotated[
        bool | None,
        Opt(
            "--field-embeddings/--no-field-embeddings",
            help="Add one row per profile-field value to the cluster's row, so a user whose "
            "cluster is rare keeps every field.",
            rich_help_panel=USERS,
            show_default="on",
        ),
    ] = None,
    combination_buckets: Annotated[
        int | None,
        Opt(
            help="Hash buckets of the field-combination rows: each combination of 2 to "
            "--combination-max-fields of a user's field values that at least --min-cluster-count "
            "users share gets a row, added to the user's vector whatever the field order. "
            "0 turns them off; needs --field-embeddings.",
            rich_help_panel=USERS,
            show_default="65536",
        ),
    ] = None,
    combination_max_fields: Annotated[
        int | None,
        Opt(
            help="Most profile fields one combination row joins (2 = pairs, 3 = pairs and "
            "triples).",
            rich_help_panel=USERS,
            show_default="3",
        ),
    ] = None,
    user_embeddings_from: Annotated[
        Path | None,
        Opt(
            help="Tree engines: reuse the user table of this version directory (trained with "
            "user clusters) instead of learning one with a LambdaDNN first.",
            rich_help_panel=USERS,
            show_default="none",
        ),
    ] = None,
    unbiased: Annotated[
        bool,
        Opt(help="Click labels: correct for position bias (--debias).", rich_help_panel=CLICKS),
    ] = False,
    propensities: Annotated[
        Path | None,
        Opt(
            help="propensities.json (ltr dataset) or truth.json.",
            rich_help_panel=CLICKS,
            show_default="none",
        ),
    ] = None,
    discount: Annotated[
        str, Opt(help="Delta-NDCG discount: log2 | ctr | theta.", rich_help_panel=CLICKS)
    ] = "log2",
    max_weight: Annotated[
        float | None,
        Opt(help="Clip 1/propensity at this.", rich_help_panel=CLICKS, show_default="no clip"),
    ] = None,
    debias: Annotated[
        str,
        Opt(
            help="ipw | pairwise (Hu et al. 2019) | position-bias | click-model.",
            rich_help_panel=CLICKS,
        ),
    ] = "click-model",
    features_spec: Annotated[
        Path | None,
        Opt(
            help="Feature sources file (TOML or JSON) giving what the flags below give: query "
            "(the columns) and an item section (table, set, id_column, items_id_column); a "
            "flag given wins over the file. Every key, with examples: docs/FEATURES.md.",
            rich_help_panel=SOURCES,
            show_default="none",
        ),
    ] = None,
    query_features: Annotated[
        str | None,
        Opt(
            help="Query-level columns of the data (one value per query), comma-separated.",
            rich_help_panel=SOURCES,
            show_default="none",
        ),
    ] = None,
    items: Annotated[
        Path | None,
        Opt(
            help="Item feature table (Parquet), joined on the data's --id-column by its "
            "--items-id-column.",
            rich_help_panel=SOURCES,
            show_default="none",
        ),
    ] = None,
    item_set: Annotated[
        str | None,
        Opt(help="Name of the item feature set.", rich_help_panel=SOURCES, show_default="items"),
    ] = None,
    id_column: Annotated[
        str | None,
        Opt(
            help="Document id column of the training data (and of the item table, unless "
            "--items-id-column names its own).",
            rich_help_panel=SOURCES,
            show_default="doc_id",
        ),
    ] = None,
    items_id_column: Annotated[
        str | None,
        Opt(
            help="Item id column of the --items table, when not named as the data's.",
            rich_help_panel=SOURCES,
            show_default="--id-column",
        ),
    ] = None,
    as_json: Annotated[
        bool, Opt("--json", help="Print one JSON object.", show_default="off")
    ] = False,
) -> None:
    """Train a ranking model and write it as a version directory (manifest + model)."""
    _check_click_flags(unbiased, debias, discount, max_weight)
    flags: dict[str, Any] = {
        "num_trees": num_trees,
        "num_leaves": num_leaves,
        "min_data_in_leaf": min_data_in_leaf,
        "max_bin": max_bin,
        "learning_rate": learning_rate,
        "early_stopping_rounds": early_stopping,
        "eval_at": eval_at,
        "seed": seed,
        "threads": threads,
        "loss": loss,
        "arch": arch,
        "hidden": None if hidden is None else _int_list(hidden, "--hidden"),
        "epochs": epochs,
        "batch_queries": batch_queries,
        "dropout": dropout,
        "user_profiles": user_profiles,
        "cluster_config": cluster_config,
        "embedding_dim": embedding_dim,
        "min_cluster_count": min_cluster_count,
        "field_embeddings": field_embeddings,
        "combination_buckets": combination_buckets,
        "combination_max_fields": combination_max_fields,
        "user_embeddings_from": user_embeddings_from,
    }
    from trainer.dnn.user_clusters import ClusterConfigError
    from trainer.dnn.user_profiles import ProfileTableError
    from trainer.engines.lightgbm_ranker import EngineError
    from trainer.features.spec import SpecError, build_spec

    user_errors = (ClusterConfigError, ProfileTableError)
    with (
        clear_errors(
            ConfigError,
            DataFormatError,
            ExportError,
            ArtifactError,
            EngineError,
            SpecError,
            *user_errors,
        ),
        _out_of_memory_as_error(),
    ):
        check_out_dir(out, name)
        spec = build_spec(
            features_spec, query_features, items, item_set, id_column, items_id_column
        )
        final_out, out = out, _staging(out) if spec is not None else out
        sourced: list[Any] = []  # the joined data, once loaded (for the manifest's sources)
        file_values = read_config(config) if config is not None else {}
        chosen = engine or str(file_values.get("engine", "native"))
        if chosen not in ENGINES:
            fail(f"unknown engine {chosen!r} (choose one of {', '.join(ENGINES)})")
        if dask_listen_port is not None and chosen != "lightgbm-dask":
            fail(f"--dask-listen-port applies to --engine lightgbm-dask, not {chosen}")
        source = str(config) if config is not None else "command line"
        label = f"--engine {chosen}"
        read = _columns_read(flags, file_values, unbiased or propensities is not None)
        # Parameters are checked before the data is read: bad values fail before any work.
        if chosen == "dnn":
            from trainer.dnn.options import DNNOptions

            options = _params(DNNOptions, file_values, flags, source=source, label=label)
            _check_early_stopping(valid_file, early_stopping, file_values, source)
            loaded = _load(train_file, valid_file, spec, sourced, id_column, read)
            result = _train_dnn(*loaded, options, out, name)
        elif chosen == "lightgbm-dask":
            from trainer.lambdamart.params import LambdaMARTParams

            params = _params(LambdaMARTParams, file_values, flags, source=source, label=label)
            _check_early_stopping(valid_file, early_stopping, file_values, source)
            if unbiased or propensities is not None:
                fail("click-log debiasing (--unbiased, --propensities) trains with --engine native")
            result = _train_on_cluster(
                train_file, valid_file, params, out, name, dask_scheduler, dask_listen_port
            )
            if result.splits == 0:
                _warn_nothing_learned(None)  # the data stayed on the workers
        else:
            from trainer.engines.user_embeddings import USER_FEATURE_KEYS, TreeUserOptions
            from trainer.lambdamart.params import LambdaMARTParams

            user_values = {k: file_values[k] for k in USER_FEATURE_KEYS if k in file_values}
            tree_values = {k: v for k, v in file_values.items() if k not in user_values}
            user_flags = {k: flags.pop(k) for k in USER_FEATURE_KEYS}
            # The DNN flags configure the network that learns a tree model's user table.
            network = {k: flags.pop(k) for k in EMBEDDING_NETWORK_KEYS if flags[k] is not None}
            params = _params(LambdaMARTParams, tree_values, flags, source=source, label=label)
            _check_early_stopping(valid_file, early_stopping, file_values, source)
            users = build_params(TreeUserOptions, user_values, user_flags, source=source)
            if network and (not users.enabled or users.user_embeddings_from is not None):
                fail(
                    f"--{next(iter(network)).replace('_', '-')} does not apply to {label} "
                    "(with --user-profiles and --cluster-config it configures the network "
                    "that learns the user table)"
                )
            if chosen == "lightgbm-dask" and not dask_scheduler:
                fail("--engine lightgbm-dask needs --dask-scheduler ADDRESS")
            train, valid = _load(train_file, valid_file, spec, sourced, id_column, read)
            _warn_never_present(train)
            table = None
            if users.enabled:
                train, valid, table = _tree_user_features(train, valid, users, params, network)
            objective = None
            valid_metric = "ndcg"
            if unbiased or propensities is not None:
                from trainer.lambdamart.debias_choice import unbiased_from_flags

                objective = unbiased_from_flags(
                    chosen, train, params, unbiased, propensities, discount, max_weight, debias
                )
                _check_click_validation(valid, propensities, params.early_stopping_rounds)
                clicks_valid = valid
                valid = _unbiased_valid(valid, propensities)
                valid_metric = "ndcg" if valid is clicks_valid else "dcg"
            result = _train_trees(
                chosen, train, valid, params, out, name, objective, valid_metric, table
            )
            if result.splits == 0:
                _warn_nothing_learned(_why_nothing_learned(train, params))
        if sourced:
            from trainer.features.sources import attach_sources

            path = attach_sources(result.model_dir, final_out, sourced[0].plan)
            result = replace(result, model_dir=path)
    _print_summary(result, as_json, sourced[0].coverage if sourced else [])


@contextmanager
def _out_of_memory_as_error() -> Iterator[None]:
    """A MemoryError anywhere in training (numpy refusing an allocation, a buffer the data
    outgrew) as one `error:` line, and under --json one error object, not a traceback: the
    CommandError it becomes is one clear_errors reports."""
    try:
        yield
    except MemoryError as exc:
        detail = f" ({exc})" if str(exc) else ""
        raise CommandError(
            f"out of memory while training{detail}: lower --num-leaves or --max-bin, train "
            "on less data, or use a machine with more memory"
        ) from None


def _check_early_stopping(
    valid_file: Path | None, flag: int | None, file_values: dict[str, Any], source: str
) -> None:
    """Early stopping watches --valid: without it, --early-stopping would be silently ignored.
    The flag is refused; a params file's value only warned about (one file may serve runs
    with and without validation data)."""
    if valid_file is not None:
        return
    if flag is not None:
        fail(
            "--early-stopping needs --valid FILE: early stopping watches the validation data's "
            "metric; give --valid, or leave --early-stopping out (--num-trees then sets the "
            "trees kept)"
        )
    if file_values.get("early_stopping_rounds") is not None:
        echo_err(
            f"warning: {source}: early_stopping_rounds is ignored without --valid (early "
            "stopping watches the validation data's metric)"
        )


def _check_click_flags(
    unbiased: bool, debias: str, discount: str, max_weight: float | None
) -> None:
    """Without --unbiased no debiasing flag takes effect: refuse one given with a value other
    than its default (as --propensities is refused), rather than train on raw clicks as if it
    had been applied."""
    if unbiased:
        return
    given = []
    if debias != "click-model":
        given.append(f"--debias {debias}")
    if discount != "log2":
        given.append(f"--discount {discount}")
    if max_weight is not None:
        given.append(f"--max-weight {max_weight:g}")
    if given:
        fail(f"{given[0]} is used with --unbiased")


# Flags whose name is not the parameter's with dashes (build_params derives the flag it names in
# an error from the parameter).
RENAMED_FLAGS = {"--early-stopping-rounds": "--early-stopping"}


def _params(model: type[M], file_values: dict[str, Any], flags: dict[str, Any], **kw: Any) -> M:
    """build_params, its errors naming the flag as the user typed it."""
    try:
        return build_params(model, file_values, flags, **kw)
    except ConfigError as exc:
        message = str(exc)
        for param_flag, flag in RENAMED_FLAGS.items():
            if message.startswith(param_flag):
                raise ConfigError(flag + message[len(param_flag) :]) from None
        raise


def _staging(out: Path) -> Path:
    from trainer.features.sources import staging_dir

    return staging_dir(out)


def _location(path: Path) -> str:
    """A --train / --valid value as the user typed it: Path() folds an fsspec URL's
    `s3://bucket` into `s3:/bucket`, which the workers could not open."""
    return re.sub(r"^([A-Za-z][A-Za-z0-9+.-]+):/(?!/)", r"\1://", str(path))


def _train_on_cluster(
    train_file: Path,
    valid_file: Path | None,
    params: LambdaMARTParams,
    out: Path,
    name: str,
    dask_scheduler: str | None,
    listen_port: int | None,
) -> TrainingResult:
    """The workers read the Parquet data and train; this process never holds it."""
    if not dask_scheduler:
        fail("--engine lightgbm-dask needs --dask-scheduler ADDRESS")
    from trainer.engines.dask_model import train_cluster_model
    from trainer.progress import TrainingProgress

    metric = f"ndcg@{params.eval_at}"
    with TrainingProgress(params.num_trees, metric=metric, live=False) as progress:
        progress.message(
            f"training on the Dask cluster at {dask_scheduler}; its rounds' validation {metric} "
            "is listed when it ends"
        )
        return train_cluster_model(
            _location(train_file),
            None if valid_file is None else _location(valid_file),
            params,
            out,
            scheduler=dask_scheduler,
            name=name,
            on_iteration=lambda log: progress.update(log.iteration, None, log.valid_ndcg),
            listen_port=listen_port,
        )


def _load(
    train_file: Path,
    valid_file: Path | None,
    spec: Any = None,
    sourced: list[Any] | None = None,
    id_column: str | None = None,
    read: frozenset[str] = frozenset(),
) -> tuple[RankingDataset, RankingDataset | None]:
    """The data, with query columns checked and the item table joined when a spec says so
    (the joined data is kept in `sourced` for the manifest). Without one, a Parquet file's
    document id column (`id_column`, else doc_id) is still read as ids, not a feature; `read`:
    the reserved columns the run reads for what they are (the others are named in a note)."""
    if spec is None:
        from trainer.data.loader import present_id_column

        ids = present_id_column(train_file, id_column)
        _note_set_apart(train_file, ids, read)
        return _with_features(*_load_plain(train_file, valid_file, ids), train_file)
    from trainer.features.sources import load_sourced

    data = load_sourced(spec, train_file, valid_file)
    if sourced is not None:
        sourced.append(data)
    for coverage in data.coverage:
        if coverage.missing:
            # Training goes on (serving gives an unknown item NaN too), but a table that
            # lacks half the documents is more likely the wrong table or an old one.
            echo_err(f"warning: {coverage.warning()}")
    return _with_features(data.train, data.valid, train_file)


def _with_features(
    train: RankingDataset, valid: RankingDataset | None, train_file: Path
) -> tuple[RankingDataset, RankingDataset | None]:
    """The data as given, once it has a feature to learn from (a LETOR file with no
    `id:value` on any line reads as zero columns)."""
    if train.num_features == 0:
        raise CommandError(f"{train_file}: no features: no line or column gives a feature value")
    return train, valid


def _columns_read(
    flags: dict[str, Any], file_values: dict[str, Any], clicks: bool
) -> frozenset[str]:
    """The reserved columns a run reads for what they are: positions and clicks when it
    debiases clicks, the user id when it learns user features (what enables them, as
    TreeUserOptions.enabled says)."""
    given = {**file_values, **{k: v for k, v in flags.items() if v is not None}}
    enabling = ("user_profiles", "cluster_config", "user_embeddings_from")
    users = any(given.get(k) is not None for k in enabling)
    return frozenset({*(("position", "click") if clicks else ()), *(("user_id",) if users else ())})


def _note_set_apart(train_file: Path, id_column: str | None, read: frozenset[str]) -> None:
    """Say which columns of a Parquet file are read as something else than features and not
    used by this run: a column named `position` was dropped from the features without a word
    (a trial)."""
    from trainer.data.loader import PARQUET_SUFFIXES, parquet_columns

    if train_file.suffix.lower() not in PARQUET_SUFFIXES:
        return
    roles = {
        "position": "where each row was shown, for position-bias correction",
        "click": "logged clicks",
        "user_id": "the query's user, for user clusters",
    }
    if id_column is not None:
        roles = {id_column: "the document id", **roles}
    columns = set(parquet_columns(train_file)) - read
    found = [f"{name!r} ({role})" for name, role in roles.items() if name in columns]
    if found:
        echo_err(f"note: {train_file}: not features: {', '.join(found)}; rename one to train on it")


def _load_plain(
    train_file: Path, valid_file: Path | None, id_column: str | None = None
) -> tuple[RankingDataset, RankingDataset | None]:
    """Training data and validation data lined up with its columns."""
    from trainer.data.loader import PARQUET_SUFFIXES, load_dataset

    train = load_dataset(train_file, id_column=id_column)
    if valid_file is None:
        return train, None
    if train.feature_names is None and valid_file.suffix.lower() not in PARQUET_SUFFIXES:
        # Both LETOR text: a feature always 0 in training never appears in its sparse lines,
        # so the validation file may name a larger id (a trial's was refused); both take the
        # wider width.
        valid = load_dataset(valid_file)
        width = max(train.num_features, valid.num_features)
        if train.num_features < width:
            train = load_dataset(train_file, num_features=width)
        if valid.num_features < width:
            valid = load_dataset(valid_file, num_features=width)
        return train, valid
    valid = load_dataset(
        valid_file, num_features=train.num_features, feature_names=train.feature_names
    )
    return train, valid


# Fewer validation clicks than this make early stopping on their IPW DCG a lottery: on 20,000
# logged rows (~260 validation clicks) it kept 2 to 64 trees, on 200,000 (~2,600) 40-105
# (a held-out trial's own click generator, several seeds).
FEW_VALID_CLICKS = 1000


def _check_click_validation(
    valid: RankingDataset | None, propensities: Path | None, early_stopping: int | None
) -> None:
    """Refuse early stopping on raw clicks; warn when too few clicks validate."""
    if valid is None or valid.positions is None or early_stopping is None:
        return
    if propensities is None:
        fail(
            "--early-stopping on click data needs --propensities FILE (from ltr dataset "
            "--from-logs): without it the validation clicks are scored as they were served "
            "(NDCG of raw clicks), which rewards the logged ranking and stops after a few "
            "trees; or leave --early-stopping out"
        )
    clicks = int((valid.labels > 0).sum())
    if clicks < FEW_VALID_CLICKS:
        echo_err(
            f"warning: the validation data holds {clicks} clicks: early stopping on so few "
            "is noisy (it may keep far too few or too many trees); more logs, a larger "
            "--valid-fraction in ltr dataset, or --num-trees without --early-stopping"
        )


def _unbiased_valid(
    valid: RankingDataset | None, propensities: Path | None
) -> RankingDataset | None:
    """Click validation data scored without position bias (IPW labels), when it has served
    positions and there is an examination curve: early stopping then follows the debiased
    metric, not agreement with the ranking that was served."""
    if valid is None or valid.positions is None or propensities is None:
        return valid
    from trainer.clicks.ipw_eval import ipw_relabel
    from trainer.clicks.propensity import load_propensities

    return ipw_relabel(valid, load_propensities(propensities)[0])


def _train_trees(
    engine: str,
    train: RankingDataset,
    valid: RankingDataset | None,
    params: LambdaMARTParams,
    out: Path,
    name: str,
    objective: LambdaObjective | None = None,
    valid_metric: str = "ndcg",
    table: TreeUserTable | None = None,
) -> TrainingResult:
    from trainer.engines.tree_model import train_tree_model
    from trainer.progress import TrainingProgress

    # Debiased training still reports the NDCG of the clicks as served (its lambdas' own
    # figure): named so, it is not read as the quality of the debiased model.
    metric = f"{'raw-click ' if objective is not None else ''}ndcg@{params.eval_at}"
    valid_name = f"IPW dcg@{params.eval_at}" if valid_metric == "dcg" else None
    slow = (
        "still on the first tree: a first run compiles the native kernels (numba), up to a "
        "minute; they are cached for later runs"
        if engine == "native"
        else None
    )
    with TrainingProgress(
        params.num_trees, metric=metric, valid_metric=valid_name, slow_start_note=slow
    ) as progress:
        return train_tree_model(
            engine,
            train,
            valid,
            params,
            out,
            name=name,
            progress=progress,
            objective=objective,
            valid_metric=valid_metric,
            user_clusters=None if table is None else table.clusters,
            user_files=None if table is None else table.files,
            user_training=None if table is None else table.training,
        )


def _tree_user_features(
    train: RankingDataset,
    valid: RankingDataset | None,
    users: TreeUserOptions,
    params: LambdaMARTParams,
    network: dict[str, Any],
) -> tuple[RankingDataset, RankingDataset | None, TreeUserTable]:
    """The data with each list's user vector appended, and the user table (learned or reused)
    that goes into the version."""
    from trainer.dnn.feature_checks import check_finite_features
    from trainer.engines.user_embeddings import TreeUserTable, user_table, with_user_vectors

    # A LambdaDNN learns the user table from these features.
    for data in (train, valid):
        if data is not None:
            check_finite_features(data, "the network learning the user table")
    uc, files, record = user_table(
        train, valid, users, seed=params.seed, threads=params.threads, dnn_params=network
    )
    profiles = users.user_profiles
    assert profiles is not None  # users.enabled
    return (
        with_user_vectors(train, uc, files, profiles),
        None if valid is None else with_user_vectors(valid, uc, files, profiles),
        TreeUserTable(uc, files, {**record, "user_profiles": str(profiles)}),
    )


def _warn_never_present(train: RankingDataset) -> None:
    from trainer.dnn.nothing_learned import never_present_warning

    warning = never_present_warning(train, "trees")
    if warning is not None:
        echo_err(f"warning: {warning}")


def _warn_nothing_learned(reason: str | None) -> None:
    """A version that scores every document alike is still written (rc 0: the data, not the
    command, is at fault), but nobody should mistake it for a ranker."""
    why = f": {reason}" if reason else ""
    echo_err(f"warning: the model learned nothing (no split, every document scores the same){why}")


def _why_nothing_learned(train: RankingDataset, params: LambdaMARTParams) -> str | None:
    """The first reason found in the data or params why no tree could split, else None."""
    import numpy as np

    labels, sizes = train.labels, train.group_sizes
    if labels.size and np.all(labels == labels[0]):
        return f"every label is {labels[0]:g}, so there is no order to learn"
    if np.all(sizes <= 1):
        return "every query has a single document, so there are no pairs to rank"
    if train.num_docs < 2 * params.min_data_in_leaf:
        return (
            f"--min-data-in-leaf {params.min_data_in_leaf} leaves no split of the "
            f"{train.num_docs} training documents"
        )
    starts = train.group_offsets[:-1]
    # Pairs exist only within a query: labels equal inside every query leave none.
    first = np.repeat(labels[starts], sizes)
    if np.all(labels == first):
        return "no query has documents with different labels, so there are no pairs to rank"
    return None


def _int_list(text: str, flag: str) -> list[int]:
    """Layer widths: each part an integer >= 1 (a width of 0 gives a constant model, an empty
    part is more likely a typo than a wish to drop a layer)."""
    if any(not part.strip() for part in text.split(",")):
        fail(
            f"{flag}: a width is empty in {text!r} (expected comma-separated integers like 256,128)"
        )
    try:
        widths = [int(part) for part in text.split(",")]
    except ValueError:
        fail(f"{flag}: expected comma-separated integers like 256,128, got {text!r}")
    if not all(width >= 1 for width in widths):
        fail(f"{flag}: every width must be an integer of at least 1, got {text!r}")
    return widths


def _train_dnn(
    train: RankingDataset,
    valid: RankingDataset | None,
    options: DNNOptions,
    out: Path,
    name: str,
) -> TrainingResult:
    from trainer.progress import TrainingProgress

    try:
        from trainer.dnn.user_clusters import ClusterConfigError
        from trainer.dnn.user_profiles import ProfileTableError
        from trainer.engines.dnn_model import train_dnn_model
    except ImportError as exc:
        fail(
            "--engine dnn needs the dnn extra (from a clone: make install EXTRAS=serve,train,dnn; "
            f"else pip install 'ltr-rerank[dnn]'): {exc}"
        )
    from trainer.dnn.feature_checks import check_finite_features

    for data in (train, valid):
        if data is not None:
            check_finite_features(data)
    metric = f"ndcg@{options.eval_at}"
    with TrainingProgress(options.epochs, metric=metric, unit="epoch") as progress:
        try:
            result = train_dnn_model(train, valid, options, out, progress, name=name)
        except (ClusterConfigError, ProfileTableError) as exc:
            raise CommandError(str(exc)) from None
    from trainer.dnn.nothing_learned import why_nothing_learned

    reason = why_nothing_learned(train, options.loss)
    if reason is not None:
        echo_err(f"warning: the model learned nothing: {reason}")
    return result


def _print_summary(result: TrainingResult, as_json: bool, coverage: list[ItemCoverage]) -> None:
    if as_json:
        extra = {"item_coverage": [c.as_json() for c in coverage]} if coverage else {}
        typer.echo(orjson.dumps({**result.as_json(), **extra}).decode())
        return
    typer.echo(str(result.model_dir))
    metrics = " ".join(
        f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in result.metrics.items()
    )
    detail = ""
    if result.trees is not None:
        detail = f": {result.trees} trees (best iteration {result.best_iteration})"
    typer.echo(f"{result.name} {result.version} {result.engine} {result.kind}{detail}")
    if metrics:
        typer.echo(f"{result.evaluated_on or 'valid'}: {metrics}")


def register(app: typer.Typer) -> None:
    app.command("train")(train_command)
