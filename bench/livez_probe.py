"""`GET /livez` every 20 ms for a while, from a process of its own; prints `ready` once set up,
waits for a line on stdin, probes, then prints the latencies (seconds; null for a failure) as
JSON. Standard library only: a probe that imported the benchmark's packages took 2.4 s of CPU
to start on a slow 2-core machine, twice per phase, and that start landed in the phase it was
measuring (bench_overload's goodput fell from ~70 to ~45 req/s at 3x overload with it).

    python bench/livez_probe.py URL SECONDS
"""

from __future__ import annotations

import http.client
import json
import sys
import time
from urllib.parse import urlsplit

INTERVAL_S = 0.02


def _connect(url: str) -> http.client.HTTPConnection:
    parts = urlsplit(url)
    return http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)


def main(url: str, seconds: float) -> None:
    conn = _connect(url)
    print("ready", flush=True)
    sys.stdin.readline()
    out: list[float | None] = []
    stop = time.perf_counter() + seconds
    while time.perf_counter() < stop:
        start = time.perf_counter()
        try:
            conn.request("GET", "/livez")
            response = conn.getresponse()
            response.read()
            ok = response.status == 200
        except (OSError, http.client.HTTPException):
            ok = False
            conn.close()
            conn = _connect(url)
        out.append(time.perf_counter() - start if ok else None)
        time.sleep(INTERVAL_S)
    sys.stdout.write(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]))
