"""A user's first run: `make run` on a fresh clone with an empty pip cache, until `/readyz`
answers 200 (install, demo training with an empty numba cache, server start).

    python -m bench.bench_first_run [REF ...]   # git refs to compare, default HEAD

Each ref is cloned from this repository into a temporary directory and run with its own
empty pip cache, one after the other; the phases come from `make run`'s own output lines.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from tests.support.redis_server import free_port

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "first_run.md"
TIMEOUT_S = 900.0
MARKS = {
    "install done": "== serving",
    "demo trained": "published demo/",
}


def first_run(ref: str) -> dict[str, float]:
    """Seconds from `make run` to each mark and to /readyz 200."""
    work = Path(tempfile.mkdtemp(prefix="ltr-first-run-"))
    try:
        clone = work / "clone"
        subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
        subprocess.run(["git", "-C", str(clone), "checkout", "-q", ref], check=True)
        port = free_port()
        env = {**os.environ, "PIP_CACHE_DIR": str(work / "pip-cache")}
        env.pop("PYTHONPATH", None)
        started = time.monotonic()
        proc = subprocess.Popen(
            ["make", "run", f"PORT={port}"],
            cwd=clone,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        out: dict[str, float] = {}
        lines: list[str] = []
        try:
            assert proc.stdout is not None
            os.set_blocking(proc.stdout.fileno(), False)
            buffer = b""
            while time.monotonic() - started < TIMEOUT_S:
                chunk = proc.stdout.read() or b""
                buffer += chunk
                *done, buffer = buffer.split(b"\n")
                for raw in done:
                    line = raw.decode(errors="replace")
                    lines.append(line)
                    for name, mark in MARKS.items():
                        if mark in line and name not in out:
                            out[name] = time.monotonic() - started
                if proc.poll() is not None:
                    raise RuntimeError(f"make run exited: {' | '.join(lines[-5:])}")
                try:
                    ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1.0)
                    if ready.status_code == 200:
                        out["/readyz 200"] = time.monotonic() - started
                        return out
                except httpx.HTTPError:
                    pass
                time.sleep(0.25)
            raise TimeoutError(f"{ref}: no /readyz 200 within {TIMEOUT_S:.0f} s")
        finally:
            os.killpg(proc.pid, 15)
            proc.wait(timeout=30)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("refs", nargs="*", default=["HEAD"])
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    runs = {}
    for ref in args.refs:
        sha = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", ref],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        runs[f"{ref} ({sha})"] = first_run(ref)
        print(ref, runs[f"{ref} ({sha})"], flush=True)
    lines = [
        "## First run: `make run` on a fresh clone",
        "",
        f"`python -m bench.bench_first_run {' '.join(args.refs)}`, "
        f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC; Linux x86_64, 2 cores, Python "
        f"{sys.version.split()[0]}; load average {load_before:.1f} before, "
        f"{os.getloadavg()[0]:.1f} after. Each ref cloned afresh, empty pip cache (downloads "
        "from PyPI: network speed counts), empty numba cache; seconds from `make run` to "
        "each of its output marks. Target: `/readyz` 200 within 90 s.",
        "",
        "| ref | install done | demo trained | /readyz 200 |",
        "|---|---:|---:|---:|",
    ]
    for name, run in runs.items():
        cells = [f"{run[k]:.0f}" if k in run else "-" for k in (*MARKS, "/readyz 200")]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    RESULTS.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
