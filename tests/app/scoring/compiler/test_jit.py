"""The compile cache's key and files: a key changes with everything the machine code depends
on, and only an intact file written for that key is ever loaded."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from app.scoring.compiler import jit

SHA = "ab" * 32


def test_the_key_is_stable_and_covers_model_options_generator_and_cpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    key = jit.cache_key(SHA, "lanes=16")
    assert key == jit.cache_key(SHA, "lanes=16") and len(key) == 64
    assert jit.cache_key("cd" * 32, "lanes=16") != key
    assert jit.cache_key(SHA, "lanes=8") != key
    monkeypatch.setattr(jit, "CODEGEN_VERSION", jit.CODEGEN_VERSION + 1)
    assert jit.cache_key(SHA, "lanes=16") != key
    monkeypatch.undo()
    cpu, features = jit.host_cpu()
    monkeypatch.setattr(jit, "host_cpu", lambda: (cpu, features + ",+imaginary"))
    assert jit.cache_key(SHA, "lanes=16") != key
    monkeypatch.setattr(jit, "host_cpu", lambda: ("some-other-cpu", features))
    assert jit.cache_key(SHA, "lanes=16") != key


def test_cached_objects_are_read_back_only_when_intact(tmp_path: Path) -> None:
    objects = [b"\x7fELF first", b"\x7fELF second"]
    path = tmp_path / "k.o"
    jit._write_cached(path, objects)
    assert jit._read_cached(path) == objects
    assert [p.name for p in tmp_path.iterdir()] == ["k.o"]  # no temporary file left behind
    data = path.read_bytes()
    path.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))  # one flipped bit
    assert jit._read_cached(path) is None
    path.write_bytes(data[: len(data) // 2])  # a torn write
    assert jit._read_cached(path) is None
    assert jit._read_cached(tmp_path / "absent.o") is None


def test_compile_cached_compiles_once_per_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compiled: list[list[str]] = []

    def fake_emit(ir_texts: list[str], *, all_in_children: bool = False) -> list[bytes]:
        compiled.append(ir_texts)
        return [b"object"]

    monkeypatch.setattr(jit, "emit_objects", fake_emit)
    monkeypatch.setattr(jit, "CompiledModule", _Loaded)
    modules = [
        jit.compile_cached(lambda: ["ir"], "key1", tmp_path),
        jit.compile_cached(lambda: ["ir"], "key1", tmp_path),
        jit.compile_cached(lambda: ["ir"], "key2", tmp_path),
        jit.compile_cached(lambda: ["ir"], "key1", None),
    ]
    assert all(m.object_code == [b"object"] for m in modules)
    assert sorted(p.name for p in tmp_path.glob("*.o")) == ["key1.o", "key2.o"]
    assert len(compiled) == 3  # key1 once, key2 once, and the call without a cache


def test_one_process_compiles_a_key_while_the_others_wait_for_its_object(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two workers loading the same new version: the second must load the first's object, not
    # compile it again on the cores that serve (the lock is per open file, so threads show it).
    started, release = threading.Event(), threading.Event()
    compiles: list[str] = []

    def slow_emit(ir_texts: list[str], *, all_in_children: bool = False) -> list[bytes]:
        compiles.append(ir_texts[0])
        started.set()
        release.wait(10)
        return [b"object"]

    monkeypatch.setattr(jit, "emit_objects", slow_emit)
    monkeypatch.setattr(jit, "CompiledModule", _Loaded)
    results: list[object] = []

    def load() -> None:
        results.append(jit.compile_cached(lambda: ["ir"], "key", tmp_path))

    first = threading.Thread(target=load)
    first.start()
    assert started.wait(10)
    second = threading.Thread(target=load)
    second.start()
    second.join(0.3)
    assert second.is_alive()  # waiting for the first compile, not compiling
    release.set()
    first.join(10)
    second.join(10)
    assert compiles == ["ir"] and len(results) == 2
    assert all(r.object_code == [b"object"] for r in results)  # type: ignore[attr-defined]


def test_a_cache_that_cannot_hold_a_lock_file_only_costs_a_compile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jit, "emit_objects", lambda texts, all_in_children=False: [b"object"])
    monkeypatch.setattr(jit, "CompiledModule", _Loaded)
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    module = jit.compile_cached(lambda: ["ir"], "key", blocker)  # its "directory" is a file
    assert module.object_code == [b"object"]

    def no_locks(fd: int, operation: int) -> None:
        raise OSError(37, "No locks available")  # ENOLCK, as some network file systems say

    monkeypatch.setattr(jit.fcntl, "flock", no_locks)
    module = jit.compile_cached(lambda: ["ir"], "key", tmp_path / "nfs")
    assert module.object_code == [b"object"] and (tmp_path / "nfs" / "key.o").exists()


def test_a_large_model_is_compiled_in_children_at_the_lowest_priority(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A new version compiles while the old one serves: a child at nice 19 leaves the cores to
    # requests (at normal priority, 1,000-candidate answers took 70-90 ms for the ~45 s of a
    # swap on a loaded 2-core machine). The child here sleeps after its compile so that its
    # niceness can be read from /proc.
    if not Path("/proc/self/stat").exists():
        pytest.skip("reads a child's niceness from /proc (Linux)")
    monkeypatch.setattr(jit, "_WORKER", jit._WORKER + "\nimport time\ntime.sleep(1.5)\n")

    def here(ir_text: str) -> bytes:
        raise AssertionError("compiled in the serving process")

    real_emit = jit._emit
    monkeypatch.setattr(jit, "_emit", here)
    ir = _tiny_ir()
    objects: list[bytes] = []
    worker = threading.Thread(
        target=lambda: objects.extend(jit.emit_objects([ir, ir], all_in_children=True))
    )
    # Children this process had already (a server an earlier test left to its session) are
    # not the compile's.
    earlier = set(_children_niceness())
    worker.start()
    niceness: dict[int, int] = {}  # the last seen of each child (it starts at ours)
    deadline = time.monotonic() + 20
    while worker.is_alive() and time.monotonic() < deadline:
        niceness.update(
            {pid: nice for pid, nice in _children_niceness().items() if pid not in earlier}
        )
        time.sleep(0.05)
    worker.join(30)
    assert len(niceness) == 2 and set(niceness.values()) == {jit.CHILD_NICE}
    assert objects == [real_emit(ir), real_emit(ir)]


def _tiny_ir() -> str:
    return "define i32 @answer() {\n  ret i32 42\n}\n"


def _children_niceness() -> dict[int, int]:
    """pid → nice value of each running child of this process (/proc/PID/stat's field 19)."""
    out = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid():  # fields[1] is the parent's pid
            out[int(stat.parent.name)] = int(fields[16])
    return out


class _Loaded:
    def __init__(self, object_code: list[bytes]) -> None:
        self.object_code = object_code
