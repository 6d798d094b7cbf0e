"""How the service's processes start and stop: uvicorn's supervisor and server, four changes.

`uvicorn.run` is kept (its option handling, and the tests that stand in for it); `supervised()`
swaps in the classes below while it runs.

- The supervisor of several workers closes its copy of the listening socket as soon as it is
  told to stop. It held it until every worker had drained and exited; the workers had closed
  theirs, so the connections the kernel completed meanwhile waited in an accept queue nobody
  read and were reset when the supervisor exited: 4 resets on every SIGTERM under
  new-connection load. Before closing it, it has the shared socket refuse new handshakes
  (app.handshake_filter) and tells the workers to stop at once (not at its loop's next turn,
  up to 0.5 s later); each worker accepts what is queued before it closes its own copy
  (app.accept_loop), so the last one to close leaves nothing behind.
- A worker dies with the supervisor (PR_SET_PDEATHSIG: SIGTERM, a graceful stop): after a
  `kill -9` of the supervisor, orphan workers served the port for over a minute and a new
  server could not bind it.
- A worker started while the others serve (one replacing a dead worker, SIGHUP's restart, a
  SIGTTIN) is a replacement: its lifespan loads the models before uvicorn lets it accept
  (app.main), so it never answers 503 "no model loaded yet" while its siblings could answer.
- SIGHUP to a single worker (nothing restarts it: there is no supervisor) stops it as SIGTERM
  does, draining, with a log line; uvicorn's default left SIGHUP's default action, an
  immediate death with nothing logged. With several workers the supervisor restarts them.
- The supervisor's health check of its workers never blocks. uvicorn's pinged each worker in
  turn and waited for its answer up to `worker_healthcheck_timeout_seconds` (60 s): a worker
  killed while its ping was in flight (`kill -9`, the OOM killer; the supervisor holds both
  ends of the pipe, so it never reads an end-of-file) was replaced only a minute later, and a
  hung worker held up the replacement of every other dead one, and SIGTERM, as long. Here
  each turn of the supervisor's loop (0.5 s) replaces what has exited, reads the answers that
  have come, and sends the next pings; a worker is hung when a ping stays unanswered for the
  timeout.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import logging
import os
import signal
import sys
import time
from collections.abc import Generator, Iterator
from socket import socket
from types import FrameType

import uvicorn.supervisors.multiprocess as multiprocess
from uvicorn.config import STARTUP_FAILURE, Config
from uvicorn.server import Server

from app.handshake_filter import refuse_new_handshakes

log = logging.getLogger("uvicorn.error")
# The module `uvicorn.run` lives in (the package's own `uvicorn.main` is the CLI command).
uvicorn_main = importlib.import_module("uvicorn.main")

PR_SET_PDEATHSIG = 1  # linux/prctl.h
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

# In a worker process: whether it was started while its siblings were serving.
_replacement = False
# In the supervisor: whether the first workers have all been started.
_first_workers_started = False


def is_replacement() -> bool:
    """This process is a worker started while its siblings serve (see the module's doc)."""
    return _replacement


class StoppingServer(Server):
    """uvicorn's server, stopping on SIGHUP as on SIGTERM (a worker on its own has nobody to
    restart it; one under a supervisor is replaced)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        previous = signal.signal(signal.SIGHUP, self._hangup)
        try:
            with super().capture_signals():
                yield
        finally:
            signal.signal(signal.SIGHUP, previous)

    def _hangup(self, sig: int, frame: FrameType | None) -> None:
        log.warning("Received SIGHUP: stopping as on SIGTERM (answering the requests in flight)")
        # As SIGTERM, exit status included: SIGHUP itself would be raised again once stopped,
        # while this handler is still set, and be swallowed.
        self.handle_exit(signal.SIGTERM, frame)


class Worker(multiprocess.Process):
    """uvicorn's worker process, dying with its supervisor and knowing whether it is a
    replacement."""

    def __init__(self, config: Config, sockets: list[socket]) -> None:
        self.supervisor_pid = os.getpid()
        self.replacement = _first_workers_started
        self.ping_sent: float | None = None  # when the ping not answered yet went out
        super().__init__(config, sockets)

    def target(self, sockets: list[socket] | None = None) -> None:  # the worker's main
        global _replacement
        if not die_with_parent(self.supervisor_pid):
            return  # the supervisor is gone already: nothing to serve for
        _replacement = self.replacement
        super().target(sockets)

    @property
    def server(self) -> Server:
        if self._server is None:
            self._server = StoppingServer(config=self.config)
        return self._server

    def answering(self, now: float, timeout: float) -> bool:
        """Running, and its last ping answered or sent less than `timeout` seconds ago; sends
        the next ping once the last is answered. Never waits."""
        if not self.process.is_alive():
            return False
        try:
            if self.ping_sent is not None:
                if not self.parent_conn.poll():
                    return now - self.ping_sent < timeout
                # Its answer, whatever the uvicorn release sends, read as bytes: never
                # unpickled (the service unpickles nothing).
                self.parent_conn.recv_bytes()
            self.parent_conn.send(b"ping")
        except (OSError, EOFError):
            return False
        self.ping_sent = now
        return True


class Supervisor(multiprocess.Multiprocess):
    """uvicorn's supervisor, letting go of the listening socket when told to stop."""

    def __init__(self, config: Config, sockets: list[socket]) -> None:
        super().__init__(config, sockets)
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._stop_signal)

    def _stop_signal(self, sig: int, frame: FrameType | None) -> None:
        # At once, not at the main loop's next turn (up to 0.5 s): the workers may have been
        # signalled too (a process group's Ctrl-C) and be draining already. Nothing is
        # started after a stop, so the sockets are not needed again.
        for sock in self.sockets:
            if sock.fileno() != -1:
                refuse_new_handshakes(sock)
                sock.close()
        # Told now, they close their copies within a turn of their loops: new connections
        # wait for a SYN retry meanwhile. uvicorn's own SIGTERM follows; a second is harmless.
        for process in self.processes:
            if process.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGTERM)
        self.signal_queue.append(sig)

    def init_processes(self) -> None:
        global _first_workers_started
        super().init_processes()
        _first_workers_started = True

    def keep_subprocess_alive(self) -> None:
        """uvicorn's, with a check that never blocks (see the module's doc)."""
        if self.should_exit.is_set():
            return  # stopping: nothing is replaced
        now = time.monotonic()
        timeout = self.config.timeout_worker_healthcheck
        for idx, process in enumerate(self.processes):
            if isinstance(process, Worker):
                if process.answering(now, timeout):
                    continue
            elif process.is_alive(timeout):  # not started by supervised(): uvicorn's check
                continue
            if process.process.is_alive():
                log.error(
                    "Child process [%s] did not answer for %s s: killed", process.pid, timeout
                )
            process.kill()
            process.join()
            if process.exitcode == STARTUP_FAILURE:
                # It failed before serving (the app, TLS or the socket is broken): every
                # replacement would fail the same way, as uvicorn reasons.
                log.error("Child process [%s] failed to start, stopping the parent", process.pid)
                self.should_exit.set()
                return
            log.warning("Child process [%s] died%s", process.pid, death_cause(process.exitcode))
            replacement = Worker(self.config, self.sockets)
            replacement.start()
            self.processes[idx] = replacement


# What most often sends these to a worker, for the line that says it died (it said nothing).
_SIGNAL_CAUSES = {
    signal.SIGBUS: "a memory-mapped file lost its backing: a full filesystem under "
    "PROMETHEUS_MULTIPROC_DIR, or an item snapshot file changed in place (docs/OPERATIONS.md)",
    signal.SIGKILL: "the kernel's out-of-memory killer, or kill -9",
    signal.SIGSEGV: "a crash in native code",
}


def death_cause(exitcode: int | None) -> str:
    """How a worker's exit code reads in the line saying it died ("" for a clean exit)."""
    if not exitcode:
        return ""
    if exitcode > 0:
        return f" (exit code {exitcode})"
    try:
        sig = signal.Signals(-exitcode)
    except ValueError:
        return f" (signal {-exitcode})"
    cause = _SIGNAL_CAUSES.get(sig)
    return f" ({sig.name}: {cause})" if cause else f" ({sig.name})"


def die_with_parent(parent_pid: int) -> bool:
    """Have the kernel send this process SIGTERM when its parent exits (Linux); False if the
    parent has exited already."""
    if sys.platform == "linux":
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
            log.warning("prctl(PR_SET_PDEATHSIG) failed: errno %d", ctypes.get_errno())
    # Checked after the prctl: a parent that died before it would send nothing.
    return os.getppid() == parent_pid


@contextlib.contextmanager
def supervised() -> Iterator[None]:
    """While open, `uvicorn.run` serves with the classes above."""
    swaps = (
        (uvicorn_main, "Multiprocess", Supervisor),
        (uvicorn_main, "Server", StoppingServer),
        (multiprocess, "Process", Worker),  # what the supervisor starts
    )
    originals = [(module, name, getattr(module, name)) for module, name, _ in swaps]
    for module, name, ours in swaps:
        setattr(module, name, ours)
    try:
        yield
    finally:
        for module, name, original in originals:
            setattr(module, name, original)
