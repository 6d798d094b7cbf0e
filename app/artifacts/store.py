"""Model versions on disk: `<registry>/<name>/<version>/` and `<registry>/<name>/CURRENT`.

Writes are never half-visible: a version is written under a temporary name and renamed into
place; CURRENT is replaced with an atomic rename. Loading verifies every file's sha256.

Version names are free-form (`v9`, `v10`, `walkthrough-v2`), so their order says nothing:
`<name>/HISTORY` lists the values CURRENT has had (oldest first, one per line) for rollback,
and the manifest's mtime, set when the version is installed, gives install order.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from app.artifacts.manifest import Manifest
from app.errors import LtrError

MANIFEST_FILE = "manifest.json"
CURRENT_FILE = "CURRENT"
HISTORY_FILE = "HISTORY"
HISTORY_LIMIT = 100
# In HISTORY, where CURRENT was moved by something that does not keep HISTORY (an older
# release's publish or rollback, a hand edit): what CURRENT named in between is not known, so
# rollback does not guess across it. Not a version name (NAME_PATTERN), so releases that do
# not know it skip it as a version no longer installed.
HISTORY_GAP = "?"
# Services may run as another uid than the trainer: CURRENT and HISTORY are world-readable,
# like the version files (mkstemp alone would leave them 0600).
SHARED_FILE_MODE = 0o644
# The item feature snapshot (`items.npy` float32 [n_items, n_features], `item_ids.npy` sorted
# unicode ids) can be large: it is verified by streaming and memory-mapped, never read whole.
LARGE_FILES = {"items.npy", "item_ids.npy"}
ALLOWED_FILES = {"model.json", "model.onnx", "embeddings.npy", "clusters.json"} | LARGE_FILES
MAX_ARTIFACT_BYTES = 512 * 1024 * 1024
MAX_LARGE_FILE_BYTES = 64 * 1024**3
_CHUNK = 8 * 1024 * 1024


class ArtifactError(LtrError, ValueError):
    """A model version that is missing, malformed, or fails verification."""


@dataclass(frozen=True)
class Artifact:
    """A verified model version: its manifest and the bytes of every file it lists."""

    path: Path
    manifest: Manifest
    files: dict[str, bytes]
    large_files: dict[str, Path] = field(default_factory=dict)  # verified, not read (LARGE_FILES)

    def all_files(self) -> dict[str, bytes | Path]:
        """Every file, as bytes or (the large ones) as the path of the verified file."""
        return {**self.files, **self.large_files}


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _write_file(target: Path, data: bytes | Path) -> str:
    """Write bytes or copy a file to `target`; its sha256."""
    if isinstance(data, bytes):
        target.write_bytes(data)
        return sha256_hex(data)
    digest = hashlib.sha256()
    with open(data, "rb") as src, open(target, "wb") as dst:
        while chunk := src.read(_CHUNK):
            digest.update(chunk)
            dst.write(chunk)
    return digest.hexdigest()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_version(registry: Path, manifest: Manifest, files: Mapping[str, bytes | Path]) -> Path:
    """Write a version directory atomically; the manifest gets the files' sha256 filled in."""
    return write_version_dir(Path(registry) / manifest.name / manifest.version, manifest, files)


def write_version_dir(final: Path, manifest: Manifest, files: Mapping[str, bytes | Path]) -> Path:
    """Write a version directory at an explicit path (its name must be the manifest's version).

    A file given as a Path is copied (large item snapshots are never held in memory)."""
    final = Path(final)
    if final.name != manifest.version:
        raise ArtifactError(f"{final}: directory name must be the version {manifest.version!r}")
    unknown = set(files) - ALLOWED_FILES
    if unknown:
        raise ArtifactError(f"files not allowed in an artifact: {sorted(unknown)}")
    if final.exists():
        raise ArtifactError(f"{final} already exists")
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{manifest.version}.", dir=final.parent))
    try:
        digests = {name: _write_file(tmp / name, data) for name, data in files.items()}
        stamped = manifest.model_copy(update={"files": digests})
        stamped = Manifest.model_validate(stamped.model_dump())
        (tmp / MANIFEST_FILE).write_text(stamped.model_dump_json(indent=2) + "\n")
        for child in tmp.iterdir():
            with open(child, "rb") as fh:
                os.fsync(fh.fileno())
        # Install order is this mtime (see list_versions): nanoseconds, because the
        # filesystem's own timestamps are coarse enough for two installs to tie.
        now = time.time_ns()
        os.utime(tmp / MANIFEST_FILE, ns=(now, now))
        os.chmod(tmp, 0o755)
        try:
            os.rename(tmp, final)
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            raise ArtifactError(f"{final} already exists") from None
        _fsync_dir(final.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def load_version(path: Path) -> Artifact:
    """Read and verify a version directory; raises ArtifactError saying what is wrong."""
    path = Path(path)
    mpath = path / MANIFEST_FILE
    try:
        raw = mpath.read_bytes()
    except OSError as exc:
        raise ArtifactError(f"{mpath}: cannot read ({exc.strerror})") from None
    try:
        manifest = Manifest.model_validate_json(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])  # empty for a file that is not JSON
        raise ArtifactError(f"{mpath}: {loc + ': ' if loc else ''}{first['msg']}") from None
    if manifest.version != path.name:
        raise ArtifactError(f"{mpath}: version {manifest.version!r} != directory {path.name!r}")
    if not manifest.files:
        raise ArtifactError(f"{mpath}: lists no files")
    files: dict[str, bytes] = {}
    large: dict[str, Path] = {}
    for name, digest in manifest.files.items():
        if name not in ALLOWED_FILES:
            raise ArtifactError(f"{mpath}: file {name!r} is not allowed in an artifact")
        fpath = path / name
        limit = MAX_LARGE_FILE_BYTES if name in LARGE_FILES else MAX_ARTIFACT_BYTES
        try:
            if fpath.stat().st_size > limit:
                raise ArtifactError(f"{fpath}: larger than {limit} bytes")
            if name in LARGE_FILES:
                actual = sha256_file(fpath)
                large[name] = fpath
            else:
                data = fpath.read_bytes()
                actual = sha256_hex(data)
                files[name] = data
        except OSError as exc:
            raise ArtifactError(f"{fpath}: cannot read ({exc.strerror})") from None
        if actual != digest:
            raise ArtifactError(f"{fpath}: sha256 mismatch (corrupt or truncated)")
    _check_item_files(mpath, manifest, set(manifest.files))
    return Artifact(path=path, manifest=manifest, files=files, large_files=large)


def _check_item_files(mpath: Path, manifest: Manifest, listed: set[str]) -> None:
    items = manifest.item_features
    if items is None or not items.has_snapshot:
        return
    for fname in (items.matrix_file, items.ids_file):
        if fname not in listed:
            raise ArtifactError(f"{mpath}: item snapshot file {fname!r} is not in files")


def read_current(registry: Path, name: str) -> str | None:
    """The version CURRENT names; None when CURRENT is missing or blank. Bytes that are not
    UTF-8 are read as U+FFFD: a name no version has, refused as such by whoever follows it
    (a UnicodeDecodeError escaped the service's reload loop and froze the models after it)."""
    try:
        text = _read_text(Path(registry) / name / CURRENT_FILE).strip()
    except FileNotFoundError:
        return None
    return text or None


def recorded_history(registry: Path, name: str) -> list[str]:
    """HISTORY's entries as written, oldest first (empty without the file)."""
    try:
        return _read_text(Path(registry) / name / HISTORY_FILE).split()
    except FileNotFoundError:
        return []


def _read_text(path: Path) -> str:
    return path.read_bytes().decode("utf-8", "replace")


def write_atomic(path: Path, data: bytes, mode: int = SHARED_FILE_MODE) -> None:
    """Replace `path` with `data` by an atomic rename; readable by other users (`mode`)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), mode)
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_history(registry: Path, name: str) -> list[str]:
    """The versions CURRENT has named, oldest first, ending with CURRENT itself (empty
    without a CURRENT). A CURRENT that HISTORY does not end with was set by something that
    does not keep HISTORY (an older release, a hand edit, a publish that could not write it):
    it counts as the newest entry, after a HISTORY_GAP (what came between is not known).
    A CURRENT naming no installed version (garbled, hand-edited) served nothing: HISTORY as
    recorded then."""
    current = read_current(registry, name)
    if current is None:
        return []
    entries = recorded_history(registry, name)
    if current not in list_versions(registry, name):
        return entries
    if entries and entries[-1] != current:
        entries.append(HISTORY_GAP)
    if not entries or entries[-1] != current:
        entries.append(current)
    return entries


def set_current(registry: Path, name: str, version: str, *, rollback: bool = False) -> None:
    """Point CURRENT at `version` with an atomic rename, and record it in HISTORY.

    `rollback` goes back rather than forward: HISTORY loses the entries after the last
    `version` (or, if it has none, CURRENT's), so a second rollback goes further back."""
    model_dir = Path(registry) / name
    if not (model_dir / version / MANIFEST_FILE).is_file():
        raise ArtifactError(f"{model_dir / version}: no such version")
    entries = read_history(registry, name)
    if rollback and version in entries:
        del entries[len(entries) - entries[::-1].index(version) :]
    else:
        if rollback and entries:
            entries.pop()
        if not entries or entries[-1] != version:
            entries.append(version)
    # CURRENT first: if HISTORY is then not written, read_history still ends with CURRENT.
    write_atomic(model_dir / CURRENT_FILE, (version + "\n").encode())
    write_atomic(
        model_dir / HISTORY_FILE, "".join(v + "\n" for v in entries[-HISTORY_LIMIT:]).encode()
    )


def list_models(registry: Path) -> list[str]:
    root = Path(registry)
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))


def installed_at_ns(version_dir: Path) -> int:
    """When the version was installed: its manifest's mtime (set by write_version_dir)."""
    return (Path(version_dir) / MANIFEST_FILE).stat().st_mtime_ns


def list_versions(registry: Path, name: str) -> list[str]:
    """Complete version directories of a model in install order, oldest first (names are
    free-form: `v10` sorts before `v9`, so name order is not publish order)."""
    model_dir = Path(registry) / name
    if not model_dir.is_dir():
        return []
    installed: list[tuple[int, str]] = []
    for p in model_dir.iterdir():
        if p.is_dir() and not p.name.startswith("."):
            try:
                installed.append((installed_at_ns(p), p.name))
            except FileNotFoundError:  # incomplete, or pruned while we looked
                continue
    return [version for _, version in sorted(installed)]
