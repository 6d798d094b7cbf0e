"""Checks and reports on how a data file meets its feature sources: query features that
cannot be query columns, and documents an item table has no row for."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trainer.data.dataset import RankingDataset
from trainer.data.errors import DataFormatError

if TYPE_CHECKING:
    from trainer.features.item_table import ItemTable
    from trainer.features.spec import FeatureSpec


@dataclass(frozen=True)
class ItemCoverage:
    """How many of a data file's documents the item table has no row for: trained on, their
    item features are all missing (NaN)."""

    source: str
    table: str
    documents: int
    missing: int

    @property
    def share(self) -> float:
        return self.missing / self.documents if self.documents else 0.0

    def warning(self) -> str:
        return (
            f"{self.source}: {self.missing:,} of {self.documents:,} documents "
            f"({self.share:.1%}) are not in the item table {self.table}; their item features "
            "are missing (NaN)"
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "file": self.source,
            "item_table": self.table,
            "documents": self.documents,
            "missing": self.missing,
            "missing_share": round(self.share, 6),
        }


# Columns of the data format that are never features, so never query features either.
_ROLES = {
    "qid": "the query id column",
    "label": "the relevance label column",
    "user_id": "the user id column",
    "position": "the served position column",
    "click": "the logged click column",
}


def check_query_names(data: RankingDataset, spec: FeatureSpec, table: ItemTable | None) -> None:
    """Each query feature names a column that can be one: a query feature named after the id,
    label or an item column was refused as "no query feature column", or as varying within a
    query at a row of a file that does not have that column."""
    for name in spec.query:
        role = _ROLES.get(name)
        if role is None and name == spec.id_column and data.doc_ids is not None:
            role = "the document id column (--id-column)"
        if role is not None:
            raise DataFormatError(
                f"{data.source}: column {name!r} is {role} and cannot be a query feature"
            )
        if table is not None and name in table.names:
            raise DataFormatError(
                f"query feature {name!r} is an item feature (a column of the item table "
                f"{table.source}), not a query column of {data.source}: drop it from the "
                "query features (every item table column is an item feature)"
            )
