"""One session's connection, driven asynchronously so a blocked statement never blocks us.

mysqlclient's send_query / read_query_result split lets one thread drive many connections:
send, then select() on the socket, then read. A second query on a connection whose result is
still pending would silently read the wrong result, so the pending state is tracked here.
"""

from __future__ import annotations

import re
import time

from ...errors import FetchTimeout, ServerError
from ..caps import ROW_TOO_BIG, Kept
from ..session import Session
from ..types import Result
from . import errors as mysql_errors
from .errors import MySqlError
from .server import SESSION_INIT, ConnectParams

NUM_FLAG = 32768


def result_from_connection(conn, started: float, fetch_timeout: float = float("inf")) -> Result:
    """Read the outcome of the statement just sent; server errors become part of the Result.

    Rows are streamed a row at a time and kept as caps.py says: memory stays bounded whatever
    the result's size, and reading them stops after `fetch_timeout` seconds (FetchTimeout).
    """
    import MySQLdb

    try:
        conn.read_query_result()
        streamed = conn.use_result()
    except MySQLdb.Error as e:
        return Result(error=_sql_error(conn, e), elapsed_ms=_ms_since(started))
    if streamed is None:
        return Result(
            affected=conn.affected_rows(), warnings=conn.warning_count(), elapsed_ms=_ms_since(started),
            matched=_matched(conn.info()),
        )
    described = streamed.describe()
    flags = streamed.field_flags()
    try:
        kept = _fetch(streamed, fetch_timeout)
    except MySQLdb.Error as e:
        error = _sql_error(conn, e)
        if error.errno in mysql_errors.LOST_CONNECTION:
            # The client library ends the connection on a row over its max_allowed_packet too.
            error.message += f" (or {ROW_TOO_BIG})"
        return Result(error=error, elapsed_ms=_ms_since(started))
    return Result(
        columns=tuple(d[0] for d in described),
        numeric=tuple(bool(f & NUM_FLAG) for f in flags),
        rows=tuple(kept.rows),
        omitted=kept.omitted,
        capped=kept.capped,
        cut=kept.cut,
        # Known only once the last row is read: it comes with the result's end.
        warnings=conn.warning_count(),
        elapsed_ms=_ms_since(started),
    )


def answer(conn, sql: str) -> Result:
    """One statement's answer on a connection of the tool's own (an invariant), errors included."""
    import MySQLdb

    from ..deadlines import note_silence, wait_readable

    conn.send_query(sql.encode("utf-8"))
    started = time.perf_counter()
    # Waited for in select(), as every answer of the tool's own: the blocking read below holds
    # off an interrupt until the socket's read timeout (explore's Ctrl-C took 2.5 s then).
    timeout = conn.answer_timeout
    if not wait_readable(conn, time.monotonic() + timeout):
        conn.drop(f"the server did not answer within {timeout:g} s")
        note_silence()
        raise ServerError(f"lost the control connection: {conn.dropped}")
    result = result_from_connection(conn, started)
    if result.error and result.error.errno in mysql_errors.LOST_CONNECTION:
        raise ServerError(f"lost the control connection: {result.error.message}")
    try:
        while conn.next_result() == 0:  # an unread second result would desynchronise the connection
            conn.store_result()
    except MySQLdb.Error:
        pass  # the invariant's own answer is what counts
    return result


def _fetch(streamed, timeout: float) -> Kept:
    """A row at a time: a chunk of rows would be as big as its rows together, and the clock
    is looked at after every row, so a slow stream of rows cannot outlast the step timeout."""
    deadline = time.perf_counter() + timeout
    kept = Kept(_text)
    fetch, clock = streamed.fetch_row, time.perf_counter
    while not kept.full:
        row = fetch(1)
        if not row:
            return kept
        kept.add(row[0])
        if clock() > deadline:
            _timed_out(timeout, kept)
    while fetch(1):  # the rest only counted: the loop a million-row result spends its time in
        kept.omitted += 1
        if clock() > deadline:
            _timed_out(timeout, kept)
    return kept


def _timed_out(timeout: float, kept: Kept):
    raise FetchTimeout(f"step timeout: the result was still arriving after {timeout:g} s ({kept.total} rows read)")


def _sql_error(conn, exc) -> MySqlError:
    errno = exc.args[0] if exc.args and isinstance(exc.args[0], int) else 0
    message = exc.args[1] if len(exc.args) > 1 else str(exc)
    try:
        state = conn.sqlstate() or "HY000"
    except Exception:  # a closed connection has no state to ask for
        state = "HY000"
    if errno in mysql_errors.LOST_CONNECTION and state == "00000":
        state = "HY000"
    return MySqlError(errno, state, message)


def _text(value) -> str | None:
    if value is None or isinstance(value, str):
        return value
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return "0x" + value.hex().upper()


def _ms_since(started: float) -> float:
    return (time.perf_counter() - started) * 1000.0


class MySqlSession(Session):
    """A session on a mysqlclient connection."""

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

    def _answer(self, fetch_timeout: float) -> Result:
        return result_from_connection(self.conn, self.sent_at, fetch_timeout)

    def drop_socket(self) -> None:
        """End the connection the way a crashed process does: no COM_QUIT, no ROLLBACK."""
        from ..deadlines import shutdown_socket

        shutdown_socket(self.conn)
        self.closed = True


# The server's info line after an UPDATE (ER_UPDATE_INFO) is "Rows matched: %ld  Changed: %ld
# Warnings: %ld" in every translation: its first number is the rows matched.
FIRST_NUMBER = re.compile(r"\d+")


def _matched(info: str | bytes | None) -> int | None:
    if not info:
        return None
    found = FIRST_NUMBER.search(info.decode("utf-8", "replace") if isinstance(info, bytes) else info)
    return int(found.group(0)) if found else None


def connect_session(name: str, params: ConnectParams, database: str, settings_sql: str | None, answer_timeout: float) -> MySqlSession:
    """A session's connection to the scratch database, its settings applied."""
    conn = params.connect(database=database, answer_timeout=answer_timeout)
    if settings_sql:
        conn.query(settings_sql.encode())
    return MySqlSession(name, conn, conn.thread_id())


def reset_session(session: Session, params: ConnectParams, database: str, settings_sql: str | None) -> bool:
    """A fresh session's state on the same connection (COM_CHANGE_USER); False when it is gone."""
    import MySQLdb

    try:
        session.conn.change_user(params.user, params.password, database)
        session.conn.query(SESSION_INIT.encode())
        if settings_sql:
            session.conn.query(settings_sql.encode())
    except MySQLdb.OperationalError:
        return False
    return True


def run_script(conn, sql: str) -> str | None:
    """Several statements (a scenario's setup); the error as the mysql client shows it, or None."""
    import MySQLdb

    try:
        conn.query(sql.encode("utf-8"))
        while True:
            conn.store_result()  # each statement's result must be read before the next
            if conn.next_result() != 0:
                return None
    except MySQLdb.Error as e:
        return f"ERROR {e.args[0]}: {e.args[-1]}"
