"""IR → machine code for this CPU with llvmlite, optionally cached as an object file on disk.

The cache key covers everything the code depends on: the model's bytes (sha256), the code
generator's version and options, and the host CPU name and features (the code uses the host's
vector instructions, so an object from another CPU must never be loaded).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
from pathlib import Path

import llvmlite.binding as llvm

# Bump when the generated code changes meaning or layout: old cache entries then miss.
CODEGEN_VERSION = 1
import os as _os
OPT=int(_os.environ.get('OPT','2')); CODEMODEL=_os.environ.get('CM','small'); SPEED=int(_os.environ.get('SPEED','-1'))

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
    except RuntimeError:  # LLVM cannot detect features on some hosts; generic code then
        features = ""
    return llvm.get_host_cpu_name(), features


def cache_key(model_sha256: str, options: str) -> str:
    cpu, features = host_cpu()
    text = f"{model_sha256}|{CODEGEN_VERSION}|{options}|{llvm.get_process_triple()}|{cpu}|{features}"
    return hashlib.sha256(text.encode()).hexdigest()


class CompiledModule:
    """Machine code loaded into this process; keep the object alive while its functions are used."""

    def __init__(self, ir_text: str | None, cached_object: bytes | None = None) -> None:
        _ensure_llvm()
        cpu, features = host_cpu()
        target = llvm.Target.from_triple(llvm.get_process_triple())
        # "large" code model: a model's code can exceed the 2 GB reach the default model assumes
        # for relative calls between separately placed sections in MCJIT.
        self._tm = target.create_target_machine(
            cpu=cpu, features=features, opt=OPT, reloc="pic", codemodel=CODEMODEL
        )
        if cached_object is not None:
            self._engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), self._tm)
            self._engine.add_object_file(llvm.ObjectFileRef.from_data(cached_object))
            self.object_code = cached_object
        else:
            if ir_text is None:
                raise ValueError("need IR text or a cached object")
            parsed = llvm.parse_assembly(ir_text)
            parsed.triple = llvm.get_process_triple()
            parsed.verify()
            self._optimize(parsed)
            self.object_code = self._tm.emit_object(parsed)
            self._engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), self._tm)
            self._engine.add_object_file(llvm.ObjectFileRef.from_data(self.object_code))
        self._engine.finalize_object()

    def _optimize(self, module: llvm.ModuleRef) -> None:
        # The generated code is straight-line and already CSE'd by the generator: a light
        # pipeline keeps compile time low; instruction selection does the real work.
        if SPEED < 0:
            return
        pto = llvm.create_pipeline_tuning_options(speed_level=SPEED)
        pass_builder = llvm.create_pass_builder(self._tm, pto)
        pass_builder.getModulePassManager().run(module, pass_builder)

    def address(self, name: str) -> int:
        addr = int(self._engine.get_function_address(name))
        if not addr:
            raise LookupError(f"compiled module has no function {name!r}")
        return addr


def compile_cached(
    build: object, key: str, cache_dir: Path | None
) -> CompiledModule:
    """Load `key` from `cache_dir` when present, else compile `build()` and store the object.

    `build` is a zero-argument callable returning the IR module (only called on a miss). The
    object is written to a temporary file and renamed, so concurrent loaders never read half.
    """
    if cache_dir is not None:
        path = Path(cache_dir) / f"{key}.o"
        try:
            return CompiledModule(None, path.read_bytes())
        except FileNotFoundError:
            pass
    if not callable(build):
        raise TypeError("build must be callable")
    compiled = CompiledModule(build())
    if cache_dir is not None:
        cache_dir = Path(cache_dir)
        cache_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".o", dir=cache_dir)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(compiled.object_code)
            os.replace(tmp, cache_dir / f"{key}.o")
        except OSError:
            Path(tmp).unlink(missing_ok=True)
    return compiled
