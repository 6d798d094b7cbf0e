"""`ltr explain`: why a model ranks documents as it does.

- `--query Q --pair A,B`: the features that most separate two documents of one query (the
  difference of their contributions; A and B are 1-based positions in the query's list as the
  data file has it).
- `--query Q`: the query's documents in the model's order, each with its top contributions and
  the rest (score = expected value + shown contributions + rest).
- neither: the global view over the data (mean |contribution|, beeswarm, dependence plots)
  written as HTML to `--out`.

Q is the query's qid; data without qid (LETOR text with a `.query` file) has its queries
numbered from 0 in file order, as its reader numbers them. Labels are shown when the data has
them, never needed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import numpy as np
import orjson
import typer

from app.artifacts.store import ArtifactError, load_version
from app.artifacts.tree_dump import TreeDumpError
from app.explain.top import largest
from app.explain.tree_tables import ExplainUnavailable
from trainer.commands.errors import CommandError, clear_errors
from trainer.commands.json_values import json_value
from trainer.commands.options import ItemsIdColumn
from trainer.data.errors import clip

DEFAULT_ROWS = 5000


def explain_command(
    model: Annotated[Path, typer.Option("--model", help="Version directory.")],
    data: Annotated[Path, typer.Option("--data", help="LETOR text or Parquet.")],
    query: Annotated[
        str | None,
        typer.Option(
            help="Query to explain: its qid; for data without qid (LETOR text with a .query "
            "file) its number, from 0 in file order."
        ),
    ] = None,
    pair: Annotated[
        str | None,
        typer.Option(
            help="A,B: two documents of --query, numbered from 1 in file order (or, for data "
            "with a document id column, their ids)."
        ),
    ] = None,
    out: Annotated[Path, typer.Option(help="Global view: the HTML report to write.")] = Path(
        "explain.html"
    ),
    rows: Annotated[
        int, typer.Option(min=1, help="Global view: at most this many rows (random sample).")
    ] = DEFAULT_ROWS,
    top: Annotated[int, typer.Option(min=1, help="Features to show.")] = 10,
    seed: Annotated[int, typer.Option(help="Row sample seed.")] = 0,
    items: Annotated[
        Path | None,
        typer.Option(
            help="Models with item features: the item table (Parquet) to join by document id, "
            "instead of the snapshot the version carries."
        ),
    ] = None,
    items_id_column: ItemsIdColumn = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Per-feature contributions: a pair of documents, one query, or the whole data (HTML)."""
    from trainer.data.errors import DataFormatError
    from trainer.explain.contributions import artifact_contributions
    from trainer.explain.label_free import load_explain_rows

    with clear_errors(ArtifactError, TreeDumpError, DataFormatError, ExplainUnavailable):
        if pair is not None and query is None:
            raise CommandError("--pair needs --query (the query both documents belong to)")
        artifact = load_version(model)
        names = artifact.manifest.feature_names
        loaded = load_explain_rows(artifact, data, items, items_id_column)
        dataset, joined = loaded.rows.data, loaded.rows.items
        if query is None:
            sample = np.random.default_rng(seed).permutation(dataset.num_docs)[:rows]
            sample.sort()
            features = dataset.features[sample]
            method, phi, _ = artifact_contributions(artifact, features)
            sampled = None if joined is None else joined.summary(sample)
            _global(artifact.manifest.name, artifact.manifest.version, method, names, features,
                    phi, out, top, as_json, sampled)  # fmt: skip
            return
        lo, hi = _query_rows(dataset.query_ids, dataset.group_offsets, query, data)
        features = dataset.features[lo:hi]
        labels = dataset.labels[lo:hi] if loaded.labelled else None
        method, phi, scores = artifact_contributions(artifact, features)
        if pair is not None:
            ids = None if dataset.doc_ids is None else [str(d) for d in dataset.doc_ids[lo:hi]]
            a, b = _pair(pair, hi - lo, query, ids)
            report = _pair_report(method, names, features, phi, scores, labels, a, b, top)
        else:
            report = _query_report(method, names, features, phi, scores, labels, top)
        if dataset.doc_ids is not None:
            _name_documents(report, dataset.doc_ids[lo:hi])
    report = {"query": query, "model": artifact.manifest.version, **report}
    if joined is not None:
        report["items"] = joined.summary(slice(lo, hi))
    if as_json:
        typer.echo(orjson.dumps(report).decode())
        return
    typer.echo(_pair_text(report) if pair is not None else _query_text(report))
    if joined is not None:
        typer.echo(f"items: {joined.text(slice(lo, hi))}")


def _query_rows(
    query_ids: np.ndarray, offsets: np.ndarray, query: str, data: Path
) -> tuple[int, int]:
    ids = query_ids.tolist()
    hits = [i for i, q in enumerate(ids) if str(q) == query]
    if not hits:
        raise CommandError(f"{data}: no query {query!r} ({_queries_text(ids)})")
    return int(offsets[hits[0]]), int(offsets[hits[0] + 1])


def _queries_text(ids: list[Any]) -> str:
    """The queries a --query may name, shortly: a typo'd qid or a 1-based guess at the number
    of a query without qid is then plain from the error."""
    n = len(ids)
    if ids == list(range(n)):
        return f"queries are 0..{n - 1}; data without qid numbers them from 0 in file order"
    shown = [clip(str(q)) for q in (ids if n <= 4 else [*ids[:3], "...", ids[-1]])]
    return f"{n} queries, qid {', '.join(shown)}"


def _pair(text: str, size: int, query: str, ids: list[str] | None) -> tuple[int, int]:
    """The two documents' 0-based rows: numbers in file order, or (data with a document id
    column) the ids `--query` shows; a number is a number even where ids look like one."""
    parts = text.split(",")
    try:
        a, b = (_document_number(p.strip(), ids) for p in parts)
    except ValueError:
        given = "two document numbers, e.g. 1,4" + (", or two of the query's ids" if ids else "")
        raise CommandError(f"--pair {text!r}: give {given}") from None
    for d in (a, b):
        if not 1 <= d <= size:
            raise CommandError(f"--pair: query {query} has documents 1..{size}, not {d}")
    if a == b:
        raise CommandError("--pair: give two different documents")
    return a - 1, b - 1


def _document_number(part: str, ids: list[str] | None) -> int:
    try:
        return int(part)
    except ValueError:
        if ids is not None and part in ids:
            return ids.index(part) + 1
        raise


def _value(x: float) -> float | str | None:
    return json_value(x, shortest=True)


def _ranks(scores: np.ndarray) -> np.ndarray:
    order = np.argsort(-scores, kind="stable")
    ranks = np.empty_like(order)
    ranks[order] = np.arange(1, order.size + 1)
    return ranks


def _label(labels: np.ndarray | None, i: int) -> float | None:
    return None if labels is None else float(labels[i])


def _pair_report(
    method: str,
    names: list[str],
    x: np.ndarray,
    phi: np.ndarray,
    scores: np.ndarray,
    labels: np.ndarray | None,
    a: int,
    b: int,
    top: int,
) -> dict[str, Any]:
    diff = phi[a, : len(names)] - phi[b, : len(names)]
    shown = largest(diff, top)
    total = float(scores[a] - scores[b])
    ranks = _ranks(scores)
    doc: dict[str, Any] = {"method": method}
    for label, i in (("a", a), ("b", b)):
        doc[label] = {
            "document": i + 1,
            "score": float(scores[i]),
            "rank": int(ranks[i]),
            "label": _label(labels, i),
        }
    doc["difference"] = total
    doc["features"] = [
        {
            "name": names[j],
            "value_a": _value(x[a, j]),
            "value_b": _value(x[b, j]),
            "contribution_a": float(phi[a, j]),
            "contribution_b": float(phi[b, j]),
            "difference": float(diff[j]),
        }
        for j in shown
    ]
    # The features not shown, and for networks the interactions occlusion does not split.
    doc["rest"] = total - float(diff[shown].sum())
    return doc


def _query_report(
    method: str,
    names: list[str],
    x: np.ndarray,
    phi: np.ndarray,
    scores: np.ndarray,
    labels: np.ndarray | None,
    top: int,
) -> dict[str, Any]:
    m = len(names)
    docs = []
    for rank, i in enumerate(np.argsort(-scores, kind="stable").tolist(), 1):
        shown = largest(phi[i, :m], top)
        docs.append(
            {
                "document": i + 1,
                "rank": rank,
                "label": _label(labels, i),
                "score": float(scores[i]),
                "features": [
                    {"name": names[j], "value": _value(x[i, j]), "contribution": float(phi[i, j])}
                    for j in shown
                ],
                # The features not shown, and for networks the interactions occlusion does not
                # split: without it the entry would not add up to the score.
                "rest": float(scores[i] - phi[i, m] - phi[i, shown].sum()),
            }
        )
    return {"method": method, "expected_value": float(phi[0, m]), "documents": docs}


def _name_documents(report: dict[str, Any], ids: np.ndarray) -> None:
    """Each document's id from the data's id column beside its number in file order: the id
    is what a request and the logs name an item by."""
    shown = report["documents"] if "documents" in report else [report["a"], report["b"]]
    for doc in shown:
        doc["id"] = str(ids[doc["document"] - 1])


def _doc_name(d: dict[str, Any]) -> str:
    return f"document {d['document']}" + (f" ({d['id']})" if "id" in d else "")


def _fmt(v: float | str | None) -> str:
    if isinstance(v, str):
        return "inf" if v == "Infinity" else "-inf"
    return "missing" if v is None else f"{v:.6g}"


def _pair_text(r: dict[str, Any]) -> str:
    a, b = r["a"], r["b"]

    def doc(d: dict[str, Any]) -> str:
        label = "" if d["label"] is None else f", label {d['label']:g}"
        return f"{_doc_name(d)} (score {d['score']:.6g}, rank {d['rank']}{label})"

    lines = [
        f"query {r['query']}: {doc(a)} vs {doc(b)}; {r['method']}",
        f"score difference {r['difference']:+.6g}, of which:",
        f"  {'feature':<24} {'value A':>12} {'value B':>12} {'contrib A':>11} "
        f"{'contrib B':>11} {'A - B':>11}",
    ]
    for f in r["features"]:
        lines.append(
            f"  {f['name']:<24} {_fmt(f['value_a']):>12} {_fmt(f['value_b']):>12} "
            f"{f['contribution_a']:>+11.5f} {f['contribution_b']:>+11.5f} {f['difference']:>+11.5f}"
        )
    lines.append(
        f"  {'(other features)':<24} {'':>12} {'':>12} {'':>11} {'':>11} {r['rest']:>+11.5f}"
    )
    return "\n".join(lines)


def _query_text(r: dict[str, Any]) -> str:
    lines = [f"query {r['query']} ({r['method']}; expected value {r['expected_value']:.6g})"]
    for d in r["documents"]:
        parts = [f"{f['name']}={_fmt(f['value'])} {f['contribution']:+.4f}" for f in d["features"]]
        # A document whose every contribution is 0 shows none: no stray separator before "other".
        feats = ", ".join([*parts, f"other features {d['rest']:+.4f}"])
        label = "" if d["label"] is None else f" (label {d['label']:g})"
        lines.append(f"  {d['rank']:>3}. {_doc_name(d):<13}{label} {d['score']:+.5f}  {feats}")
    return "\n".join(lines)


def _global(
    name: str,
    version: str,
    method: str,
    names: list[str],
    features: np.ndarray,
    phi: np.ndarray,
    out: Path,
    top: int,
    as_json: bool,
    items: dict[str, Any] | None,
) -> None:
    from trainer.explain.global_view import summarise
    from trainer.explain.html_report import render_page

    summary = summarise(method, names, features, phi, top=max(top, 20))
    try:
        out.write_text(render_page(f"Why {name} {version} ranks as it does", summary))
    except OSError as exc:
        raise CommandError(f"{out}: cannot write the report ({exc.strerror})") from None
    extra = {} if items is None else {"items": items}
    if as_json:
        typer.echo(orjson.dumps({"report": str(out), **summary, **extra}).decode())
        return
    typer.echo(f"{out}: {summary['rows']} rows, {method}")
    if items is not None:
        typer.echo(
            f"  items: {items['missing']} of {items['documents']} documents not in "
            f"{items['source']} (missing item features)"
        )
    for f in summary["features"][:top]:
        typer.echo(f"  {f['name']:<24} mean |contribution| {f['mean_abs']:.5g}")


def register(app: typer.Typer) -> None:
    app.command("explain")(explain_command)
