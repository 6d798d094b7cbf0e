"""The console script's own handling: Ctrl-C inside compiled code."""

from __future__ import annotations

import pytest

from trainer import cli


def _interrupted_in_compiled_code(args: list[str]) -> None:
    # What numba raises when Ctrl-C lands in a compiled function (the tree learner's _grow).
    try:
        raise KeyboardInterrupt
    except KeyboardInterrupt as interrupt:
        raise SystemError(
            "CPUDispatcher(<function _grow>) returned a result with an exception set"
        ) from interrupt


def test_ctrl_c_in_compiled_code_aborts_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A held-out review pressed Ctrl-C during `ltr train`: a 65-line SystemError traceback."""
    monkeypatch.setattr(cli, "_run", _interrupted_in_compiled_code)
    with pytest.raises(SystemExit) as exited:
        cli.main(["train"])
    assert exited.value.code == 130  # 128 + SIGINT, as every command answers Ctrl-C
    err = capsys.readouterr().err
    assert "Aborted" in err and "Traceback" not in err and "SystemError" not in err


def test_another_system_error_is_not_taken_for_ctrl_c(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(args: list[str]) -> None:
        raise SystemError("a real bug")

    monkeypatch.setattr(cli, "_run", broken)
    with pytest.raises(SystemError, match="a real bug"):
        cli.main(["train"])


def test_ctrl_c_anywhere_exits_130(monkeypatch: pytest.MonkeyPatch) -> None:
    """In Python code typer answers 130; inside compiled code (above) it was 1, which `ltr
    nightly` documents as an unexpected crash."""
    import typer

    interrupted = typer.Typer()

    @interrupted.command()
    def train(as_json: bool = typer.Option(False, "--json")) -> None:
        raise KeyboardInterrupt

    @interrupted.command()
    def other() -> None:
        pass

    monkeypatch.setattr(cli, "app", interrupted)
    for args in (["train"], ["train", "--json"]):
        with pytest.raises(SystemExit) as exited:
            cli.main(args)
        assert exited.value.code == 130, args


def test_ctrl_c_while_the_commands_load_is_not_a_traceback() -> None:
    """Ctrl-C in the first second of `ltr` printed the traceback of the import it stopped."""
    import subprocess
    import sys

    code = (
        "import importlib\n"
        "real = importlib.import_module\n"
        "def stopped(name, *args):\n"
        "    if name.startswith('trainer.commands.'):\n"
        "        raise KeyboardInterrupt\n"
        "    return real(name, *args)\n"
        "importlib.import_module = stopped\n"
        "import trainer.cli\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 130 and "Traceback" not in done.stderr, done.stderr
