"""The online loop over real processes: nightly installs a better model as an interleaving
candidate, simulated users click through the running service, `decide` promotes it; a worse
candidate is then rolled back (bench/interleaving_loop.py; 1,500 impressions per experiment,
where smaller runs were not always significant with a random salt and request ids)."""

from __future__ import annotations

from bench.interleaving_loop import run


def test_better_candidate_is_promoted_and_worse_rolled_back() -> None:
    out = run(rows=30_000, impressions=1500, min_impressions=300, seed=3)
    assert out["nightly"]["status"] == "candidate" and out["nightly"]["gate"]["passed"]
    better = out["better_decision"]
    assert better["action"] == "promote", (better, out["better_session"])
    worse = out["worse_decision"]
    assert worse["action"] == "rollback", out
    assert out["served_after"] == out["strong"]
    assert out["better_session"]["versions"] == {out["weak"]: 1500}  # interleaved under CURRENT
    # Every scored answer is logged and credited; a shed one (over its budget on a loaded
    # machine) is served in retrieval order, outside the experiment.
    worse_session = out["worse_session"]
    assert worse_session["scored"] >= 1450, worse_session
    assert out["worse_report"]["impressions"] == worse_session["scored"], out
