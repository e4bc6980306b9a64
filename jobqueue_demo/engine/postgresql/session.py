"""One PostgreSQL session's connection, driven asynchronously so a blocked statement never blocks us.

libpq's asynchronous calls do what mysqlclient's send_query / read_query_result do for
MySQL: `send_query` (the simple query protocol, so one step may hold several statements),
then select() on the socket, then `consume_input` / `get_result` until the statement's
results are all in (libpq.py calls libpq itself); values stay in the server's text form.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from ...errors import FetchTimeout, ServerError
from ..caps import ANSWER_TOO_BIG_TO_READ, MAX_ANSWER_GROWTH, ROW_TOO_BIG_TO_READ, Kept, Notices, cut_text
from ..deadlines import INTERRUPT_GRACE_S, note_silence, shutdown_socket, wait_readable
from ..session import Session
from ..types import Result, shown
from .errors import CONNECTION_FAILURE, LOST_CONNECTION, PgError

# DISCARD ALL, spelled out (PostgreSQL's manual gives it so): cursors, settings, prepared
# statements, LISTENs, advisory locks, cached plans, temporary tables, sequence state.
RESET_SESSION = (
    "CLOSE ALL; RESET ALL; DEALLOCATE ALL; UNLISTEN *; SELECT pg_advisory_unlock_all(); "
    "DISCARD PLANS; DISCARD TEMP; DISCARD SEQUENCES"
)


# Types psql right-aligns: int2, int4, int8, oid, float4, float8, numeric, money.
NUMERIC_OIDS = frozenset({21, 23, 20, 26, 700, 701, 1700, 790})


def _error(pgconn, result=None) -> PgError:
    """The error of a failed result, or of a connection gone under libpq (no SQLSTATE: 08006)."""
    from . import libpq

    text = (result.error_message if result is not None else pgconn.error_message) or b"connection lost"
    if result is not None and result.error_field(libpq.SQLSTATE):
        def field(which) -> str:
            return (result.error_field(which) or b"").decode("utf-8", "replace")

        return PgError(0, field(libpq.SQLSTATE), cut_text(field(libpq.MESSAGE_PRIMARY)),
                       field(libpq.SEVERITY_NONLOCALIZED) or "ERROR", cut_text(text.decode("utf-8", "replace")))
    # libpq's own text: the server's last word (a FATAL from pg_terminate_backend) first, then
    # its account of the closed socket; the first line is what psql shows first too.
    first = cut_text(text.decode("utf-8", "replace").strip().splitlines()[0])
    severity, sep, message = first.partition(":  ")
    if not sep or severity not in ("FATAL", "ERROR", "PANIC"):
        severity, message = "FATAL", first
    return PgError(0, CONNECTION_FAILURE, message.strip(), severity, cut_text(text.decode("utf-8", "replace")), True)


class _Outcome:
    """One step's Result, built from its libpq results as they come: each statement's result in
    turn (psql shows them all), the first error ending the step. In single-row mode a result set
    comes a row at a time (SINGLE_TUPLE), then ends with an empty TUPLES_OK: kept, cut or counted
    as caps.py says. `notices` is the session's Notices, which its notice handler fills; each
    statement's result takes the notices that arrived before it, where psql prints them."""

    def __init__(self, pgconn, started: float, notices: Notices | None = None, whole: bool = False):
        self.pgconn = pgconn
        self.started = started
        self.notices = notices if notices is not None else Notices()
        self.whole = whole
        self.kept = Kept(_text, whole=whole)
        self.done: list[Result] = []

    @property
    def failed(self) -> bool:
        return bool(self.done) and self.done[-1].error is not None

    def add(self, result) -> None:
        from . import libpq

        if self.failed:
            return
        status = result.status
        if status == libpq.SINGLE_TUPLE:
            self._keep(result)
        elif status == libpq.TUPLES_OK:
            self._keep(result)
            self._finish(self._rows(result), result)
        elif status in (libpq.COMMAND_OK, libpq.EMPTY_QUERY):
            # PostgreSQL counts the rows an UPDATE matched, changed or not: affected and matched are one.
            count = int(result.command_tuples) if result.command_tuples else None
            made = Result(affected=count if count is not None else 0, matched=count, empty=status == libpq.EMPTY_QUERY)
            self._finish(made, result)
        else:
            self._finish(Result(error=_error(self.pgconn, result)), result)

    def _finish(self, made: Result, result) -> None:
        made.elapsed_ms = self.elapsed_ms()
        made.tag = result.command_status.decode("utf-8", "replace") if result.command_status else None
        made.notices, made.warnings = self.notices.take()
        self.done.append(made)

    def _keep(self, result) -> None:
        for r in range(result.ntuples):
            # A generator: a row only counted is never copied out of libpq.
            self.kept.add(result.get_value(r, c) for c in range(result.nfields))

    def _rows(self, result) -> Result:
        kept = self.kept
        self.kept = Kept(_text, kept.bytes, self.whole)  # the next statement's rows start afresh
        return Result(
            columns=tuple(result.fname(c).decode() for c in range(result.nfields)),
            numeric=tuple(result.ftype(c) in NUMERIC_OIDS for c in range(result.nfields)),
            rows=tuple(kept.rows),
            omitted=kept.omitted,
            capped=kept.capped,
            cut=kept.cut,
        )

    def outcome(self) -> Result | None:
        """The step's Result: the last statement's (or the error), the others as its `earlier`."""
        if not self.done:
            return None
        last = self.done[-1]
        last.earlier = tuple(self.done[:-1])
        return last

    def elapsed_ms(self) -> float:
        return (time.perf_counter() - self.started) * 1000.0


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("utf-8", "replace")


@dataclass(frozen=True)
class Waitable:
    """libpq's socket for select(), with the interrupt grace of deadlines.py."""

    pgconn: object
    interrupt_grace: float = INTERRUPT_GRACE_S

    def fileno(self) -> int:
        return self.pgconn.socket


PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class RowTooBig(Exception):
    """A row is arriving that is too big to read (caps.MAX_ANSWER_GROWTH)."""


def results(pgconn, timeout: float, grace: float = INTERRUPT_GRACE_S):
    """Each result of the statement sent, as it completes; FetchTimeout when the answer is not
    complete within `timeout` (or `grace` after Ctrl-C), RowTooBig when reading it grew the
    process by more than MAX_ANSWER_GROWTH. A connection gone raises libpq.LibpqError."""
    deadline = time.monotonic() + timeout
    # libpq holds a row whole before it hands it over and reads all the socket has, and says
    # neither how big the row is nor how much it read: what it read is what the process grows
    # by, looked at after each read, before libpq parses (and copies) a row, and after.
    base = _resident()
    while True:
        pgconn.consume_input()
        _bounded(base)
        busy = pgconn.is_busy()
        _bounded(base)  # libpq has copied the first row it parsed: before that row is handed over
        while not busy:
            result = pgconn.get_result()
            if result is None:
                return
            if not _copy_ended(pgconn, result, deadline, timeout):
                yield result
            busy = pgconn.is_busy()
        _wait(pgconn, deadline, timeout, grace)


def _bounded(base: int) -> None:
    if _resident() - base > MAX_ANSWER_GROWTH:
        raise RowTooBig(ROW_TOO_BIG_TO_READ)


# /proc/self/statm kept open, with the pid that opened it: read again it costs 2 µs, opened
# and read 25 µs, and a schedule of explore reads it some 40 times (1 ms). A forked child
# opens its own: the inherited file is its parent's.
_statm: tuple[int, int] | None = None


def _resident() -> int:
    """The process's resident memory, in bytes (Linux's /proc; elsewhere 0: not bounded)."""
    global _statm
    try:
        if _statm is None or _statm[0] != os.getpid():
            _statm = (os.getpid(), os.open("/proc/self/statm", os.O_RDONLY | os.O_CLOEXEC))
        return int(os.pread(_statm[1], 128, 0).split()[1]) * PAGE_BYTES
    except OSError:
        return 0


def _wait(pgconn, deadline: float, timeout: float, grace: float = INTERRUPT_GRACE_S) -> None:
    if not wait_readable(Waitable(pgconn, grace), deadline):
        raise FetchTimeout(f"step timeout: the result was still arriving after {timeout:g} s")


def _copy_ended(pgconn, result, deadline: float, timeout: float) -> bool:
    """Whether `result` opened a COPY, now ended: libpq would wait for ever for the data of a
    COPY FROM STDIN, and a COPY TO STDOUT's rows are not a result set. The COPY's own result
    (its row count, or the error refusing the data) follows."""
    from . import libpq

    if result.status == libpq.COPY_IN:
        pgconn.put_copy_end(b"jobqueue-demo sends no data to COPY FROM STDIN")
        pgconn.flush()
        return True
    if result.status != libpq.COPY_OUT:
        return False
    while True:  # the rows are read and dropped
        size, _ = pgconn.get_copy_data(1)
        if size < 0:
            return True
        if size == 0:
            _wait(pgconn, deadline, timeout)
            pgconn.consume_input()


def collect(pgconn, started: float, timeout: float = float("inf"), notices: Notices | None = None,
            whole: bool = False, grace: float = INTERRUPT_GRACE_S) -> Result:
    """Every result of the statement sent, as one Result: the first error, else the last
    result, with the results before it as its `earlier` (_Outcome).

    A statement that sends no complete answer within `timeout` raises FetchTimeout.
    """
    from .libpq import LibpqError

    outcome = _Outcome(pgconn, started, notices, whole)
    try:
        for result in results(pgconn, timeout, grace):
            outcome.add(result)
    except LibpqError:  # the connection is gone
        return Result(error=_error(pgconn), elapsed_ms=outcome.elapsed_ms())
    except RowTooBig as e:
        # libpq cannot skip the rest of a row: only closing the connection frees what it holds.
        shut(pgconn)
        error = PgError(0, CONNECTION_FAILURE, f"{e}: the connection was dropped")
        return Result(error=error, elapsed_ms=outcome.elapsed_ms())
    return outcome.outcome() or Result(error=_error(pgconn), elapsed_ms=outcome.elapsed_ms())


def shut(pgconn) -> None:
    """Close the connection's socket under libpq, so that no later call on it waits."""
    shutdown_socket(Waitable(pgconn))


def answer(conn, sql: str) -> Result:
    """One statement's answer on a connection of the tool's own (an invariant), errors included;
    a server that does not answer within the connection's `answer_timeout` is a ServerError."""
    from .libpq import LibpqError

    pgconn = conn.pgconn
    started = time.perf_counter()
    try:
        pgconn.send_query(sql.encode("utf-8"))
    except LibpqError as exc:
        raise ServerError(f"lost the control connection: {_error(pgconn).message}") from exc
    timeout = conn.answer_timeout
    try:
        result = collect(pgconn, started, timeout)
    except FetchTimeout:
        shut(pgconn)
        note_silence()
        raise ServerError(f"the server did not answer within {timeout:g} s") from None
    if result.error and result.error.code in LOST_CONNECTION:
        raise ServerError(f"lost the control connection: {result.error.message}")
    return result


def answer_each(conns, sqls) -> list[Result | None]:
    """Each connection's answer to its statement, all sent before any answer is read, so
    the server works on them at once; None where the connection is lost or the server does
    not answer within its `answer_timeout`."""
    from .libpq import LibpqError

    started = time.perf_counter()
    sent = []
    for conn, sql in zip(conns, sqls):
        try:
            conn.pgconn.send_query(sql.encode("utf-8"))
            sent.append(conn)
        except LibpqError:
            sent.append(None)
    return [_answered(conn, started) if conn is not None else None for conn in sent]


def _answered(conn, started: float) -> Result | None:
    try:
        result = collect(conn.pgconn, started, conn.answer_timeout)
    except FetchTimeout:
        shut(conn.pgconn)
        note_silence()
        return None
    return None if result.error and result.error.code in LOST_CONNECTION else result


def run_script(conn, sql: str) -> str | None:
    """A scenario's setup (several statements, one simple query); the error as psql shows it, or None."""
    result = answer(conn, sql)
    return str(result.error) if result.error else None


@dataclass
class PgSession(Session):
    """A named session on a libpq connection driven asynchronously.
    `notices`: what the server said besides the results since the last statement's answer."""

    notices: Notices = field(default_factory=lambda: Notices(notice_text))
    # Answers read whole and kept whole (every row, every byte), as isolationtester reads and
    # prints them (run/spec_run.py): no single-row mode, where the first row's arrival would
    # read as the statement's end. Else a row at a time, any result in bounded memory.
    whole: bool = False
    # The process's resident size when the statement in flight was sent: reading its answer
    # may grow it by MAX_ANSWER_GROWTH at most, however it is read (take_input, collect).
    sent_resident: int = 0
    # Why the connection was dropped while its answer was taken in: read() then tells it.
    too_big: str | None = None

    def fileno(self) -> int:
        return self.conn.pgconn.socket

    def take_input(self) -> None:
        """What the server has sent so far, taken into libpq (a look at a step in flight, as
        run/spec_run.py looks). An answer, or its notices, past MAX_ANSWER_GROWTH drops the
        connection: libpq holds a whole answer unless asked for single rows."""
        self.conn.pgconn.consume_input()
        if _resident() - self.sent_resident > MAX_ANSWER_GROWTH:
            shut(self.conn.pgconn)
            self.too_big = f"{ANSWER_TOO_BIG_TO_READ}: the connection was dropped"

    def send(self, sql: str) -> Result | None:
        from .libpq import LibpqError

        assert self.pending_sql is None, f"session {self.name} already has a statement in flight"
        pgconn = self.conn.pgconn
        self.sent_at = time.perf_counter()
        self.sent_resident, self.too_big = _resident(), None
        if self.closed:  # dropped by a fault step: libpq would write into the dead socket and wait
            # libpq's own words for a query sent on a closed connection (isolationtester prints them bare).
            return Result(error=PgError(0, CONNECTION_FAILURE, "no connection to the server", "FATAL",
                                        "no connection to the server\n", True))
        self.notices.clear()  # a reset's or a setting's, not this statement's
        try:
            pgconn.send_query(sql.encode("utf-8"))
            if not self.whole:  # a result of any size then takes bounded memory (collect())
                pgconn.set_single_row_mode()
        except LibpqError:  # the connection is gone
            self.closed = True
            return Result(error=_error(pgconn))
        self.pending_sql = sql
        return None

    def _answer(self, fetch_timeout: float) -> Result:
        if self.too_big is not None:
            self.closed = True
            return Result(error=PgError(0, CONNECTION_FAILURE, self.too_big))
        return collect(self.conn.pgconn, self.sent_at, fetch_timeout, self.notices, self.whole)

    def drop_socket(self) -> None:
        """End the connection the way a crashed process does: no Terminate message, no ROLLBACK."""
        shut(self.conn.pgconn)
        self.closed = True


def connect_session(name: str, params, database: str, settings_sql: str | None, answer_timeout: float) -> PgSession:
    """A session's connection to the scratch database, its settings applied."""
    conn = params.connect(database=database, answer_timeout=answer_timeout)
    if settings_sql:
        result = answer(conn, settings_sql)
        if result.error:
            conn.close()
            raise ServerError(f"{name}'s session settings were refused: {result.error}")
    session = PgSession(name, conn, conn.pgconn.backend_pid)
    conn.add_notice_handler(session.notices.add)
    return session


def notice_text(diagnostic) -> str:
    """A notice as psql prints it: `WARNING:  there is already a transaction in progress`."""
    return f"{diagnostic.severity or 'NOTICE'}:  {shown(cut_text(diagnostic.message_primary or ''))}"
