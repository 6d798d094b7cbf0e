"""Every TOML the trainer reads takes a UTF-8 byte-order mark (as editors on Windows write)
and refuses other encodings with a one-line error naming the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer.commands.errors import CommandError
from trainer.config import ConfigError, read_config
from trainer.features.sources import SpecError, build_spec
from trainer.nightly.config import load_config

BOM = b"\xef\xbb\xbf"
NIGHTLY = Path(__file__).resolve().parents[2] / "deploy" / "nightly.toml"


def test_params_file(tmp_path: Path) -> None:
    path = tmp_path / "params.toml"
    path.write_bytes(BOM + b"num_trees = 5\n")
    assert read_config(path) == {"num_trees": 5}
    path.write_bytes("num_trees = 5 # \xe9\n".encode("latin-1"))
    with pytest.raises(ConfigError, match=r"params\.toml: not UTF-8 text"):
        read_config(path)


def test_nightly_config(tmp_path: Path) -> None:
    path = tmp_path / "nightly.toml"
    path.write_bytes(BOM + NIGHTLY.read_bytes())
    assert load_config(path) == load_config(NIGHTLY)
    path.write_bytes(b"\xff\xfe" + NIGHTLY.read_bytes())
    with pytest.raises(CommandError, match=r"nightly\.toml: not UTF-8 text"):
        load_config(path)
    with pytest.raises(CommandError, match="cannot read"):
        load_config(tmp_path)  # a directory


def test_features_spec(tmp_path: Path) -> None:
    path = tmp_path / "features.toml"
    path.write_bytes(BOM + b'query = ["hour"]\n')
    spec = build_spec(path, None, None, None, None)
    assert spec is not None and spec.query == ["hour"]
    path.write_bytes(b'query = ["h\xe9"]\n')
    with pytest.raises(SpecError, match=r"features\.toml: not a valid features spec"):
        build_spec(path, None, None, None, None)
