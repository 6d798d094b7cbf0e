"""Files saved by Excel or a Windows editor start with a UTF-8 byte-order mark."""

from __future__ import annotations

from pathlib import Path

from trainer.dnn.user_clusters import load_cluster_scheme
from trainer.dnn.user_profiles import read_profiles

BOM = "\ufeff"


def test_profile_csv_with_a_byte_order_mark(tmp_path: Path) -> None:
    path = tmp_path / "profiles.csv"
    path.write_text(f"{BOM}user_id,country\nu1,US\nu2,FR\n", encoding="utf-8")
    assert read_profiles(path) == {"u1": {"country": "US"}, "u2": {"country": "FR"}}


def test_cluster_scheme_with_a_byte_order_mark(tmp_path: Path) -> None:
    path = tmp_path / "clusters.toml"
    text = '[[fields]]\nname = "country"\nkind = "categorical"\nvalues = ["US", "FR"]\n'
    path.write_text(BOM + text, encoding="utf-8")
    assert [field.name for field in load_cluster_scheme(path).fields] == ["country"]
