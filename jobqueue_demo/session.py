"""One session's connection, driven asynchronously so a blocked statement never blocks us.

mysqlclient's send_query / read_query_result split lets one thread drive many connections:
send, then select() on the socket, then read. A second query on a connection whose result is
still pending would silently read the wrong result, so the pending state is tracked here.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass, field

from . import mysql_errors
from .result import Result, SqlError

NUM_FLAG = 32768


def result_from_connection(conn, started: float) -> Result:
    """Read the outcome of the statement just sent; server errors become part of the Result."""
    import MySQLdb

    try:
        conn.read_query_result()
        stored = conn.store_result()
    except MySQLdb.Error as e:
        return Result(error=_sql_error(conn, e), elapsed_ms=_ms_since(started))
    warnings = conn.warning_count()
    if stored is None:
        return Result(affected=conn.affected_rows(), warnings=warnings, elapsed_ms=_ms_since(started))
    described = stored.describe()
    flags = stored.field_flags()
    rows = tuple(tuple(_text(v) for v in row) for row in stored.fetch_row(0))
    return Result(
        columns=tuple(d[0] for d in described),
        numeric=tuple(bool(f & NUM_FLAG) for f in flags),
        rows=rows,
        warnings=warnings,
        elapsed_ms=_ms_since(started),
    )


def _sql_error(conn, exc) -> SqlError:
    errno = exc.args[0] if exc.args and isinstance(exc.args[0], int) else 0
    message = exc.args[1] if len(exc.args) > 1 else str(exc)
    try:
        state = conn.sqlstate() or "HY000"
    except Exception:  # a closed connection has no state to ask for
        state = "HY000"
    if errno in mysql_errors.LOST_CONNECTION and state == "00000":
        state = "HY000"
    return SqlError(errno, state, message)


def _text(value) -> str | None:
    if value is None or isinstance(value, str):
        return value
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return "0x" + value.hex().upper()


def _ms_since(started: float) -> float:
    return (time.perf_counter() - started) * 1000.0


@dataclass
class Session:
    """A named session and its connection; at most one statement in flight."""

    name: str
    conn: object
    thread_id: int
    pending_sql: str | None = None
    sent_at: float = 0.0
    closed: bool = False
    waiting: bool = field(default=False)

    @property
    def busy(self) -> bool:
        return self.pending_sql is not None

    def fileno(self) -> int:
        return self.conn.fileno()

    def send(self, sql: str) -> Result | None:
        """Send without waiting; a connection that is already gone answers at once."""
        import MySQLdb

        assert self.pending_sql is None, f"session {self.name} already has a statement in flight"
        self.sent_at = time.perf_counter()
        try:
            self.conn.send_query(sql.encode("utf-8"))
        except MySQLdb.Error as e:
            self.closed = True
            return Result(error=_sql_error(self.conn, e))
        self.pending_sql = sql
        return None

    def read(self) -> Result:
        result = result_from_connection(self.conn, self.sent_at)
        self.pending_sql = None
        self.waiting = False
        if result.error and result.error.errno in mysql_errors.LOST_CONNECTION:
            self.closed = True
        return result

    def drop_socket(self) -> None:
        """End the connection the way a crashed process does: no COM_QUIT, no ROLLBACK."""
        try:
            sock = socket.socket(fileno=os.dup(self.conn.fileno()))
        except OSError:
            self.closed = True
            return
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        sock.close()
        self.closed = True

    def close(self) -> None:
        try:
            self.conn.close()
        except Exception:  # already closed or dropped: nothing left to release
            pass
        self.closed = True
