"""Training parameters from a TOML file, overridden by command-line flags.

The file is flat: `key = value` with the parameter names of the chosen engine
(`LambdaMARTParams` for native/lightgbm, `DNNOptions` for dnn), plus an optional `engine`.
Dashes in keys are accepted (`num-trees` = `num_trees`). Unknown keys and bad values are errors
naming the file and the key's line (`params.toml:3: num_leaves: ...`).
"""

from __future__ import annotations

import tomllib
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from app.errors import LtrError
from trainer.toml_lines import key_line

M = TypeVar("M", bound=BaseModel)

FILE_ONLY_KEYS = frozenset({"engine"})


class ConfigError(LtrError, ValueError):
    """A params file or flag value that cannot be used; the message names the file or flag."""


def read_config(path: Path) -> dict[str, Any]:
    """The TOML file's top-level keys (dashes → underscores)."""
    path = Path(path)
    try:
        # utf-8-sig: editors on Windows start a file with a byte-order mark.
        raw = tomllib.loads(path.read_bytes().decode("utf-8-sig"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML ({exc})") from None
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if isinstance(value, dict):
            raise ConfigError(
                f"{_at(path, key)}: [{key}]: tables are not supported, use top-level keys (the "
                "keys of a nightly config's [model.lambdamart] or [model.dnn] table, e.g. "
                'num_trees = 200, and engine = "lightgbm")'
            )
        out[key.replace("-", "_")] = value
    return out


def build_params(
    model: type[M],
    file_values: Mapping[str, Any],
    flags: Mapping[str, Any],
    *,
    source: str,
    label: str | None = None,
    ignore: Collection[str] = FILE_ONLY_KEYS,
) -> M:
    """`model` validated from the file's values with flags (None = not given) on top.

    Errors say where the bad value came from: `params.toml:3: num_leaves: ...` (`source` is the
    file's path, read again for the key's line) or `--num-leaves: ...`; `label` names the
    parameter set in them (default: the model class name).
    """
    label = label or model.__name__
    known = set(model.model_fields)
    unknown = sorted(set(file_values) - known - set(ignore))
    if unknown:
        raise ConfigError(
            f"{_at(source, unknown[0])}: unknown key {unknown[0]!r} for {label} (known: "
            f"{', '.join(sorted(known))})"
        )
    given = {k: v for k, v in flags.items() if v is not None}
    stray = sorted(set(given) - known)
    if stray:
        raise ConfigError(f"--{stray[0].replace('_', '-')} does not apply to {label}")
    merged = {k: v for k, v in file_values.items() if k in known}
    merged.update(given)
    try:
        return model.model_validate(merged)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = str(first["loc"][0]) if first["loc"] else ""
        if key in given:
            where = f"--{key.replace('_', '-')}"
        elif key in file_values:
            where = f"{_at(source, key)}: {key}"
        else:
            where = f"{source}: {key}"
        raise ConfigError(f"{where}: {first['msg']}") from None


def _at(source: object, key: str) -> str:
    """`params.toml:3`, the line of the top-level `key` (as written, dashes or not); the bare
    source when it is no readable file or does not write the key."""
    try:
        text = Path(str(source)).read_bytes().decode("utf-8-sig")
    except (OSError, UnicodeDecodeError):
        return str(source)
    line = key_line(text, (key,))
    return str(source) if line is None else f"{source}:{line}"
