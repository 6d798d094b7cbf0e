"""What a publish (or rollback) tells the operator when the new version takes other features.

Clients send only the `candidate` features (with each candidate) and the `query` ones (once
per request); the service fills `item` and `user` features itself (docs/API.md, "Feature
sources"). So only a change in what clients send breaks them, each source on its own: a
held-out trial was warned of 422s for feature lists when two item features went, while the
lists it sent (two candidate features, unchanged) kept getting 200.
"""

from __future__ import annotations

from app.artifacts.manifest import Manifest

_IGNORE = "unless the service sets LTR_IGNORE_UNKNOWN_FEATURES"
_SHOWN = 5  # names listed per change


def feature_change_warnings(old: Manifest, new: Manifest) -> list[str]:
    """A warning per source clients send whose features differ in `new` from `old`; else, when
    only features the service fills changed, one note saying clients are not affected."""
    if list(old.feature_names) == list(new.feature_names):
        return []
    head = f"{new.name} {new.version} takes other"
    found = []
    for source, before, after in (
        ("candidate", old.candidate_feature_names, new.candidate_feature_names),
        ("query", old.names_from("query"), new.names_from("query")),
    ):
        if before != after:
            found.append(
                f"warning: {head} {source} features than {old.version} "
                f"{_change(before, after)}; {_effects(source, before, after)}"
            )
    if old.has_sources and not new.has_sources:
        found.append(
            f"warning: {head} features than {old.version}: it takes no query or item features, "
            "so candidates sent without `features` (an id alone) will get 422"
        )
    if found:
        return found
    filled = [s for s in ("item", "user") if old.names_from(s) != new.names_from(s)]
    what = f"{' and '.join(filled)} features" if filled else "feature column order"
    change = _change(old.feature_names, new.feature_names)
    return [
        f"note: {head} {what} than {old.version} {change}; the service fills those in, and "
        "the candidate and query features clients send are unchanged"
    ]


def _effects(source: str, before: list[str], after: list[str]) -> str:
    """What clients sending `source` features made for `before` will get with `after`."""
    gone, added = _diff(before, after)
    if len(before) != len(after):
        effects = [f"clients sending {source} feature lists will get 422"]
    else:  # accepted, and read in the new order
        effects = [
            f"{source} feature lists are read in the new order without an error (lists in "
            "the old order score other features)"
        ]
    if gone:
        effects.append(f"{source} name maps with removed names will get 422 ({_IGNORE})")
    if added:
        effects.append(f"{source} name maps without the added names will score them as missing")
    return "; ".join(effects)


def _change(before: list[str], after: list[str]) -> str:
    """`(8 -> 6: 0 added, 2 removed: a, b)`."""
    gone, added = _diff(before, after)
    if not gone and not added:
        return f"({len(before)} -> {len(after)}: reordered)"
    named = [*(f"+{n}" for n in added), *(f"-{n}" for n in gone)]
    shown = ", ".join(named[:_SHOWN]) + (", ..." if len(named) > _SHOWN else "")
    return f"({len(before)} -> {len(after)}: {len(added)} added, {len(gone)} removed: {shown})"


def _diff(before: list[str], after: list[str]) -> tuple[list[str], list[str]]:
    """The names removed and the names added."""
    now, then = set(after), set(before)
    return [n for n in before if n not in now], [n for n in after if n not in then]
