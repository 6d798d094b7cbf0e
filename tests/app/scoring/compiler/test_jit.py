"""The compile cache's key and files: a key changes with everything the machine code depends
on, and only an intact file written for that key is ever loaded."""

from __future__ import annotations

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

    def fake_emit(ir_texts: list[str]) -> list[bytes]:
        compiled.append(ir_texts)
        return [b"object"]

    monkeypatch.setattr(jit, "emit_objects", fake_emit)

    class Loaded:
        def __init__(self, object_code: list[bytes]) -> None:
            self.object_code = object_code

    monkeypatch.setattr(jit, "CompiledModule", Loaded)
    modules = [
        jit.compile_cached(lambda: ["ir"], "key1", tmp_path),
        jit.compile_cached(lambda: ["ir"], "key1", tmp_path),
        jit.compile_cached(lambda: ["ir"], "key2", tmp_path),
        jit.compile_cached(lambda: ["ir"], "key1", None),
    ]
    assert all(m.object_code == [b"object"] for m in modules)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["key1.o", "key2.o"]
    assert len(compiled) == 3  # key1 once, key2 once, and the call without a cache
