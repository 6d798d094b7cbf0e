"""`ltr serve`: run the reranking service (uvicorn, `app.main:create_app`) on a registry.

Options become `LTR_*` variables before uvicorn starts, so every worker process builds the same
settings. `--demo` first trains a small LambdaMART model on the bundled LightGBM lambdarank
example and publishes it as model `demo` when the registry has no deployed model yet.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from app.artifacts.store import list_models, read_current, set_current
from trainer.commands.errors import echo_err, fail
from trainer.progress import TrainingProgress

Opt = typer.Option
DEMO_NAME = "demo"
DEMO_DATA = Path(__file__).resolve().parents[1] / "demo_data"
DEMO_TREES = 100
DEMO_EVAL_AT = 10  # LambdaMARTParams' default eval_at: the NDCG@k the progress lines show
# The settings the flags set, by the variable each stands for.
FLAGS = {
    "LTR_HOST": "--host",
    "LTR_PORT": "--port",
    "LTR_WORKERS": "--workers",
    "LTR_REGISTRY": "--registry",
}
LOG_LEVEL_NAMES = ("critical", "error", "warning", "info", "debug", "trace")  # uvicorn's


def serve_command(
    host: Annotated[
        str | None, Opt(help="Interface to bind [default: LTR_HOST or 127.0.0.1]")
    ] = None,
    port: Annotated[int | None, Opt(help="Port [default: LTR_PORT or 8000]")] = None,
    workers: Annotated[int | None, Opt(help="Worker processes [default: LTR_WORKERS or 1]")] = None,
    registry: Annotated[
        Path | None, Opt(help="Model registry directory [default: LTR_REGISTRY or ./registry]")
    ] = None,
    demo: Annotated[
        bool, Opt("--demo", help="Train and publish a demo model first if none is deployed.")
    ] = False,
    log_level: Annotated[
        str, Opt(help=f"Log level of uvicorn and the service: {', '.join(LOG_LEVEL_NAMES)}")
    ] = "info",
) -> None:
    """Serve POST /rerank with the CURRENT version of every model in the registry."""
    if log_level.lower() not in LOG_LEVEL_NAMES:
        fail(f"--log-level {log_level!r}: expected one of {', '.join(LOG_LEVEL_NAMES)}")
    overrides = {"LTR_HOST": host, "LTR_PORT": port, "LTR_WORKERS": workers}
    # Absolute, not resolved: a registry published by swapping a symlink (a git-sync style
    # sidecar) must be followed through the link, not pinned to where it pointed at start.
    overrides["LTR_REGISTRY"] = None if registry is None else str(registry.absolute())
    for key, value in overrides.items():
        if value is not None:
            os.environ[key] = str(value)
    if demo:
        # Two demo models: requests that name none go to `demo`, as the README shows.
        os.environ.setdefault("LTR_DEFAULT_MODEL", DEMO_NAME)
    from app.settings import Settings, settings_problem

    try:
        settings = Settings()
    except ValidationError as exc:
        problem = settings_problem(exc)
        for variable, flag in FLAGS.items():
            if overrides.get(variable) is not None and problem.startswith(f"{variable}:"):
                problem = flag + problem.removeprefix(variable)  # what was given, not the env
        fail(problem)
    if settings.registry.exists() and not settings.registry.is_dir():
        # It served with a warning and no model.
        fail(f"{settings.registry}: the registry is a directory, and this is a file")
    # uvicorn found these out after loading every model, and exited 3 (the nightly's "refused").
    unknown_host = _host_problem(settings.host)
    if unknown_host is not None:
        fail(f"{_flag_or_variable('LTR_HOST', overrides)} {settings.host}: {unknown_host}")
    taken = _port_taken(settings.host, settings.port)
    if taken is not None:
        fail(f"{_flag_or_variable('LTR_PORT', overrides)} {settings.port}: {taken}")
    import uvicorn

    from app.api.http_protocol import uvicorn_options
    from app.kernel_warmup import reap, stop, warmup_process
    from app.log_config import log_config
    from app.metrics import shared_across_workers
    from app.numba_cache_seed import seed_numba_cache
    from app.supervisor import supervised

    seed_numba_cache(settings.numba_cache_seed)
    unknown = _unknown_settings(os.environ)
    if unknown:
        echo_err(
            f"warning: {', '.join(unknown)}: no such setting, ignored (a typo? the settings are "
            "in docs/OPERATIONS.md, docs/API.md and app/settings.py)"
        )
    if (
        settings.workers > 1
        and settings.impressions_enabled
        and settings.impressions_jsonl is not None
        and settings.redis_url is None
    ):
        echo_err(
            f"warning: {settings.workers} workers logging impressions to a JSONL file: each "
            "knows only the requests it served, so /feedback may answer 404 for another's; "
            "set LTR_REDIS_URL to share them"
        )

    # uvicorn ends a SIGTERM by raising it again once the server has stopped: as an exception,
    # not the default action, so the demo's processes below are stopped too (one worker
    # stopped by SIGHUP raises SIGTERM: app.supervisor).
    signal.signal(signal.SIGTERM, _exit_on_signal)
    with ExitStack() as stack:
        if settings.body_scan:
            # The service's kernels compile (or load from numba's cache, ~2 s of CPU) in a
            # process of their own, not in each worker: a worker that compiled them kept
            # LLVM's memory for good (1,000 MB against 400 measured, per worker), and on a
            # first run they compile on the other core while the demo trains (app.kernel_warmup).
            stack.enter_context(warmup_process())
        if demo and not _has_deployed_model(settings.registry):
            demo_items = _publish_demo(settings.registry)
            reap(demo_items)
            stack.callback(stop, demo_items)
        stack.enter_context(shared_across_workers(settings.workers))
        stack.enter_context(supervised())
        uvicorn.run(
            "app.main:create_app",
            factory=True,
            host=settings.host,
            port=settings.port,
            workers=settings.workers,
            log_level=log_level.lower(),
            log_config=log_config(log_level),
            **uvicorn_options(settings),
        )


def _flag_or_variable(variable: str, overrides: Mapping[str, object]) -> str:
    return FLAGS[variable] if overrides.get(variable) is not None else variable


def _host_problem(host: str) -> str | None:
    """Why `host` cannot be listened on (no such name), else None."""
    import socket

    try:
        socket.getaddrinfo(host, None, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        return f"not an address or a name this machine resolves ({exc.strerror})"
    return None


def _port_taken(host: str, port: int) -> str | None:
    """Why `host`:`port` cannot be listened on now (another server has it), else None."""
    import errno
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError:
        return None  # _host_problem says what is wrong with the host
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        if family == socket.AF_INET6:
            # IPv6 only, as asyncio's server binds `::`: a dual-stack probe clashed with a
            # server on 127.0.0.1 that the service would not have clashed with.
            probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return f"address already in use on {host} (another server listens there)"
            return None
    return None


def _exit_on_signal(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _has_deployed_model(registry: Path) -> bool:
    return any(read_current(registry, name) for name in list_models(registry))


def _publish_demo(registry: Path) -> subprocess.Popen[bytes]:
    """Train on rank.train (early stopping on rank.test) and make it model `demo`'s CURRENT,
    saying what it does: a first run spends most of its time compiling the numba kernels.
    Returns the process that trains and publishes `demo-items` meanwhile."""
    started = time.monotonic()
    echo_err(f"no model in {registry}: training the demo model on {DEMO_DATA}/rank.train")
    echo_err(
        "  first run: compiling the native LambdaMART kernels (numba), one to a few minutes; "
        "they are cached, later runs start in seconds"
    )
    with _heartbeat("compiling", started) as compiled:
        from app.artifacts.manifest import new_version_id
        from trainer.data.loader import load_dataset
        from trainer.engines.tree_model import train_tree_model
        from trainer.lambdamart.kernel_warmup import (
            head,
            start_objective_warmup,
            warm_tree_learner,
        )
        from trainer.lambdamart.params import LambdaMARTParams

        params = LambdaMARTParams.model_validate(
            {"num_trees": DEMO_TREES, "num_leaves": 31, "early_stopping_rounds": 20}
        )
        # With an empty numba cache, a second process compiles the gradient kernels while this
        # one compiles the tree learner's (trainer.lambdamart.kernel_warmup).
        second = start_objective_warmup(DEMO_DATA / "rank.train", params)
        train = load_dataset(DEMO_DATA / "rank.train")
        valid = load_dataset(
            DEMO_DATA / "rank.test", num_features=train.num_features, feature_names=train.names()
        )
        warm_tree_learner(head(train), params)
        second.wait()
        version = new_version_id()
        with _DemoProgress(DEMO_TREES, compiled) as progress:
            summary = train_tree_model(
                "native",
                train,
                valid,
                params,
                Path(registry) / DEMO_NAME / version,
                name=DEMO_NAME,
                progress=progress,
            )
    set_current(registry, DEMO_NAME, version)
    ndcg = summary.metrics.get(f"ndcg@{params.eval_at}")
    echo_err(
        f"published {DEMO_NAME}/{version} ({summary.trees} trees, test NDCG@{params.eval_at} "
        f"{ndcg:.4f}) in {time.monotonic() - started:.0f} s; starting the server"
    )
    # The id-only example's model trains while the server starts, in a second process (niced):
    # `demo` answers at once, and the registry's poll loads `demo-items` when it is published
    # (version directories and CURRENT are written atomically, so a server stopped meanwhile
    # loses nothing). In a thread here it held the server's GIL for half a minute.
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trainer.features.demo",
            str(registry),
            str(DEMO_DATA / "rank.train"),
            str(DEMO_DATA / "rank.test"),
            params.model_dump_json(),
        ],
        stdout=subprocess.DEVNULL,
    )


class _DemoProgress(TrainingProgress):
    """Plain progress lines to stderr; the first one also ends the compile heartbeat."""

    def __init__(self, total: int, on_first: Callable[[], None]) -> None:
        super().__init__(total, metric=f"ndcg@{DEMO_EVAL_AT}", mode="lines", every=10)
        self._on_first: Callable[[], None] | None = on_first

    def update(
        self, iteration: int, train_metric: float | None = None, valid_metric: float | None = None
    ) -> None:
        if self._on_first is not None:
            self._on_first()
            self._on_first = None
            # Elapsed time and eta from the end of the compile, not from its start.
            self._start = self._last_line_at = self._clock() - 1e-3
        super().update(iteration, train_metric, valid_metric)


@contextmanager
def _heartbeat(what: str, since: float, every: float = 10.0) -> Iterator[Callable[[], None]]:
    """A line every `every` seconds ("compiling: 20 s") until the yielded callable is called:
    a long step that prints nothing of its own still shows it is alive."""
    done = threading.Event()

    def beat() -> None:
        while not done.wait(every):
            echo_err(f"  {what}: {time.monotonic() - since:.0f} s")

    thread = threading.Thread(target=beat, name="demo-heartbeat", daemon=True)
    thread.start()
    try:
        yield done.set
    finally:
        done.set()
        thread.join()


def register(app: typer.Typer) -> None:
    app.command("serve")(serve_command)


def _unknown_settings(environ: Mapping[str, str]) -> list[str]:
    """`LTR_*` variables no setting reads (a misspelt one was ignored without a word); the
    warm-up's own variables, which ltr serve sets for its workers, are not settings, and the
    trainer's commands read theirs from an environment they may share with the service."""
    from app.kernel_warmup import FD_ENV, LOCK_ENV
    from app.settings import Settings
    from trainer.features.set_retention import OLD_TTL_ENV

    known = {f"LTR_{name.upper()}" for name in Settings.model_fields} | {
        FD_ENV,
        LOCK_ENV,
        OLD_TTL_ENV,
    }
    return sorted(k for k in environ if k.startswith("LTR_") and k not in known)
