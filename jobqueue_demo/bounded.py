"""Connections whose every wait for the server ends: on a deadline, or soon after Ctrl-C.

A blocking libmariadb call holds Python's signal handlers back until it returns, so a frozen
server (SIGSTOP, a dead network path) used to hang the CLI beyond Ctrl-C. Here a query is
sent, then its answer is awaited in select(), which a signal interrupts; only when the answer
has begun to arrive is the blocking read called, and the socket's read timeout bounds that.
A connection whose answer does not come is shut down, so that no later call on it blocks.
"""

from __future__ import annotations

import os
import select
import socket
import time

from MySQLdb import OperationalError
from MySQLdb.connections import Connection

from .mysql_errors import CR_SERVER_LOST

# After Ctrl-C or SIGTERM, the clean-up (rollbacks, dropping the scratch database) gets this
# long in all; a server that answers needs some 30-80 ms of it.
INTERRUPT_BUDGET_S = 0.6
# How often a wait looks at the clock; the select itself wakes on a signal at once.
SLICE_S = 0.25

_interrupted_at: float | None = None


def note_interrupt() -> None:
    """Called from the CLI's signal handler: from now on waits end within the budget."""
    global _interrupted_at
    if _interrupted_at is None:
        _interrupted_at = time.monotonic()


def interrupted() -> bool:
    return _interrupted_at is not None


def _time_left(deadline: float) -> float:
    if _interrupted_at is not None:
        deadline = min(deadline, _interrupted_at + INTERRUPT_BUDGET_S)
    return deadline - time.monotonic()


class BoundedConnection(Connection):
    """A MySQLdb connection whose query() waits at most `answer_timeout` seconds for an answer."""

    answer_timeout: float = 60.0

    def query(self, query) -> None:
        self.send_query(bytes(query))
        try:
            answered = wait_readable(self, time.monotonic() + self.answer_timeout)
        except KeyboardInterrupt:
            note_interrupt()
            self._resync_or_drop()
            raise
        if not answered:
            self.drop()
            raise OperationalError(
                CR_SERVER_LOST, f"the server did not answer within {self.answer_timeout:g} s"
            )
        self.read_query_result()

    def _resync_or_drop(self) -> None:
        """Read and discard the answer in flight if it comes within the budget, so the
        connection can still run the clean-up; otherwise make it fail fast from now on."""
        if not wait_readable(self, time.monotonic() + INTERRUPT_BUDGET_S):
            self.drop()
            return
        try:
            self.read_query_result()
            while True:
                self.store_result()
                if self.next_result() != 0:
                    break
        except OperationalError:
            self.drop()

    def drop(self) -> None:
        """Shut the socket down: the server sees the client gone, and every later call on
        this connection fails at once instead of waiting."""
        shutdown_socket(self)


def wait_readable(conn, deadline: float) -> bool:
    """True when `conn` has something to read before `deadline` (or the interrupt budget)."""
    while True:
        left = _time_left(deadline)
        if left <= 0:
            return False
        ready, _, _ = select.select([conn], [], [], min(left, SLICE_S))
        if ready:
            return True


def shutdown_socket(conn) -> None:
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
