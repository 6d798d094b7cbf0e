from __future__ import annotations

from pathlib import Path

import pytest

from trainer.config import ConfigError, build_params, read_config
from trainer.dnn.options import DNNOptions
from trainer.lambdamart.params import LambdaMARTParams


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "params.toml"
    path.write_text(text)
    return path


def test_file_values_with_flags_on_top(tmp_path: Path) -> None:
    path = write(
        tmp_path, 'engine = "native"\nnum_trees = 500\nnum-leaves = 63\nlearning_rate = 0.05\n'
    )
    values = read_config(path)
    assert values == {"engine": "native", "num_trees": 500, "num_leaves": 63, "learning_rate": 0.05}
    params = build_params(
        LambdaMARTParams, values, {"num_leaves": 15, "seed": None}, source=str(path)
    )
    assert (params.num_trees, params.num_leaves, params.learning_rate) == (500, 15, 0.05)
    assert params.seed == LambdaMARTParams().seed  # a flag left at None does not override


def test_unknown_key_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "num_trees = 5\nnum_treez = 6\n")
    with pytest.raises(ConfigError, match=r"params\.toml:2: unknown key 'num_treez'"):
        build_params(LambdaMARTParams, read_config(path), {}, source=str(path))


def test_bad_value_says_where_it_came_from(tmp_path: Path) -> None:
    path = write(tmp_path, "num_leaves = 1\n")
    with pytest.raises(ConfigError, match=r"params\.toml:1: num_leaves: .*greater than or equal"):
        build_params(LambdaMARTParams, read_config(path), {}, source=str(path))
    with pytest.raises(ConfigError, match=r"^--learning-rate: .*greater than 0"):
        build_params(LambdaMARTParams, {}, {"learning_rate": -1.0}, source="command line")


def test_flag_of_another_engine(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--num-leaves does not apply to --engine dnn"):
        build_params(DNNOptions, {}, {"num_leaves": 7}, source="x", label="--engine dnn")
    options = build_params(DNNOptions, {"epochs": 3, "hidden": [8]}, {"dropout": 0.2}, source="x")
    assert (options.epochs, options.hidden, options.dropout) == (3, [8], 0.2)


@pytest.mark.parametrize(
    "text, message",
    [
        ("num_trees = [", r": invalid TOML"),
        ("[native]\nnum_trees = 3\n", r":1: \[native\]: tables are not supported"),
    ],
)
def test_unreadable_files(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=rf"params\.toml{message}"):
        read_config(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.toml: cannot read"):
        read_config(tmp_path / "nope.toml")


def test_errors_give_the_line_of_the_key(tmp_path: Path) -> None:
    """A trial: `c1.toml: hidden: Input should be a valid list` named the key, not its line;
    only TOML syntax errors had one."""
    path = write(
        tmp_path,
        '# the network\nengine = "dnn"\n\nhidden = "16"\nlearning-rate = -1\nepochz = 2\n',
    )
    values = read_config(path)
    with pytest.raises(ConfigError) as info:
        build_params(DNNOptions, values, {}, source=str(path))
    assert str(info.value).startswith(f"{path}:6: unknown key 'epochz'")
    del values["epochz"]
    with pytest.raises(ConfigError) as info:
        build_params(DNNOptions, values, {}, source=str(path))
    assert str(info.value) == f"{path}:4: hidden: Input should be a valid list"
    with pytest.raises(ConfigError) as info:  # written with a dash
        build_params(DNNOptions, values, {"hidden": [8]}, source=str(path))
    assert str(info.value).startswith(f"{path}:5: learning_rate: Input should be greater")
    with pytest.raises(ConfigError, match=r"^--learning-rate: "):  # a flag has no line
        build_params(DNNOptions, {}, {"learning_rate": -1.0}, source=str(path))
