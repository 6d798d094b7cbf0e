"""The design's boundaries, checked statically: what the service may import and depend on."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN_IN_APP = {"trainer", "torch", "lightgbm", "xgboost", "pickle", "dill", "joblib", "onnx"}


def _imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_app_imports_nothing_from_trainer_or_heavy_libraries() -> None:
    offenders = {
        str(path.relative_to(ROOT)): sorted(_imported_roots(path) & FORBIDDEN_IN_APP)
        for path in (ROOT / "app").rglob("*.py")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_serving_extra_has_no_training_libraries() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    serve = " ".join(project["dependencies"] + project["optional-dependencies"]["serve"]).lower()
    for heavy in ("torch", "lightgbm", "xgboost"):
        assert heavy not in serve


def test_torch_is_pinned_where_it_is_required() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    torch_reqs = [r for reqs in extras.values() for r in reqs if r.startswith("torch")]
    assert torch_reqs and all(r == "torch==2.13.0" for r in torch_reqs)


def test_bundled_demo_data_is_present() -> None:
    data = ROOT / "trainer" / "demo_data"
    for name in ("rank.train", "rank.train.query", "rank.test", "rank.test.query"):
        assert (data / name).stat().st_size > 0


def _where_things_are() -> str:
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    return text.split("## Where things are", 1)[1].split("\n## ", 1)[0]


def test_architecture_table_names_every_package_and_only_real_paths() -> None:
    table = _where_things_are()
    for top in ("app", "trainer"):
        for package in sorted((ROOT / top).iterdir()):
            if package.is_dir() and any(package.glob("*.py")):
                assert f"`{top}/{package.name}/`" in table, f"{top}/{package.name}/ is not listed"
    for line in table.splitlines():
        if line.startswith("| `"):
            place = line.split("|")[1]
            for path in place.replace("`", "").replace(",", " ").split():
                assert (ROOT / path).exists(), f"the table names {path}, which does not exist"
