"""One PostgreSQL session's connection, driven asynchronously so a blocked statement never blocks us.

libpq's asynchronous calls do what mysqlclient's send_query / read_query_result do for
MySQL: `send_query` (the simple query protocol, so one step may hold several statements),
then select() on the socket, then `consume_input` / `get_result` until the statement's
results are all in. psycopg's Connection only opens the connection; its `pgconn` is driven
here directly, and values stay in the server's text form.
"""

from __future__ import annotations

import os
import select
import socket
import time
from dataclasses import dataclass

from ..errors import FetchTimeout, ServerError
from .pg_errors import CONNECTION_FAILURE, LOST_CONNECTION
from .result import PgError, Result
from .session import MAX_ROWS_KEPT, Session

# Types psql right-aligns: int2, int4, int8, oid, float4, float8, numeric, money.
NUMERIC_OIDS = frozenset({21, 23, 20, 26, 700, 701, 1700, 790})


def _error(pgconn, result=None) -> PgError:
    """The error of a failed result, or of a connection gone under libpq (no SQLSTATE: 08006)."""
    from psycopg.pq import DiagnosticField

    if result is not None and result.error_field(DiagnosticField.SQLSTATE):
        def field(which) -> str:
            return (result.error_field(which) or b"").decode("utf-8", "replace")

        return PgError(0, field(DiagnosticField.SQLSTATE), field(DiagnosticField.MESSAGE_PRIMARY),
                       field(DiagnosticField.SEVERITY_NONLOCALIZED) or "ERROR")
    text = (result.error_message if result is not None else pgconn.error_message) or b"connection lost"
    # libpq's own text: the server's last word (a FATAL from pg_terminate_backend) first, then
    # its account of the closed socket; the first line is what psql shows first too.
    first = text.decode("utf-8", "replace").strip().splitlines()[0]
    severity, sep, message = first.partition(":  ")
    if not sep or severity not in ("FATAL", "ERROR", "PANIC"):
        severity, message = "FATAL", first
    return PgError(0, CONNECTION_FAILURE, message.strip(), severity)


def _outcome(pgconn, result, started: float) -> Result:
    from psycopg.pq import ExecStatus

    elapsed = (time.perf_counter() - started) * 1000.0
    status = result.status
    if status == ExecStatus.TUPLES_OK:
        kept = min(result.ntuples, MAX_ROWS_KEPT)
        return Result(
            columns=tuple(result.fname(c).decode() for c in range(result.nfields)),
            numeric=tuple(result.ftype(c) in NUMERIC_OIDS for c in range(result.nfields)),
            rows=tuple(tuple(_text(result.get_value(r, c)) for c in range(result.nfields)) for r in range(kept)),
            omitted=result.ntuples - kept,
            elapsed_ms=elapsed,
        )
    if status in (ExecStatus.COMMAND_OK, ExecStatus.EMPTY_QUERY):
        # PostgreSQL counts the rows an UPDATE matched, changed or not: affected and matched are one.
        count = int(result.command_tuples) if result.command_tuples else None
        return Result(affected=count if count is not None else 0, elapsed_ms=elapsed, matched=count)
    return Result(error=_error(pgconn, result), elapsed_ms=elapsed)


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("utf-8", "replace")


def collect(pgconn, started: float, timeout: float = float("inf")) -> Result:
    """Every result of the statement sent, as one Result: the first error, else the last result.

    A statement that sends no complete answer within `timeout` raises FetchTimeout.
    """
    import psycopg

    deadline = time.perf_counter() + timeout
    outcome = None
    while True:
        try:
            pgconn.consume_input()
            while not pgconn.is_busy():
                result = pgconn.get_result()
                if result is None:
                    return outcome or Result(error=_error(pgconn), elapsed_ms=(time.perf_counter() - started) * 1000.0)
                if outcome is None or outcome.error is None:
                    outcome = _outcome(pgconn, result, started)
        except psycopg.OperationalError:  # the connection is gone
            return Result(error=_error(pgconn), elapsed_ms=(time.perf_counter() - started) * 1000.0)
        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            raise FetchTimeout(f"step timeout: the result was still arriving after {timeout:g} s")
        select.select([pgconn.socket], [], [], min(remaining, 1.0))


def answer(conn, sql: str) -> Result:
    """One statement's answer on a connection of the tool's own (an invariant), errors included."""
    import psycopg

    pgconn = conn.pgconn
    started = time.perf_counter()
    try:
        pgconn.send_query(sql.encode("utf-8"))
    except psycopg.OperationalError as exc:
        raise ServerError(f"lost the control connection: {_error(pgconn).message}") from exc
    result = collect(pgconn, started)
    if result.error and result.error.code in LOST_CONNECTION:
        raise ServerError(f"lost the control connection: {result.error.message}")
    return result


def run_script(conn, sql: str) -> str | None:
    """A scenario's setup (several statements, one simple query); the error as psql shows it, or None."""
    result = answer(conn, sql)
    return str(result.error) if result.error else None


@dataclass
class PgSession(Session):
    """A named session on a psycopg connection whose libpq connection is driven directly."""

    def fileno(self) -> int:
        return self.conn.pgconn.socket

    def send(self, sql: str) -> Result | None:
        import psycopg

        assert self.pending_sql is None, f"session {self.name} already has a statement in flight"
        pgconn = self.conn.pgconn
        self.sent_at = time.perf_counter()
        if self.closed:  # dropped by a fault step: libpq would write into the dead socket and wait
            return Result(error=PgError(0, CONNECTION_FAILURE, "no connection to the server", "FATAL"))
        try:
            pgconn.send_query(sql.encode("utf-8"))
        except psycopg.OperationalError:  # the connection is gone
            self.closed = True
            return Result(error=_error(pgconn))
        self.pending_sql = sql
        return None

    def _answer(self, fetch_timeout: float) -> Result:
        return collect(self.conn.pgconn, self.sent_at, fetch_timeout)

    def drop_socket(self) -> None:
        """End the connection the way a crashed process does: no Terminate message, no ROLLBACK."""
        # A duplicate of libpq's socket, shut down: the server sees the TCP or Unix connection end.
        with socket.socket(fileno=os.dup(self.conn.pgconn.socket)) as dup:
            dup.shutdown(socket.SHUT_RDWR)
        self.closed = True


def connect_session(name: str, params, database: str, settings_sql: str | None) -> PgSession:
    """A session's connection to the scratch database, its settings applied."""
    conn = params.connect(database=database)
    if settings_sql:
        result = answer(conn, settings_sql)
        if result.error:
            conn.close()
            raise ServerError(f"{name}'s session settings were refused: {result.error}")
    return PgSession(name, conn, conn.pgconn.backend_pid)
