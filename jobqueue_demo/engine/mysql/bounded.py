"""Connections whose every wait for the server ends: on a deadline, or soon after Ctrl-C.

A blocking libmariadb call holds Python's signal handlers back until it returns, so a frozen
server (SIGSTOP, a dead network path) used to hang the CLI beyond Ctrl-C. Here a query is
sent, then its answer is awaited in select(), which a signal interrupts; only when the answer
has begun to arrive is the blocking read called, and the socket's read timeout bounds that.
A connection whose answer does not come is shut down, so that no later call on it blocks.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Iterator

from MySQLdb import OperationalError
from MySQLdb.connections import Connection

from ..deadlines import INTERRUPT_GRACE_S, note_silence, shutdown_socket, wait_for_thread, wait_readable
from .errors import CR_SERVER_LOST


@contextlib.contextmanager
def server_bounded(conn, seconds: float) -> Iterator[None]:
    """A statement the server itself ends within `seconds` (a DROP under a short
    lock_wait_timeout) keeps that long after an interrupt: a server busy waiting for a lock
    is not a gone one. Unless an earlier answer already failed to come."""
    conn.interrupt_grace = seconds + INTERRUPT_GRACE_S
    try:
        yield
    finally:
        conn.interrupt_grace = INTERRUPT_GRACE_S


class BoundedConnection(Connection):
    """A MySQLdb connection whose query() waits at most `answer_timeout` seconds for an answer."""

    answer_timeout: float = 60.0
    interrupt_grace: float = INTERRUPT_GRACE_S
    # Why the connection was dropped; every later query fails with it, naming the cause.
    dropped: str | None = None

    def query(self, query) -> None:
        if self.dropped is not None:
            raise OperationalError(CR_SERVER_LOST, self.dropped)
        # As MySQLdb's own query(): the GIL is released while sending, so no mutable buffer.
        self.send_query(bytes(query) if isinstance(query, bytearray) else query)
        try:
            answered = wait_readable(self, time.monotonic() + self.answer_timeout)
        except KeyboardInterrupt:
            self._resync_or_drop()
            raise
        if not answered:
            self.drop(f"the server did not answer within {self.answer_timeout:g} s")
            note_silence()
            raise OperationalError(CR_SERVER_LOST, self.dropped)
        self.read_query_result()

    def _resync_or_drop(self) -> None:
        """Read and discard the answer in flight if it comes within the budget, so the
        connection can still run the clean-up; otherwise make it fail fast from now on."""
        if not wait_readable(self, time.monotonic() + INTERRUPT_GRACE_S):
            self.drop("the server did not answer after the interrupt")
            return
        try:
            self.read_query_result()
            while True:
                self.store_result()
                if self.next_result() != 0:
                    break
        except OperationalError as e:
            self.drop(str(e.args[-1]))

    def drop(self, reason: str) -> None:
        """Shut the socket down: the server sees the client gone, and every later call on
        this connection fails at once instead of waiting."""
        self.dropped = reason
        shutdown_socket(self)


def open_connection(options: dict) -> BoundedConnection:
    """Connect from a helper thread: libmariadb's connect would hold Ctrl-C back for up to
    its connect_timeout, while waiting for a thread is interrupted at once."""
    outcome: dict = {}

    def attempt() -> None:
        try:
            outcome["conn"] = BoundedConnection(**options)
        except BaseException as e:  # handed to the caller's thread, which raises it
            outcome["error"] = e

    # A daemon: after Ctrl-C nobody waits for a connect that will only time out.
    helper = threading.Thread(target=attempt, name="connect", daemon=True)
    helper.start()
    if not wait_for_thread(helper, time.monotonic() + options["connect_timeout"]):
        note_silence()
        raise OperationalError(CR_SERVER_LOST, f"the server did not answer within {options['connect_timeout']:g} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["conn"]
