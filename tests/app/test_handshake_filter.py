"""app.handshake_filter: a listening socket that refuses new handshakes keeps the ones made."""

from __future__ import annotations

import socket
import sys
import threading
import time

import pytest

from app.handshake_filter import refuse_new_handshakes

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="a Linux socket filter")


@pytest.mark.parametrize(
    ("family", "host"), [(socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")]
)
def test_new_connections_wait_and_made_ones_work(family: socket.AddressFamily, host: str) -> None:
    with socket.create_server((host, 0), family=family, backlog=16) as listener:
        port = listener.getsockname()[1]
        made = socket.create_connection((host, port), timeout=5)
        made.sendall(b"sent before")
        assert refuse_new_handshakes(listener)
        with pytest.raises(TimeoutError):  # its SYN dropped: no handshake
            socket.create_connection((host, port), timeout=0.3).close()
        accepted, _ = listener.accept()  # the one already queued is still taken in
        with made, accepted:
            assert accepted.recv(64) == b"sent before"
            accepted.sendall(b"x" * 200_000)  # ACKs and data pass the inherited filter
            received = 0
            while received < 200_000:
                received += len(made.recv(65536))


def test_a_client_whose_syn_was_dropped_is_refused_once_the_socket_closes() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    assert refuse_new_handshakes(listener)
    outcome: list[str] = []

    def connect() -> None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
            outcome.append("connected")
        except ConnectionRefusedError:
            outcome.append("refused")
        except TimeoutError:
            outcome.append("timeout")

    client = threading.Thread(target=connect)
    client.start()
    time.sleep(0.2)
    listener.close()
    client.join()
    assert outcome == ["refused"]  # its SYN retried (1 s), to a closed port


def test_other_sockets_are_left_alone() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        assert not refuse_new_handshakes(udp)
