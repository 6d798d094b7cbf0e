"""Valid /rerank bodies with a few parts broken, against a real server: never a 5xx.

tests/app/api/test_errors.py throws junk at the app in-process; this starts from bodies that
work (a plain model, and one whose features come from the query and an item store, so the
compiled body scan, the id-only form and the store lookup all run) and breaks one to three
places in them: a value replaced by an odd one (huge integers, 1e308, nested containers, long
strings), a key removed or added, a list grown, the bytes cut or spliced, over real sockets
through uvicorn and the service's own HTTP protocol, with and without a latency budget small
enough that the request is shed (the shed path reads ids from raw bytes on its own).
"""

from __future__ import annotations

import copy
import json
import socket
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import random_ensemble
from tests.support.sourced_model import item_table, publish_sourced
from tests.support.uvicorn_server import UvicornServer

NAMES = [f"f{i}" for i in range(12)]
SOURCES: dict[str, Any] = {"f8": "query", "f9": "item", "f10": "item", "f11": "item"}
ITEMS = 40
MAX_CANDIDATES = 30

ODD: list[Any] = [
    None,
    True,
    0,
    -0.0,
    2**63,
    2**70,
    1e308,
    1e-320,
    "",
    "5",
    "NaN",
    "é",
    [],
    {},
    [1],
    {"a": 1},
    "x" * 300,
    -1,
    3.5e38,
]


@pytest.fixture(scope="module")
def port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    registry = tmp_path_factory.mktemp("mutations")
    publish_sourced(registry, random_ensemble(12, 10, 3, seed=1), {}, None, name="plain")
    table = item_table(ITEMS, ["f9", "f10", "f11"])
    ensemble = random_ensemble(12, 10, 3, seed=2)
    publish_sourced(registry, ensemble, SOURCES, table, name="items", feature_names=NAMES)
    server = UvicornServer(
        {
            "LTR_REGISTRY": str(registry),
            "LTR_RELOAD_POLL_SECONDS": "0",
            "LTR_MAX_CANDIDATES": str(MAX_CANDIDATES),
        }
    ).start()
    try:
        server.wait_ready()
        yield server.port
    finally:
        server.stop()


def _value() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.floats(-5, 5).map(lambda v: round(v, 4)),
        st.floats(allow_nan=False, allow_infinity=False),
        st.none(),
    )


@st.composite
def valid_bodies(draw: st.DrawFn) -> dict[str, Any]:
    model = draw(st.sampled_from(["plain", "items"]))
    n_sent = 8 if model == "items" else 12
    ids = draw(st.lists(st.integers(0, ITEMS - 1), min_size=1, max_size=12, unique=True))
    candidates = []
    for i in ids:
        candidate: dict[str, Any] = {"id": f"d{i}" if model == "items" else i}
        if model == "plain" or draw(st.booleans()):
            values = draw(st.lists(_value(), min_size=n_sent, max_size=n_sent))
            as_map = draw(st.booleans())
            candidate["features"] = dict(zip(NAMES, values, strict=False)) if as_map else values
        candidates.append(candidate)
    body: dict[str, Any] = {"model": model, "candidates": candidates}
    if model == "items":
        body["query"] = {"features": {"f8": draw(_value())}}
    if draw(st.booleans()):
        body["top_k"] = draw(st.integers(1, 20))
    if draw(st.booleans()):
        body["user"] = {"id": "u1", "profile": {"country": "US"}}
    if draw(st.integers(0, 4)) == 0:
        body["explain"] = True
    return body


def _places(doc: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if at:
        yield at
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield from _places(value, (*at, key))
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            yield from _places(value, (*at, index))


@st.composite
def broken_bodies(draw: st.DrawFn) -> bytes:
    body = draw(valid_bodies())
    for _ in range(draw(st.integers(1, 3))):
        places = list(_places(body))
        if not places:  # earlier steps dropped every key: `{}` is broken enough
            break
        place = draw(st.sampled_from(places))
        parent = body
        for key in place[:-1]:
            parent = parent[key]
        # A copy: ODD's lists and maps are shared, and a later step may append to one (even to
        # itself, a cycle no JSON has) in this example or the next.
        odd = copy.deepcopy(draw(st.sampled_from(ODD)))
        how = draw(st.sampled_from(["replace", "drop", "add"]))
        if how == "replace":
            parent[place[-1]] = odd
        elif how == "drop" and isinstance(parent, dict):
            parent.pop(place[-1])
        elif isinstance(parent, dict):
            parent[draw(st.sampled_from(["id", "features", "extra", "f1", "é"]))] = odd
        else:
            parent.append(odd)
    raw = json.dumps(body, ensure_ascii=draw(st.booleans())).encode()
    if draw(st.integers(0, 9)) == 0:  # the bytes themselves
        cut = draw(st.integers(0, len(raw)))
        splice = draw(st.sampled_from([b"", b"}", b",", b"\x00", b"\xff", b'"', b"1e999"]))
        raw = raw[:cut] + splice + raw[cut + 1 :]
    return raw


def _post(port: int, raw: bytes, budget_ms: int | None) -> tuple[int, bytes]:
    """(status, body), the answer read by its Content-Length (the connection stays open: a
    half-closed one reads as a client gone, whose request the server may drop)."""
    head = b"POST /rerank HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\n"
    if budget_ms is not None:
        head += b"x-request-timeout-ms: %d\r\n" % budget_ms
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head + b"content-length: %d\r\n\r\n" % len(raw) + raw)
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = sock.recv(1 << 16)
            assert chunk, f"connection closed without an answer: {answer!r}"
            answer += chunk
        head_bytes, _, body = answer.partition(b"\r\n\r\n")
        lines = head_bytes.split(b"\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in lines
            if line.lower().startswith(b"content-length:")
        )
        while len(body) < length:
            chunk = sock.recv(1 << 16)
            assert chunk, "connection closed mid-answer"
            body += chunk
    return int(lines[0].split()[1]), body


@pytest.mark.slow
@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(raw=broken_bodies(), budget_ms=st.sampled_from([None, None, 1]))
def test_broken_bodies_never_give_a_5xx(port: int, raw: bytes, budget_ms: int | None) -> None:
    status, answer = _post(port, raw, budget_ms)
    assert status < 500, (status, answer[:300])
    orjson.loads(answer)


def test_the_unbroken_bodies_are_served(port: int) -> None:
    """The generator's starting point works, so the test above breaks something real."""
    body = {
        "model": "items",
        "candidates": [{"id": "d1"}, {"id": "d2", "features": [0.5] * 8}],
        "query": {"features": {"f8": 1.0}},
    }
    status, answer = _post(port, orjson.dumps(body), None)
    assert status == 200, answer
    assert [r["id"] for r in orjson.loads(answer)["results"]] != []


def test_a_tiny_budget_is_shed_not_failed(port: int) -> None:
    """A 1 ms budget is shed or, when admission has learned that five rows take less (after
    the generated bodies above, it may), scored within it: an answer either way."""
    body = {"model": "plain", "candidates": [{"id": i, "features": [0.1] * 12} for i in range(5)]}
    status, answer = _post(port, orjson.dumps(body), 1)
    assert status == 200
    doc = orjson.loads(answer)
    assert [r["id"] for r in doc["results"]] != []
    if doc.get("degraded"):
        assert set(doc["reasons"]) <= {"shed", "over_budget"}, doc["reasons"]
        assert [r["id"] for r in doc["results"]] == list(range(5))  # the order they came in
    else:
        assert all(r["score"] is not None for r in doc["results"])
