"""A compile cache that cannot be written is said once in the log, and only costs compiles."""

from __future__ import annotations

import ctypes
import logging
from pathlib import Path

import pytest

from app.scoring.compiler import jit

IR = "define i32 @answer() {\n  ret i32 42\n}\n"


def answer(module: jit.CompiledModule) -> int:
    return int(ctypes.CFUNCTYPE(ctypes.c_int32)(module.address("answer"))())


def test_an_unwritable_cache_is_warned_about_once_and_the_model_still_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Before: the OSError was swallowed without a word, and every worker and restart
    # recompiled with nobody knowing why.
    monkeypatch.setattr(jit, "_unwritable_dirs", set(), raising=False)
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    cache = blocker / "compiled"  # its parent is a regular file: nothing can be made there
    caplog.set_level(logging.WARNING, logger=jit.__name__)
    modules = [
        jit.compile_cached(lambda: [IR], "key1", cache),
        jit.compile_cached(lambda: [IR], "key1", cache),
        jit.compile_cached(lambda: [IR], "key2", cache),
    ]
    assert [answer(m) for m in modules] == [42, 42, 42]
    warnings = [r for r in caplog.records if r.name == jit.__name__]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert warnings[0].levelno == logging.WARNING
    message = warnings[0].getMessage()
    assert str(cache) in message and "Not a directory" in message

    other = tmp_path / "read-only"
    other.write_text("x")
    jit.compile_cached(lambda: [IR], "key1", other / "cache")  # another directory: said too
    assert len([r for r in caplog.records if r.name == jit.__name__]) == 2


def test_a_cache_written_fine_says_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(jit, "_unwritable_dirs", set(), raising=False)
    caplog.set_level(logging.WARNING, logger=jit.__name__)
    assert answer(jit.compile_cached(lambda: [IR], "key", tmp_path)) == 42
    assert (tmp_path / "key.o").exists()
    assert not [r for r in caplog.records if r.name == jit.__name__]
