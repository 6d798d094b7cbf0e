"""IR text → machine code for this CPU with llvmlite, optionally cached as an object file on disk.

The cache key covers everything the code depends on: the model's bytes (sha256), the code
generator's version and options, and the host CPU name and features (the code uses the host's
vector instructions, so an object built on another CPU must never be loaded).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import llvmlite.binding as llvm

# Bump when the generated code changes meaning or layout: old cache entries then miss.
CODEGEN_VERSION = 1
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


def cache_key(model_sha256: str, options: str) -> str:
    """Hex digest naming one compiled object: model bytes, generator, options and host CPU."""
    cpu, features = host_cpu()
    triple = llvm.get_process_triple()
    text = f"{model_sha256}|{CODEGEN_VERSION}|{CODEGEN_OPT}|{options}|{triple}|{cpu}|{features}"
    return hashlib.sha256(text.encode()).hexdigest()


class CompiledModule:
    """Machine code loaded into this process; keep this object alive while its code is called."""

    def __init__(self, ir_text: str | None = None, object_code: bytes | None = None) -> None:
        if (ir_text is None) == (object_code is None):
            raise ValueError("give exactly one of ir_text and object_code")
        _ensure_llvm()
        cpu, features = host_cpu()
        target = llvm.Target.from_triple(llvm.get_process_triple())
        # The large code model makes every address absolute, so the JIT may place code and data
        # sections anywhere; it costs one extra instruction per call, once per tree per block.
        self._tm = target.create_target_machine(
            cpu=cpu, features=features, opt=CODEGEN_OPT, reloc="pic", codemodel="large"
        )
        if ir_text is not None:
            parsed = llvm.parse_assembly(ir_text)
            parsed.triple = llvm.get_process_triple()
            parsed.verify()
            object_code = self._tm.emit_object(parsed)
        assert object_code is not None
        self.object_code = object_code
        self._engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), self._tm)
        self._engine.add_object_file(llvm.ObjectFileRef.from_data(object_code))
        self._engine.finalize_object()

    def address(self, name: str) -> int:
        addr = int(self._engine.get_function_address(name))
        if not addr:
            raise LookupError(f"compiled module has no function {name!r}")
        return addr


def _read_cached(path: Path) -> bytes | None:
    """The object stored at `path`, or None when absent or damaged (never load a torn file)."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    digest, _, obj = data.partition(b"\n")
    if not obj or hashlib.sha256(obj).hexdigest().encode() != digest:
        return None
    return obj


def _write_cached(path: Path, object_code: bytes) -> None:
    tmp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".o", dir=path.parent)
        with os.fdopen(fd, "wb") as fh:
            fh.write(hashlib.sha256(object_code).hexdigest().encode() + b"\n" + object_code)
        os.replace(tmp, path)
    except OSError:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)


def compile_cached(build: Callable[[], str], key: str, cache_dir: Path | None) -> CompiledModule:
    """Load object `key` from `cache_dir` when there, else compile `build()` and store it.

    Each cache file starts with its object's sha256 (a damaged file is recompiled, never
    loaded) and is written under a temporary name then renamed, so a concurrent loader never
    reads half a file. An unreadable or unwritable cache only costs a compile.
    """
    path = Path(cache_dir) / f"{key}.o" if cache_dir is not None else None
    if path is not None:
        cached = _read_cached(path)
        if cached is not None:
            return CompiledModule(object_code=cached)
    compiled = CompiledModule(ir_text=build())
    if path is not None:
        _write_cached(path, compiled.object_code)
    return compiled
