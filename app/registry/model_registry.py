"""The model serving under each name: load, verify, warm up, swap atomically, reload on demand.

Which version serves is decided by `<registry>/<name>/CURRENT` and nothing else. A trigger (the
filesystem poll, a Redis `events` announcement, `POST /admin/reload`) only makes the registry
re-read CURRENT, so a late or replayed announcement of an older version changes nothing.
Reloads are serialised, and a finished load is swapped in only if CURRENT still names it;
otherwise the newer CURRENT is loaded instead. Hence within a process the served versions
follow the sequence of CURRENT values: they never go backwards unless an operator points
CURRENT back at an older version (a rollback), which the registry then follows.

A version that fails to read, verify, load or warm up is refused: the old one keeps serving,
`ltr_model_reload_failures_total` rises once, and the poll does not retry that same version
while its files stay as they were (an explicit trigger does; a repaired or re-published copy
is retried by the poll). When nothing serves a model yet (a start-up) and its CURRENT is
refused, the newest older version on disk that loads is served instead (as TF Serving and
Triton keep the old version) and the refusal is reported in `errors()` for as long as CURRENT
names it. A served model whose registry, directory or CURRENT goes missing keeps serving its
last version and is reported like an unreadable registry (a failure counted per poll, an error
in `errors()`, one log line when it starts and one when it ends). Public error texts name
files relative to the registry; the log has the absolute paths.
Swaps replace one immutable dict by another, so a request that took a `LoadedModel` finishes on
it even if a newer version is swapped in meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import anyio.to_thread
import numpy as np

from app import metrics
from app.artifacts.manifest import NAME_PATTERN, Manifest
from app.artifacts.store import (
    CURRENT_FILE,
    MANIFEST_FILE,
    Artifact,
    list_models,
    list_versions,
    load_version,
    read_current,
    read_history,
    recorded_history,
)
from app.errors import LtrError
from app.features.item_snapshot import ItemSnapshot
from app.registry.experiments import ActiveExperiment, ExperimentSlots
from app.registry.version_signature import VersionSignature, files_signature, version_signature
from app.scoring.protocol import Scorer
from app.settings import Settings

log = logging.getLogger(__name__)
NOTHING_LOADED = "no model loaded yet"

_NAME = re.compile(NAME_PATTERN)
WARMUP_ROWS = 8
MAX_WARMUP_ROWS = 4096

ScorerLoader = Callable[[Artifact], Scorer]
ModelHook = Callable[[Manifest, dict[str, bytes]], None]
ServeHook = Callable[["LoadedModel"], None]


class ModelNotAvailable(LtrError, LookupError):
    """No model can answer: none loaded yet, or the named one failed to load (HTTP 503)."""


class UnknownModel(LtrError, LookupError):
    """The request names a model the registry does not have (HTTP 404)."""


class AmbiguousModel(LtrError, LookupError):
    """Several models are loaded, no default is configured and the request names none (422)."""


@dataclass(frozen=True)
class LoadedModel:
    manifest: Manifest
    scorer: Scorer
    path: Path
    loaded_at: float  # unix time of the swap-in
    # The item feature snapshot the version carries (memory-mapped), swapped with the model.
    item_snapshot: ItemSnapshot | None = None
    # Its verified files (manifest, model, snapshot) as they were when read: a file changed on
    # disk is loaded again, so that every worker serves what a restarted one would.
    files: VersionSignature = ()

    @property
    def name(self) -> str:
        return self.manifest.name

    @property
    def version(self) -> str:
        return self.manifest.version


DOES_NOT_EXIST = "does not exist"


@dataclass(frozen=True)
class Refusal:
    """A refused version, its files as they were when it was refused, and why (public)."""

    version: str
    signature: VersionSignature
    reason: str = ""
    older: str | None = None  # the older version served instead (a start-up's fallback)
    kept: bool = False  # the served version's files failed: its loaded copy serves on

    @property
    def error(self) -> str:
        what = f"version {self.version}" if self.version else "CURRENT"
        text = f"{what} refused: {self.reason}"
        if self.kept:
            return (
                f"{text}; its files changed on disk after it loaded, and the loaded copy still "
                "serves (a restarted worker could not load it: publish the version again)"
            )
        return text if self.older is None else f"{text}; serving the older version {self.older}"


@dataclass
class ReloadReport:
    loaded: list[tuple[str, str]] = field(default_factory=list)
    unchanged: list[tuple[str, str]] = field(default_factory=list)
    failed: list[tuple[str, str, str]] = field(default_factory=list)  # name, version, error


def compiled_cache_dir(settings: Settings) -> Path | None:
    """`LTR_COMPILED_CACHE_DIR`; unset with several workers, a directory in the one they share
    (removed when the service stops): else every worker compiled each new version itself, and
    after `POST /admin/reload` the second went on serving the old version for seconds."""
    if settings.compiled_cache_dir is not None:
        return settings.compiled_cache_dir
    shared = metrics.multiprocess_dir()
    return Path(shared) / "compiled" if shared else None


def default_scorer_loader(settings: Settings) -> ScorerLoader:
    from app.scoring.loader import load_scorer

    cache_dir = compiled_cache_dir(settings)

    def load(artifact: Artifact) -> Scorer:
        return load_scorer(
            artifact,
            threads=settings.scoring_threads,
            onnx_intra_op_threads=settings.onnx_intra_op_threads,
            parallel_min_rows=settings.parallel_min_rows,
            spare_core_min_rows=settings.spare_core_min_rows,
            cache_dir=cache_dir,
        )

    return load


class ModelRegistry:
    def __init__(
        self,
        settings: Settings,
        *,
        scorer_loader: ScorerLoader | None = None,
        on_load: ModelHook | None = None,
        on_serve: ServeHook | None = None,
    ) -> None:
        self.settings = settings
        self.root = Path(settings.registry)
        self._scorer_loader = scorer_loader or default_scorer_loader(settings)
        self._on_load = on_load
        self._on_serve = on_serve  # called on the event loop once a version serves: be quick
        self._models: Mapping[str, LoadedModel] = {}
        # name -> the version the poll must not retry while its files are unchanged; its error
        # stays in errors() only while CURRENT names that version.
        self._refused: dict[str, Refusal] = {}
        # name -> why its served version cannot follow the registry now (unreadable, missing)
        self._problems: dict[str, str] = {}
        self._lock = asyncio.Lock()
        self._scanned = False  # a reload of every model has finished once
        self._why_none = NOTHING_LOADED  # why nothing serves, as the last full scan found
        self._logged_why: str | None = None  # ... and as last logged
        # Why the registry (key None) or a model's directory could not be read or is missing,
        # as last logged, and the line that says it ended: a poll that fails every few seconds
        # logs the change, not every failure.
        self._unreadable: dict[str | None, tuple[str, str]] = {}
        self.experiments = ExperimentSlots(self.root, self._load)

    # Reading: cheap, lock-free, called per request.

    @property
    def ready(self) -> bool:
        """The first full scan is done, a model is loaded and warmed, and the configured
        default (if any) is among them."""
        models = self._models
        default = self.settings.default_model
        return self._scanned and bool(models) and (default is None or default in models)

    def models(self) -> Mapping[str, LoadedModel]:
        return self._models

    def errors(self) -> dict[str, str]:
        found = {name: refusal.error for name, refusal in self._refused.items()}
        for name, problem in self._problems.items():
            found[name] = f"{problem}; {found[name]}" if name in found else problem
        return found

    def why_none(self) -> str:
        """Why no model serves, for /readyz and /rerank, as the last full scan found it (not
        read per request: a registry on a network filesystem could hold the event loop up);
        without the registry's path (public bodies carry none; the log has it)."""
        return self._why_none

    def _find_why_none(self) -> str:
        reason = NOTHING_LOADED
        if not self.root.is_dir():
            return f"{reason}: the registry directory does not exist"
        names = [n for n in list_models(self.root) if _NAME.fullmatch(n)]
        if not names:
            return f"{reason}: the registry holds no model"
        if all(read_current(self.root, n) is None for n in names):
            return f"{reason}: no model in the registry has a CURRENT version (ltr publish)"
        return reason

    def get(self, name: str | None = None) -> LoadedModel:
        models = self._models
        if name is None:
            name = self.settings.default_model
        if name is None:
            if not models:
                raise ModelNotAvailable(self.why_none())
            if not self._scanned:
                # Which model a request without one means is known once every model is: the
                # one loaded first answered it, then others loaded and it was a 422.
                raise ModelNotAvailable("the models are not all loaded yet")
            if len(models) == 1:
                return next(iter(models.values()))
            raise AmbiguousModel(
                f"several models are loaded ({', '.join(sorted(models))}); name one in `model`"
            )
        model = models.get(name)
        if model is not None:
            return model
        errors = self.errors()
        # Before the first scan of the registry ends, a model not loaded yet may be next: a
        # 404 "unknown model" for it during start-up read as permanent (a trial under compose).
        if name in errors or not models or not self._scanned:
            reason = errors.get(name, "not loaded yet")
            raise ModelNotAvailable(f"model {name!r} is not available: {reason}")
        raise UnknownModel(f"unknown model {name!r}; loaded: {', '.join(sorted(models))}")

    def experiment(self, name: str) -> ActiveExperiment | None:
        """The experiment serving beside model `name`, if any (one dict lookup)."""
        return self.experiments.get(name)

    # Reloading.

    async def reload(self, name: str | None = None, *, force: bool = False) -> ReloadReport:
        """Bring every model (or `name`) to its CURRENT version; `force` retries refused ones."""
        report = ReloadReport()
        async with self._lock:
            if name is None:
                try:
                    names = list_models(self.root)
                except OSError as exc:
                    self._trouble(None, f"cannot read the registry: {type(exc).__name__}: {exc}")
                    raise
                self._check_registry(names)
            else:
                names = [name]
            for model_name in names:
                if _NAME.fullmatch(model_name):
                    try:
                        problem = await self._reload_one(model_name, force, report)
                    except OSError as exc:  # its directory: the other models still reload
                        what = f"cannot read model {model_name}'s directory"
                        self._trouble(model_name, f"{what}: {type(exc).__name__}: {exc}")
                        continue
                    except Exception as exc:  # whatever it is, the other models still reload
                        log.exception("reloading model %s failed", model_name)
                        what = f"cannot reload model {model_name}"
                        self._trouble(model_name, f"{what}: {type(exc).__name__}: {exc}")
                        continue
                    if problem is None:
                        self._trouble_over(model_name)
                    else:
                        self._trouble(model_name, problem, ended=f"resolved: {problem}")
                    control = self._models.get(model_name)
                    await self.experiments.refresh(model_name, control, force)
            if name is None:
                self._scanned = True
                self._explain_none()
        return report

    def _check_registry(self, names: list[str]) -> None:
        """Report (not follow) a served model the registry no longer has: the registry directory
        moved, deleted or replaced by a file, or the model's own directory gone. A new replica
        would serve nothing there, so the served versions must not look healthy."""
        root = self.root.resolve()
        what = self._root_problem()
        if what is not None:
            if self._models:  # nothing served: _explain_none says it (once) for /readyz
                self._trouble(
                    None,
                    f"the registry {root} {what}",
                    public=self.registry_missing(),
                    ended=f"the registry {root} is back",
                )
            return
        self._trouble_over(None)
        for stale in set(self._refused) - set(names):
            # Its directory is gone (renamed away, removed): nothing of it is left to refuse.
            del self._refused[stale]
        for gone in sorted(set(self._models) - set(names)):
            missing = f"{root / gone}/ is missing from the registry"
            self._trouble(gone, missing, ended=f"resolved: {missing}")

    def registry_missing(self) -> str | None:
        """Why the registry itself cannot be followed (None: its directory is there), without
        its path; for `POST /admin/reload`, whose caller reads its status."""
        what = self._root_problem()
        if what is None:
            return None
        return f"the registry {'directory' if what == DOES_NOT_EXIST else 'path'} {what}"

    def _root_problem(self) -> str | None:
        if self.root.is_dir():
            return None
        return "is not a directory" if self.root.exists() else DOES_NOT_EXIST

    def _trouble(
        self, key: str | None, full: str, *, public: str | None = None, ended: str | None = None
    ) -> None:
        """The registry (key None) or model `key` cannot be read or lacks what its served
        version needs: the served versions stay, each counts a reload failure at every poll
        (what alerts watch), the reason goes to /models' errors and, once per change, to the
        log (one line: it repeats every poll)."""
        where = "the registry" if key is None else f"model {key}"
        public = public or self._public(full)
        affected = list(self._models) if key is None else [key]
        for served in affected:
            metrics.RELOAD_FAILURES.labels(served).inc()
            self._problems[served] = public
        if self._unreadable.get(key, ("", ""))[0] != full:
            serving = ", ".join(
                f"{m.name}/{m.version}" for m in self._models.values() if m.name in affected
            )
            log.error("%s; still serving %s", full, serving or "nothing")
        self._unreadable[key] = (full, ended or f"{where} readable again")

    def _trouble_over(self, key: str | None) -> None:
        over = self._unreadable.pop(key, None)
        if over is None:
            return
        log.info("%s", over[1])
        for served in list(self._problems) if key is None else [key]:
            self._problems.pop(served, None)

    def _explain_none(self) -> None:
        """After a full scan that leaves nothing to serve: why, for why_none, and a warning
        with the registry's path (once per reason: the poll repeats the scan), where a
        mistyped LTR_REGISTRY served 503s with nothing in the log to say why; likewise a
        default model (LTR_DEFAULT_MODEL) the registry does not serve."""
        default = self.settings.default_model
        if self._models and default is not None and default not in self._models:
            loaded = ", ".join(sorted(self._models))
            why: str | None = (
                f"the default model {default!r} (LTR_DEFAULT_MODEL) is not served; loaded: {loaded}"
            )
            errors = self.errors()
            if default in errors:
                why = f"{why}; {default}: {errors[default]}"
        else:
            why = self._find_why_none() if not self._models else None
        self._why_none = why or NOTHING_LOADED
        if why is not None and why != self._logged_why:
            log.warning("%s (registry %s)", why, self.root.resolve())
        self._logged_why = why

    async def watch(self, poll_seconds: float) -> None:
        """Poll CURRENT files every `poll_seconds` until cancelled (the fallback trigger)."""
        while True:
            await asyncio.sleep(poll_seconds)
            try:
                await self.reload()
            except OSError:
                pass  # said once by _trouble; the next poll tries again
            except Exception:  # the poll must outlive any surprise
                log.exception("model poll failed")

    async def _reload_one(self, name: str, force: bool, report: ReloadReport) -> str | None:
        """Serve CURRENT's version; returns why a served model's CURRENT cannot be followed
        (missing, empty), else None."""
        version = read_current(self.root, name)
        if version is None:
            self._refused.pop(name, None)  # CURRENT no longer names the refused version
            if name in self._models:
                return self._no_current(name)
            pointer = self.root / name / CURRENT_FILE
            if pointer.exists():  # blank: broken, where a missing one is not published yet
                blank = ValueError(f"{pointer} names no version (it is blank)")
                await self._refuse(name, Refusal("", (), ""), blank, report)
            return None
        while version is not None:
            current = self._models.get(name)
            if current is not None and current.version == version:
                if (
                    not current.files
                    or files_signature(current.path, [e[0] for e in current.files]) == current.files
                ):
                    # CURRENT is back on the version serving (fixed by hand, a rollback): a
                    # refusal of another version no longer holds.
                    self._refused.pop(name, None)
                    report.unchanged.append((name, version))
                    return None
                refused = self._refused.get(name)
                if (
                    not force
                    and refused is not None
                    and refused.kept
                    and refused.version == version
                    and refused.signature == version_signature(current.path)
                ):
                    return None  # refused as its files are now; the loaded copy serves
                await self._remap(current, report)
                return None
            # Taken before the load: files that change meanwhile differ at the next poll.
            signature = (
                version_signature(self.root / name / version) if _NAME.fullmatch(version) else ()
            )
            refused = self._refused.get(name)
            if (
                not force
                and refused is not None
                and refused.version == version
                and refused.signature == signature
            ):
                return None  # refused as it is now; a repaired or re-published copy is retried
            try:
                loaded = await anyio.to_thread.run_sync(self._load, name, version)
            except Exception as exc:
                await self._refuse(name, Refusal(version, signature, ""), exc, report)
                return None
            latest = read_current(self.root, name)
            if latest != version:
                # CURRENT moved on while this one loaded: load the newer one instead.
                log.info("%s/%s loaded but CURRENT is now %s", name, version, latest)
                version = latest
                continue
            self._swap(loaded)
            report.loaded.append((name, version))
            return None
        return None

    async def _remap(self, current: LoadedModel, report: ReloadReport) -> None:
        """The served version's files changed on disk. A trial wrote into items.npy in place:
        the worker served the written values (wrong scores, nothing reported) until a restart,
        also after `ltr publish` had repaired the file, as the mapping kept the old one; another
        truncated model.json: nothing said so until a worker restarted and served the older
        version while the others kept the newer. Loaded (and verified) again: repaired files
        serve. Files that fail are refused; the loaded copy serves on when nothing it reads
        changed (its model is in memory, and its snapshot read or still mapped as it was),
        said in /models and the log: falling back to an older version there rolled production
        back to a model nobody chose (its features maybe others: 422s), and with no older one
        answered 503 for a model intact in memory (a held-out trial). A mapping of changed
        files would serve other values or fault: that copy goes, and an older version that
        loads serves instead."""
        name, version = current.name, current.version
        signature = version_signature(current.path)
        try:
            loaded = await anyio.to_thread.run_sync(self._load, name, version)
        except Exception as exc:
            log.error("%s/%s: its files changed on disk and fail their check", name, version)
            intact = _mapping_intact(current)
            if not intact:
                self._drop(current)
            await self._refuse(name, Refusal(version, signature, "", kept=intact), exc, report)
            return
        log.warning("%s/%s: its files changed on disk; loaded again", name, version)
        self._swap(loaded)
        report.loaded.append((name, version))

    def _no_current(self, name: str) -> str:
        """Why model `name`, served, has no CURRENT version now (with the absolute path)."""
        model_dir = self.root.resolve() / name
        if not model_dir.is_dir():
            return f"{model_dir}/ is missing from the registry"
        current = model_dir / CURRENT_FILE
        return f"{current} is {'empty' if current.exists() else 'missing'}"

    def _load(self, name: str, version: str) -> LoadedModel:
        """Read, verify, build and warm up one version (runs in a worker thread)."""
        if not _NAME.fullmatch(version):
            raise ValueError(f"{self.root / name}/CURRENT names an invalid version {version!r}")
        # Before the files are read: a write after the checks must make it differ at a poll.
        on_disk = version_signature(self.root / name / version)
        artifact = load_version(self.root / name / version)
        manifest = artifact.manifest
        if manifest.name != name:
            raise ValueError(f"{artifact.path}: manifest name {manifest.name!r} != {name!r}")
        scorer = self._scorer_loader(artifact)
        if scorer.num_features != len(manifest.feature_names):
            raise ValueError(
                f"{artifact.path}: model takes {scorer.num_features} features, manifest "
                f"names {len(manifest.feature_names)}"
            )
        if self._on_load is not None:
            self._on_load(manifest, artifact.files)
        warm_up(scorer, manifest, self.settings.parallel_min_rows)
        items = manifest.item_features
        snapshot: ItemSnapshot | None = None
        if items is not None and items.matrix_file is not None and items.ids_file is not None:
            snapshot = ItemSnapshot.load(
                artifact.path, items, self.settings.item_snapshot_map_min_bytes
            )
        # The verified files only: reports written beside a version later are not its own.
        verified = {MANIFEST_FILE, *manifest.files}
        files = tuple(entry for entry in on_disk if entry[0] in verified)
        return LoadedModel(manifest, scorer, artifact.path, time.time(), snapshot, files)

    async def _serve_older(
        self, name: str, refusal: Refusal, full: str, report: ReloadReport
    ) -> None:
        """Serve the version CURRENT named before the refused one that loads, else the newest
        installed before it that does (names are free-form: `v10` sorts before `v9`)."""
        refused = refusal.version
        installed = list_versions(self.root, name)
        before = installed[: installed.index(refused)] if refused in installed else installed
        # A blank CURRENT (refused "") leaves HISTORY's own record of what served.
        history = read_history(self.root, name) if refused else recorded_history(self.root, name)
        named = [v for v in history if v in installed]
        older = [
            v
            for v in dict.fromkeys([*reversed(named), *reversed(before)])
            if v != refused and _NAME.fullmatch(v)
        ]
        for version in older:
            try:
                loaded = await anyio.to_thread.run_sync(self._load, name, version)
            except Exception as exc:
                log.error(
                    "%s/%s, tried instead of the refused CURRENT %s, refused too: %s",
                    name,
                    version,
                    refused,
                    exc,
                )
                continue
            # One line for the refusal and what serves instead: a refusal logged as "still
            # serving nothing" right before "serving m/v1" contradicted itself.
            log.error(
                "%s: CURRENT %s refused; serving the older %s (%s)", name, refused, version, full
            )
            self._swap(loaded)
            self._refused[name] = replace(refusal, older=version)
            report.loaded.append((name, version))
            return
        log.error("refused %s/%s (%s); still serving nothing", name, refused, full)

    def _public(self, message: str) -> str:
        """`message` with paths made relative to the registry (absolute ones go to the log)."""
        for root in {str(self.root.resolve()), str(self.root)}:
            message = message.replace(root + "/", "").replace(root, ".")
        return message

    def _swap(self, loaded: LoadedModel) -> None:
        old = self._models.get(loaded.name)
        self._models = {**self._models, loaded.name: loaded}
        self._refused.pop(loaded.name, None)
        if old is not None:
            # Zeroed: in multiprocess mode the shared files keep every series (the exposition
            # leaves zeroed info series out) and prometheus-client warns on a removal there.
            metrics.MODEL_INFO.labels(old.name, old.version, old.manifest.kind).set(0)
            if metrics.multiprocess_dir() is None:
                metrics.MODEL_INFO.remove(old.name, old.version, old.manifest.kind)
        metrics.MODEL_INFO.labels(loaded.name, loaded.version, loaded.manifest.kind).set(1)
        metrics.MODEL_LOADED_TIMESTAMP.labels(loaded.name).set(loaded.loaded_at)
        metrics.MODEL_RELOADS.labels(loaded.name).inc()
        metrics.RELOAD_FAILURES.labels(loaded.name)  # at 0 until one: alerts see the first
        log.info(
            "serving %s/%s (was %s)", loaded.name, loaded.version, old.version if old else None
        )
        if self._on_serve is not None:
            self._on_serve(loaded)

    def _drop(self, served: LoadedModel) -> None:
        self._models = {k: m for k, m in self._models.items() if k != served.name}
        metrics.MODEL_INFO.labels(served.name, served.version, served.manifest.kind).set(0)

    async def _refuse(
        self,
        name: str,
        refusal: Refusal,
        exc: Exception,
        report: ReloadReport,
    ) -> None:
        """Record a refusal; with nothing serving (a start-up, or a served version whose
        mapped files changed), serve the newest older version that loads instead."""
        full = f"{type(exc).__name__}: {exc}"
        message = self._public(full)
        version = refusal.version
        before = self._refused.get(name)
        # Refused again (a retry of a changed copy): the older version still serves instead.
        older = before.older if before is not None and before.version == version else None
        refusal = replace(refusal, reason=message, older=None if refusal.kept else older)
        self._refused[name] = refusal
        metrics.RELOAD_FAILURES.labels(name).inc()
        report.failed.append((name, version, message))
        serving = self._models.get(name)
        if serving is None:
            await self._serve_older(name, refusal, full, report)  # said in one line
            return
        what = "the copy loaded before" if refusal.kept else serving.version
        log.error("refused %s/%s (%s); still serving %s", name, version, full, what)


def _mapping_intact(served: LoadedModel) -> bool:
    """Whether `served` may answer a little longer: its memory-mapped snapshot files are as
    they were or gone (a mapping keeps a removed or moved file's pages). One truncated in place
    would fault on access (SIGBUS); one rewritten in place gives other values."""
    items = served.manifest.item_features
    if served.item_snapshot is None or items is None or not served.item_snapshot.mapped:
        return True
    names = [n for n in (items.matrix_file, items.ids_file) if n is not None]
    recorded = {entry[0]: entry for entry in served.files}
    now = files_signature(served.path, names)
    return all(entry[2] == -1 or entry == recorded.get(entry[0]) for entry in now)


def warm_up(scorer: Scorer, manifest: Manifest, parallel_min_rows: int) -> None:
    """Score a few rows (zeros, all-missing, random) and a large batch; refuse odd output.

    The large batch makes the first big request pay no one-off cost of the parallel path.
    """
    n_features = len(manifest.feature_names)
    rng = np.random.default_rng(0)
    user = None
    uc = manifest.user_clusters
    if uc is not None and uc.input == "onnx_input":
        user = np.zeros(uc.embedding_dim, dtype=np.float32)
    small = rng.standard_normal((WARMUP_ROWS, n_features)).astype(np.float32)
    small[0] = 0.0
    small[1] = np.nan
    large_rows = min(max(parallel_min_rows, WARMUP_ROWS), MAX_WARMUP_ROWS)
    large = rng.standard_normal((large_rows, n_features)).astype(np.float32)
    for rows in (small, large):
        scores = np.asarray(scorer.score(rows, user))
        if scores.shape != (rows.shape[0],):
            raise ValueError(f"warm-up: scorer returned shape {scores.shape} for {rows.shape}")
        if not np.all(np.isfinite(scores)):
            raise ValueError("warm-up: scorer returned non-finite scores")
