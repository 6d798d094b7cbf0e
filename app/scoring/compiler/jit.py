"""IR text → machine code for this CPU with llvmlite, optionally cached as an object file on disk.

The cache key covers everything the code depends on: the model's bytes (sha256), the code
generator's version and options, and the host CPU name and features (the code uses the host's
vector instructions, so an object built on another CPU must never be loaded).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import llvmlite.binding as llvm

log = logging.getLogger(__name__)

# Bump when the generated code changes meaning or layout: old cache entries then miss.
CODEGEN_VERSION = 4
# Code generation at -O1: the IR is already minimal straight-line code, and -O2/-O3 only add
# compile time (measured: same scoring speed, 1.5-2.5x longer compiles).
CODEGEN_OPT = 1

_init_lock = threading.Lock()
_initialized = False


def _ensure_llvm() -> None:
    global _initialized
    with _init_lock:
        if not _initialized:
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            _initialized = True


def host_cpu() -> tuple[str, str]:
    """(cpu name, feature string) of this machine, as LLVM sees them."""
    _ensure_llvm()
    try:
        features = llvm.get_host_cpu_features().flatten()
    except RuntimeError:  # LLVM cannot detect features on some hosts: generic code then
        features = ""
    return llvm.get_host_cpu_name(), features


def host_has(feature: str) -> bool:
    """Whether this CPU has an instruction-set feature, by LLVM's name for it ("avx2")."""
    return f"+{feature}" in host_cpu()[1].split(",")


def cache_key(model_sha256: str, options: str) -> str:
    """Hex digest naming one compiled object: model bytes, generator, options and host CPU."""
    cpu, features = host_cpu()
    triple = llvm.get_process_triple()
    llvm_version = ".".join(map(str, llvm.llvm_version_info))
    text = f"{model_sha256}|{CODEGEN_VERSION}|{CODEGEN_OPT}|{options}|{triple}|{cpu}|{features}"
    text += f"|llvm {llvm_version}"
    return hashlib.sha256(text.encode()).hexdigest()


# A child compiles at the lowest CPU priority: a new version is compiled while the old one
# serves, and requests must not wait for its ~5 CPU-seconds per module (on a loaded 2-core
# machine, compiles at normal priority held 1,000-candidate answers at 70-90 ms for the whole
# ~45 s the swap took, against ~15 ms before). It holds no lock the serving process waits for.
CHILD_NICE = 19

# Compiles one module in a child process: llvmlite serialises all LLVM calls in a process behind
# one lock, so a second core can only be used from another process. Needs nothing but llvmlite.
_WORKER = """
import os
import sys
try:
    os.nice(int(sys.argv[4]))
except OSError:
    pass
import llvmlite.binding as llvm
llvm.initialize_native_target()
llvm.initialize_native_asmprinter()
cpu, features, opt = sys.argv[1], sys.argv[2], int(sys.argv[3])
target = llvm.Target.from_triple(llvm.get_process_triple())
tm = target.create_target_machine(cpu=cpu, features=features, opt=opt, reloc="static",
                                  codemodel="large")
module = llvm.parse_assembly(sys.stdin.buffer.read().decode())
module.triple = llvm.get_process_triple()
module.data_layout = str(tm.target_data)
module.verify()
sys.stdout.buffer.write(tm.emit_object(module))
"""


def _target_machine() -> llvm.TargetMachine:
    _ensure_llvm()
    cpu, features = host_cpu()
    target = llvm.Target.from_triple(llvm.get_process_triple())
    # Static relocations with the large code model make every address an absolute 64-bit one:
    # the JIT may place each object's sections anywhere, and no object depends on a GOT (PIC
    # code reaching its constants through the GOT broke once a model spans several objects).
    # It costs one extra instruction per call, once per tree per block.
    return target.create_target_machine(
        cpu=cpu, features=features, opt=CODEGEN_OPT, reloc="static", codemodel="large"
    )


def _emit(ir_text: str) -> bytes:
    """Object code for one module; the child worker above does exactly the same."""
    tm = _target_machine()
    module = llvm.parse_assembly(ir_text)
    module.triple = llvm.get_process_triple()
    module.data_layout = str(tm.target_data)
    module.verify()
    return bytes(tm.emit_object(module))


def _emit_in_child(ir_text: str, result: list[bytes | None]) -> None:
    cpu, features = host_cpu()
    try:
        proc = subprocess.run(
            [sys.executable, "-I", "-c", _WORKER, cpu, features, str(CODEGEN_OPT), str(CHILD_NICE)],
            input=ir_text.encode(),
            capture_output=True,
            timeout=600,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return
    if proc.returncode == 0 and proc.stdout:
        result[0] = proc.stdout


def emit_objects(ir_texts: list[str], *, all_in_children: bool = False) -> list[bytes]:
    """Object code for each module: the first here, the others in child processes at once;
    with `all_in_children` (a large model), every one in a child at the lowest priority.

    A child that cannot run (no interpreter, killed, out of memory) only means that module is
    compiled here afterwards.
    """
    here = [] if all_in_children else ir_texts[:1]
    away = ir_texts[len(here) :]
    results: list[list[bytes | None]] = [[None] for _ in away]
    threads = [
        threading.Thread(target=_emit_in_child, args=(text, slot), daemon=True)
        for text, slot in zip(away, results, strict=True)
    ]
    for t in threads:
        t.start()
    objects = [_emit(text) for text in here]
    for t, text, slot in zip(threads, away, results, strict=True):
        t.join()
        objects.append(slot[0] if slot[0] is not None else _emit(text))
    return objects


class CompiledModule:
    """Machine code loaded into this process; keep this object alive while its code is called."""

    def __init__(self, object_code: list[bytes]) -> None:
        if not object_code:
            raise ValueError("no object code to load")
        _ensure_llvm()
        self.object_code = object_code
        self._engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), _target_machine())
        for obj in object_code:
            self._engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
        self._engine.finalize_object()

    def address(self, name: str) -> int:
        addr = int(self._engine.get_function_address(name))
        if not addr:
            raise LookupError(f"compiled module has no function {name!r}")
        return addr


def _pack(objects: list[bytes]) -> bytes:
    return b"".join(len(o).to_bytes(8, "little") + o for o in objects)


def _unpack(payload: bytes) -> list[bytes] | None:
    objects, pos = [], 0
    while pos < len(payload):
        size = int.from_bytes(payload[pos : pos + 8], "little")
        pos += 8
        if size == 0 or pos + size > len(payload):
            return None
        objects.append(payload[pos : pos + size])
        pos += size
    return objects or None


def _read_cached(path: Path) -> list[bytes] | None:
    """The objects stored at `path`, or None when absent or damaged (never load a torn file)."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    digest, _, payload = data.partition(b"\n")
    if not payload or hashlib.sha256(payload).hexdigest().encode() != digest:
        return None
    return _unpack(payload)


def _write_cached(path: Path, objects: list[bytes]) -> None:
    payload = _pack(objects)
    tmp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".o", dir=path.parent)
        with os.fdopen(fd, "wb") as fh:
            fh.write(hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload)
        os.replace(tmp, path)
    except OSError as exc:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        _warn_unwritable(path.parent, exc)


# Cache directories this process could not write to, each said once: every model load tries
# again (a disk that has room again is used at once), and a line per load would flood the log.
_unwritable_dirs: set[Path] = set()
_unwritable_lock = threading.Lock()


def _warn_unwritable(directory: Path, exc: OSError) -> None:
    with _unwritable_lock:
        if directory in _unwritable_dirs:
            return
        _unwritable_dirs.add(directory)
    log.warning(
        "the compiled-model cache %s cannot be written (%s): models still load, but every "
        "worker and every restart compiles them again; said once per directory",
        directory,
        exc,
    )


def compile_cached(
    build: Callable[[], list[str]],
    key: str | None,
    cache_dir: Path | None,
    *,
    all_in_children: bool = False,
) -> CompiledModule:
    """Load object `key` from `cache_dir` when there, else compile `build()` and store it
    (`all_in_children`: as for emit_objects).

    Each cache file starts with its payload's sha256 (a damaged file is recompiled, never
    loaded) and is written under a temporary name then renamed, so a concurrent loader never
    reads half a file. One process compiles a key at a time (a lock file beside it): the
    service's other workers, loading the same new version, wait for its object instead of
    compiling it again on the cores that serve. An unreadable or unwritable cache only costs a
    compile.
    """
    path = Path(cache_dir) / f"{key}.o" if cache_dir is not None and key is not None else None
    if path is None:
        return CompiledModule(emit_objects(build(), all_in_children=all_in_children))
    with _compiling(path):
        cached = _read_cached(path)
        if cached is not None:
            with contextlib.suppress(OSError):  # read-only: nothing is pruned there either
                os.utime(path)  # used now: the pruning below keeps what is used
            return CompiledModule(cached)
        compiled = CompiledModule(emit_objects(build(), all_in_children=all_in_children))
        _write_cached(path, compiled.object_code)
    prune_cache(path.parent)
    return compiled


# Entries the cache keeps, the most recently used: an entry per model version compiled, and a
# registry keeps a few versions per model, but nothing removed old ones (a review: 51 entries
# after 45 publishes, ~1.3 MB each for 500 trees x 63 leaves, in a pod's /tmp). One pruned
# while still served only costs a compile at the next start.
CACHE_ENTRIES_KEPT = 64
_STALE_TEMPORARY_S = 3600.0  # a write torn by a crash leaves its temporary file


def prune_cache(directory: Path, keep: int | None = None) -> list[Path]:
    """Remove all but the `keep` (default CACHE_ENTRIES_KEPT) most recently used entries (and
    their lock files), and temporary files older than an hour; the entries removed."""
    keep = CACHE_ENTRIES_KEPT if keep is None else keep
    try:
        entries = [(p.stat().st_mtime, p) for p in directory.glob("*.o")]
    except OSError:
        return []
    now = time.time()
    removed = []
    for mtime, path in sorted(entries, reverse=True):
        if path.name.startswith(".tmp-"):
            if now - mtime >= _STALE_TEMPORARY_S:
                with contextlib.suppress(OSError):
                    path.unlink()
            continue
        if keep > 0:
            keep -= 1
            continue
        with contextlib.suppress(OSError):
            path.unlink()
            path.with_suffix(".lock").unlink(missing_ok=True)
            removed.append(path)
    return removed


@contextlib.contextmanager
def _compiling(path: Path) -> Iterator[None]:
    """Holds `<path>.lock` (flock: released by the kernel if its holder dies); without a lock
    (a read-only cache, a file system that refuses flock), goes on unlocked."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        yield
        return
    try:
        with contextlib.suppress(OSError):  # e.g. ENOLCK on some network file systems
            fcntl.flock(fd, fcntl.LOCK_EX)  # the GIL is released while it waits
        yield
    finally:
        os.close(fd)
