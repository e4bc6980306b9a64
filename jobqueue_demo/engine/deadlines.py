"""Every wait for a server ends: on a deadline, or soon after Ctrl-C. Engine-neutral: the
MySQL connections of bounded.py and PostgreSQL's (postgresql/session.py) wait through `wait_readable`.

A wait is select() on the connection's socket, which a signal interrupts; after Ctrl-C or
SIGTERM (`note_interrupt`) every answer the clean-up waits for gets a short grace, and the
first that does not come ends all waiting: the server is taken to be gone. The same holds
once a statement of the tool's own went unanswered for its whole timeout (`note_silence`):
the run ends with that error, and the other connections (explore's other threads, the
clean-up) must not each wait a timeout of their own on the same silent server.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
import time
from collections.abc import Iterator

# After Ctrl-C or SIGTERM each answer the clean-up waits for (a rollback, dropping the
# scratch database) gets this long; a server that answers needs a few ms. The first answer
# that does not come ends all waiting: the server is taken to be gone.
INTERRUPT_GRACE_S = 0.4
# How often a wait looks at the clock; the select itself wakes on a signal at once.
SLICE_S = 0.25

_interrupted_at: float | None = None
_gave_up = False


def note_interrupt() -> None:
    """Called from the CLI's signal handler: from now on, in this process, waits are short.

    Process-wide on purpose: the CLI is about to exit. A library caller that catches
    KeyboardInterrupt and goes on never calls this.
    """
    global _interrupted_at
    if _interrupted_at is None:
        _interrupted_at = time.monotonic()


_cleanups = 0  # uninterrupted() blocks the main thread is in
_deferred: BaseException | None = None


@contextlib.contextmanager
def uninterrupted() -> Iterator[None]:
    """A clean-up that a stop signal must not cut in two: DROP DATABASE done and DROP ROLE not,
    a run directory half removed with its owner marker gone (no sweep would know it as a run's).
    A stop signal that comes inside (`defer`) is raised as the outermost block ends, its waits
    bounded meanwhile by note_interrupt. Only the main thread's count: signals interrupt no
    other, and a stop deferred for a thread would be raised in that thread."""
    global _cleanups, _deferred
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _cleanups += 1
    try:
        yield
    finally:
        _cleanups -= 1
    if _cleanups == 0 and _deferred is not None:
        stop, _deferred = _deferred, None
        raise stop


def defer(stop: BaseException) -> bool:
    """Called from the CLI's signal handler: whether `stop` waits for the clean-up the main
    thread is in (raised at its end) rather than being raised at once."""
    global _deferred
    if _cleanups == 0:
        return False
    _deferred = stop
    return True


def note_silence() -> None:
    """A statement of the tool's own got no answer within its timeout: the server is taken to
    be gone, and from now on, in this process, every wait is short, as after an interrupt."""
    note_interrupt()


def _time_left(started: float, deadline: float, grace: float) -> float:
    if _interrupted_at is not None:
        if _gave_up:
            return 0.0
        deadline = min(deadline, max(started, _interrupted_at) + grace)
    return deadline - time.monotonic()


def wait_readable(conn, deadline: float) -> bool:
    """True when `conn` has something to read before `deadline` (or the interrupt grace)."""
    global _gave_up
    started = time.monotonic()
    grace = getattr(conn, "interrupt_grace", INTERRUPT_GRACE_S)
    while True:
        left = _time_left(started, deadline, grace)
        if left <= 0:
            _gave_up = _interrupted_at is not None
            return False
        ready, _, _ = select.select([conn], [], [], min(left, SLICE_S))
        if ready:
            return True


def wait_for_thread(thread, deadline: float) -> bool:
    """True when `thread` ended before `deadline` (or the interrupt grace). A thread's join,
    unlike select(), is not cut short by a signal handled on another thread."""
    global _gave_up
    started = time.monotonic()
    while thread.is_alive():
        left = _time_left(started, deadline, INTERRUPT_GRACE_S)
        if left <= 0:
            _gave_up = _interrupted_at is not None
            return False
        thread.join(min(left, SLICE_S))
    return True


def shutdown_socket(conn) -> None:
    import socket  # 1.5 ms of start-up that only a dropped connection needs

    try:
        sock = socket.socket(fileno=os.dup(conn.fileno()))
    except Exception:  # already closed: nothing to shut
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        sock.close()
