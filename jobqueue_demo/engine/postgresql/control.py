"""The tool's own SQL on a PostgreSQL control connection, and the one mapping of its errors.

As control.py for MySQL: a failure of the tool's own SQL is a ServerError told in one line
(exit 3), its code the SQLSTATE. Values come back in the server's text form (None for NULL),
read from the raw result (libpq.py), never converted.
"""

from __future__ import annotations

from ...errors import FetchTimeout
from ..deadlines import INTERRUPT_GRACE_S, note_silence
from ..types import ControlError
from .errors import CONNECTION_FAILURE, LOST_CONNECTION

INSUFFICIENT_PRIVILEGE = "42501"


def control_error(code: str, message: str, sql: str) -> ControlError:
    """The one line for a failed statement of the tool's own: what was refused, and why."""
    message = " ".join(message.split())
    if code in LOST_CONNECTION:
        return ControlError(f"lost the control connection: {message}", code)
    what = " ".join(sql.split()[:3])
    if code == INSUFFICIENT_PRIVILEGE:
        return ControlError(f"the server refused '{what} ...' (ERROR {code}: {message}); the DSN's user needs that privilege", code)
    return ControlError(f"the server refused '{what} ...' on the control connection (ERROR {code}: {message})", code)


# After Ctrl-C, how long the clean-up waits for a slow_statement the signal cut short.
SLOW_STATEMENT_GRACE_S = 2.0


def slow_statement(conn, sql: str) -> None:
    """execute() for a statement the server ends by itself, however long it takes: a server
    busy copying a database (or waiting for a catalog lock) is not a gone one. After a burst
    of runs a CREATE DATABASE took 300 ms here (bench/NOTES.md); under the parallel suite it
    outlasted the 0.4 s grace of an answer after Ctrl-C in 1 run of 8, and the database it
    made was left for the next run's sweep. Cut short by a stop signal, the clean-up waits
    longer for it (rows())."""
    conn.in_flight_grace = SLOW_STATEMENT_GRACE_S
    try:
        execute(conn, sql)
    except ControlError:
        conn.in_flight_grace = INTERRUPT_GRACE_S  # answered (refused): nothing left in flight
        raise
    conn.in_flight_grace = INTERRUPT_GRACE_S  # a stop signal skips this: rows() drains with it


def rows(conn, sql: str) -> tuple[tuple[str | None, ...], ...]:
    """The rows of one statement (of the last, if several; the first 1,000, as for a session),
    as text; errors mapped. No answer within the connection's `answer_timeout` is a ControlError
    too, and closes the connection."""
    from .libpq import TRANS_ACTIVE, LibpqError
    from .session import collect, shut

    timeout = conn.answer_timeout
    pgconn = conn.pgconn
    try:
        if pgconn.transaction_status == TRANS_ACTIVE:
            # A stop signal cut short the wait for the last statement's answer: libpq takes one
            # statement at a time, and the clean-up's DROP must come after a CREATE the server
            # may still be running (its grace: slow_statement).
            collect(pgconn, 0.0, timeout, grace=conn.in_flight_grace)
        pgconn.send_query(sql.encode("utf-8"))
        result = collect(pgconn, 0.0, timeout)
    except FetchTimeout:
        shut(pgconn)
        note_silence()
        conn.dropped = f"the server did not answer within {timeout:g} s"
        raise ControlError(conn.dropped, CONNECTION_FAILURE) from None
    except LibpqError as exc:  # from send_query: the connection is gone
        raise control_error(CONNECTION_FAILURE, str(exc), sql) from None
    if result.error is not None:
        raise control_error(result.error.code, result.error.message, sql)
    return result.rows


def execute(conn, sql: str) -> None:
    rows(conn, sql)


def value(conn, sql: str) -> str | None:
    found = rows(conn, sql)
    return found[0][0] if found else None


def flag(conn, sql: str) -> bool:
    """Whether a statement like SELECT pg_try_advisory_lock(...) answered true."""
    return value(conn, sql) == "t"


def literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
