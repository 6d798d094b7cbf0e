"""What one answer costs the server's CPU, by kind, for the overload benchmark's requests.

`python -m bench.bench_shed_cost [--quick]` → bench/results/shed_cost.md

Goodput at 3x the sustainable rate (bench_overload) depends on how much of the worker's CPU
answering the requests it cannot score takes: at 3x, two requests in three are answered
unscored. Goodput itself varies by tens of percent from one run to the next on a shared 2-core
VM; CPU seconds per answer vary by a few, so a change to the shed path shows here first.

One worker (`ltr serve`, bench_overload's model: 500 trees x 63 leaves, 136 features), 1,000
candidates per request (954 KB of JSON), open-loop arrivals, kinds alternating round by round:

- scored: POST /rerank at a rate the worker sustains, every answer scored;
- shed: the same with `x-request-timeout-ms: 1`, refused at admission and answered in
  retrieval order (the body read, outlined, its ids found, the answer written);
- floor: the same body POSTed to a path the service does not have, read by the service
  middleware and answered 404: what reading 954 KB and answering through the HTTP stack costs,
  whatever is then done with it.

CPU: user + system seconds of the server process during the phase, less its idle CPU over
as long (timers, probes), per answer.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import uvloop

from bench import bench_overload as overload
from bench.bench_service import N_FEATURES, _write

RESULTS = Path(__file__).parent / "results" / "shed_cost.md"
# (kind, path, extra header, open-loop rate): rates one worker answers without queueing.
KINDS = [
    ("scored", b"POST /rerank", b"", 60.0),
    ("shed", b"POST /rerank", b"x-request-timeout-ms: 1\r\n", 300.0),
    ("floor", b"POST /no-such-route", b"", 300.0),
]


def _request(port: int, body: bytes, path: bytes, header: bytes) -> bytes:
    plain = overload._rerank_request(port, body)
    return plain.replace(b"POST /rerank", path, 1).replace(
        b"content-type:", header + b"content-type:", 1
    )


async def _phase(
    port: int, pid: int, request: bytes, rate: float, seconds: float
) -> tuple[float, int, set[int]]:
    """(server CPU seconds, answers, statuses) of an open loop sending `request`."""
    before = overload.cpu_seconds(pid)
    answers = await overload.open_loop(port, b"", rate, seconds, request=request)
    return overload.cpu_seconds(pid) - before, len(answers), {a.status for a in answers}


async def measure(rounds: int, seconds: float) -> tuple[dict[str, list[float]], float]:
    """CPU ms per answer of each kind, one value per round; and the idle CPU (cores)."""
    root = Path(tempfile.mkdtemp(prefix="ltr-bench-shed-cost-"))
    plain, _ = overload.model("lightgbm")
    _write(root, "plain", plain, [f"f{i}" for i in range(N_FEATURES)], None, {})
    body = overload.request_body(overload.N_CANDIDATES)
    server = overload.serve(root, 1)
    assert server.proc is not None
    pid = server.proc.pid
    try:
        await overload.open_loop(server.port, body, 20.0, 3.0)  # warm
        before = overload.cpu_seconds(pid)
        await asyncio.sleep(seconds)
        idle = (overload.cpu_seconds(pid) - before) / seconds
        costs: dict[str, list[float]] = {kind: [] for kind, *_ in KINDS}
        for _ in range(rounds):
            for kind, path, header, rate in KINDS:
                request = _request(server.port, body, path, header)
                used, n, statuses = await _phase(server.port, pid, request, rate, seconds)
                expected = {"scored": {200}, "shed": {200}, "floor": {404}}[kind]
                assert statuses == expected, (kind, statuses)
                costs[kind].append(1000 * (used - idle * seconds) / n)
                await overload.settled(server.port)
    finally:
        server.stop()
    return costs, idle


def render(costs: dict[str, list[float]], idle: float, rounds: int, seconds: float) -> str:
    load = os.getloadavg()[0]
    median = {kind: float(np.median(v)) for kind, v in costs.items()}
    share = median["shed"] / median["scored"]
    lines = [
        "## Overload: CPU per answer, by kind",
        "",
        f"`python -m bench.bench_shed_cost`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. "
        f"Machine: {overload.machine()}; load average {load:.1f} at the end. One worker, "
        f"1,000 candidates per request (954 KB), {rounds} rounds of {seconds:g} s per kind, "
        f"kinds alternating; idle CPU {idle:.3f} cores subtracted.",
        "",
        "| answer | server CPU per answer, ms: median (min-max of the rounds) |",
        "|---|---|",
    ]
    described = {
        "scored": "scored (POST /rerank)",
        "shed": "shed at admission, answered in retrieval order (`x-request-timeout-ms: 1`)",
        "floor": "the same body to an unknown path: read, then 404 (the HTTP stack's floor)",
    }
    for kind, values in costs.items():
        lines.append(
            f"| {described[kind]} | {median[kind]:.3f} ({min(values):.3f}-{max(values):.3f}) |"
        )
    lines += [
        "",
        f"A shed answer costs {share:.2f} of a scored one; at 3x the sustainable rate, answering "
        f"the two requests in three that are not scored takes {2 * share:.0%} of the CPU that "
        f"the sustainable rate's scoring uses. Of a shed answer, "
        f"{median['floor'] / median['shed']:.0%} is what reading the body and answering through "
        "the HTTP stack costs whatever the service does with it (the floor row).",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    rounds, seconds = (2, 4.0) if args.quick else (4, 8.0)
    costs, idle = uvloop.run(measure(rounds, seconds))
    report = render(costs, idle, rounds, seconds)
    RESULTS.write_text(report)
    print(report)


if __name__ == "__main__":
    main()
