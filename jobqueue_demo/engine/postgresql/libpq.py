"""libpq itself (the system's libpq.so.5), called through ctypes: the part of its API the engine drives.

Why not a driver: the engine already drives libpq's asynchronous calls directly (session.py)
and reads every value in the server's text form, so a driver's adaptation layer is never
used, yet importing one cost 110-130 ms of every PostgreSQL command's start (isolationtester,
the anchor of bench/bench_spec_vs_isolationtester.py, starts in 16 ms). Loading libpq here
costs 7-9 ms.

The names follow libpq's own (PQsendQuery: `send_query`), as a thin layer should. Memory:
a Result owns its PGresult and clears it when collected; a Connection's PGconn is finished
by `finish()` (or when collected); the notice receiver's callback object lives as long as the
connection it is set on, as ctypes requires.
"""

from __future__ import annotations

import ctypes
import os
import select
import time
from ctypes import POINTER, c_char_p, c_int, c_void_p

from ...errors import ServerError
from ..deadlines import INTERRUPT_GRACE_S
from ..types import ConnectionGone

# ExecStatusType
EMPTY_QUERY, COMMAND_OK, TUPLES_OK, COPY_OUT, COPY_IN, BAD_RESPONSE, NONFATAL_ERROR, FATAL_ERROR = range(8)
SINGLE_TUPLE = 9
# ConnStatusType, PostgresPollingStatusType, PGTransactionStatusType
CONNECTION_OK, CONNECTION_BAD = 0, 1
POLLING_FAILED, POLLING_READING, POLLING_WRITING, POLLING_OK = range(4)
TRANS_IDLE, TRANS_ACTIVE, TRANS_INTRANS, TRANS_INERROR, TRANS_UNKNOWN = range(5)
# PG_DIAG_* field codes (postgres_ext.h)
SEVERITY, SEVERITY_NONLOCALIZED, SQLSTATE = ord("S"), ord("V"), ord("C")
MESSAGE_PRIMARY, MESSAGE_DETAIL, MESSAGE_HINT = ord("M"), ord("D"), ord("H")


class LibpqError(ConnectionGone):
    """A libpq call failed: the connection is gone (or never came), libpq's text the message."""


class _Notify(ctypes.Structure):
    _fields_ = [("relname", c_char_p), ("be_pid", c_int), ("extra", c_char_p), ("next", c_void_p)]


NOTICE_RECEIVER = ctypes.CFUNCTYPE(None, c_void_p, c_void_p)

_DISCARD = NOTICE_RECEIVER(lambda _arg, _result: None)

_SIGNATURES = {
    # name: (result type, argument types)
    "PQconnectStart": (c_void_p, [c_char_p]),
    "PQconnectPoll": (c_int, [c_void_p]),
    "PQstatus": (c_int, [c_void_p]),
    "PQfinish": (None, [c_void_p]),
    "PQerrorMessage": (c_char_p, [c_void_p]),
    "PQsocket": (c_int, [c_void_p]),
    "PQbackendPID": (c_int, [c_void_p]),
    "PQtransactionStatus": (c_int, [c_void_p]),
    "PQparameterStatus": (c_char_p, [c_void_p, c_char_p]),
    "PQsendQuery": (c_int, [c_void_p, c_char_p]),
    "PQsetSingleRowMode": (c_int, [c_void_p]),
    "PQconsumeInput": (c_int, [c_void_p]),
    "PQisBusy": (c_int, [c_void_p]),
    "PQgetResult": (c_void_p, [c_void_p]),
    "PQflush": (c_int, [c_void_p]),
    "PQputCopyEnd": (c_int, [c_void_p, c_char_p]),
    "PQgetCopyData": (c_int, [c_void_p, POINTER(c_void_p), c_int]),
    "PQfreemem": (None, [c_void_p]),
    "PQnotifies": (POINTER(_Notify), [c_void_p]),
    "PQsetNoticeReceiver": (c_void_p, [c_void_p, NOTICE_RECEIVER, c_void_p]),
    "PQgetCancel": (c_void_p, [c_void_p]),
    "PQfreeCancel": (None, [c_void_p]),
    "PQcancel": (c_int, [c_void_p, c_char_p, c_int]),
    "PQresultStatus": (c_int, [c_void_p]),
    "PQresultErrorMessage": (c_char_p, [c_void_p]),
    "PQresultErrorField": (c_char_p, [c_void_p, c_int]),
    "PQntuples": (c_int, [c_void_p]),
    "PQnfields": (c_int, [c_void_p]),
    "PQfname": (c_char_p, [c_void_p, c_int]),
    "PQftype": (ctypes.c_uint, [c_void_p, c_int]),
    # A value in text form has no NUL byte (the server never sends one in text): c_char_p
    # copies it whole.
    "PQgetvalue": (c_char_p, [c_void_p, c_int, c_int]),
    "PQgetisnull": (c_int, [c_void_p, c_int, c_int]),
    "PQcmdStatus": (c_char_p, [c_void_p]),
    "PQcmdTuples": (c_char_p, [c_void_p]),
    "PQclear": (None, [c_void_p]),
}

_lib = None


def lib():
    """libpq, loaded once, every function used declared (a wrong guess by ctypes truncates pointers)."""
    global _lib
    if _lib is None:
        try:
            loaded = ctypes.CDLL("libpq.so.5")
        except OSError as exc:
            raise ServerError(f"PostgreSQL's client library libpq.so.5 is not installed ({exc}); "
                              "`make install` installs it (Debian's libpq5)") from None
        for name, (restype, argtypes) in _SIGNATURES.items():
            function = getattr(loaded, name)
            function.restype, function.argtypes = restype, argtypes
        _lib = loaded
    return _lib


def conninfo(params: dict[str, str | int]) -> bytes:
    """libpq's `key='value' ...` form: every value quoted, its backslashes and quotes escaped."""
    def quoted(value) -> str:
        return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"

    return " ".join(f"{key}={quoted(value)}" for key, value in params.items()).encode("utf-8")


def _text(value: bytes | None) -> str:
    return (value or b"").decode("utf-8", "replace")


class Diagnostic:
    """A notice's fields (severity, message_primary, ...), read while libpq holds its result."""

    __slots__ = ("severity", "severity_nonlocalized", "sqlstate", "message_primary", "message_detail", "message_hint")

    def __init__(self, result: int):
        field = lib().PQresultErrorField
        self.severity = _text(field(result, SEVERITY)) or None
        self.severity_nonlocalized = _text(field(result, SEVERITY_NONLOCALIZED)) or None
        self.sqlstate = _text(field(result, SQLSTATE)) or None
        self.message_primary = _text(field(result, MESSAGE_PRIMARY)) or None
        self.message_detail = _text(field(result, MESSAGE_DETAIL)) or None
        self.message_hint = _text(field(result, MESSAGE_HINT)) or None


class Notify:
    __slots__ = ("relname", "be_pid", "extra")

    def __init__(self, relname: bytes, be_pid: int, extra: bytes):
        self.relname, self.be_pid, self.extra = relname, be_pid, extra


class Result:
    """One PGresult; cleared when collected. Its status is read once: every reader asks it."""

    __slots__ = ("_ptr", "status")

    def __init__(self, ptr: int):
        self._ptr = ptr
        self.status: int = _lib.PQresultStatus(ptr)

    def __del__(self):
        if self._ptr and _lib is not None:
            _lib.PQclear(self._ptr)
            self._ptr = None

    @property
    def ntuples(self) -> int:
        return _lib.PQntuples(self._ptr)

    @property
    def nfields(self) -> int:
        return _lib.PQnfields(self._ptr)

    @property
    def error_message(self) -> bytes:
        return _lib.PQresultErrorMessage(self._ptr) or b""

    @property
    def command_status(self) -> bytes | None:
        return _lib.PQcmdStatus(self._ptr)

    @property
    def command_tuples(self) -> bytes | None:
        return _lib.PQcmdTuples(self._ptr) or None

    def error_field(self, code: int) -> bytes | None:
        return _lib.PQresultErrorField(self._ptr, code)

    def fname(self, column: int) -> bytes:
        return _lib.PQfname(self._ptr, column)

    def ftype(self, column: int) -> int:
        return _lib.PQftype(self._ptr, column)

    def get_value(self, row: int, column: int) -> bytes | None:
        value = _lib.PQgetvalue(self._ptr, row, column)
        # libpq gives NULL as an empty string: only then is it asked which it is.
        if not value and _lib.PQgetisnull(self._ptr, row, column):
            return None
        return value


class PGconn:
    """One libpq connection, driven asynchronously (send, consume, is_busy, get_result)."""

    def __init__(self, ptr: int):
        self._ptr = ptr
        self._receiver = None  # the notice callback object, kept alive with the connection
        self._pid = os.getpid()

    @classmethod
    def connect(cls, info: bytes, timeout: float) -> PGconn:
        """A connection made without blocking the process (PQconnectPoll), given up after
        `timeout` seconds, so that Ctrl-C and the tool's own deadlines act while it is made.
        LibpqError with libpq's words when it fails."""
        pq = lib()
        conn = cls(pq.PQconnectStart(info))
        if not conn._ptr:
            raise LibpqError("out of memory")
        deadline = time.monotonic() + timeout
        # As libpq's manual says: a start that failed at once is CONNECTION_BAD; else poll, as
        # though the last poll had said WRITING.
        polled = POLLING_FAILED if pq.PQstatus(conn._ptr) == CONNECTION_BAD else POLLING_WRITING
        try:
            while polled != POLLING_OK:
                if polled == POLLING_FAILED:
                    raise LibpqError(conn.error_message.decode("utf-8", "replace").strip() or "connection failed")
                socket = pq.PQsocket(conn._ptr)
                left = deadline - time.monotonic()
                ready = select.select([socket] if polled == POLLING_READING else [], [socket] if polled == POLLING_WRITING else [], [], max(0.0, left))
                if not ready[0] and not ready[1]:
                    raise LibpqError(f"timeout expired after {timeout:g} s")
                polled = pq.PQconnectPoll(conn._ptr)
        except BaseException:
            conn.finish()
            raise
        # libpq's own receiver prints every notice on standard error: a connection of the tool's
        # says nothing unless a session asks for its notices (on_notice).
        conn._receiver = _DISCARD
        pq.PQsetNoticeReceiver(conn._ptr, _DISCARD, None)
        return conn

    def __del__(self, getpid=os.getpid):  # bound now: at the interpreter's exit `os` may be gone
        # A forked child collecting its parent's connection must not end it: PQfinish would
        # send the server the parent's Terminate message.
        if self._pid == getpid():
            self.finish()

    def finish(self) -> None:
        if self._ptr and _lib is not None:
            _lib.PQfinish(self._ptr)
        self._ptr = None

    @property
    def closed(self) -> bool:
        return not self._ptr

    def _live(self) -> int:
        if not self._ptr:
            raise LibpqError("the connection is closed")
        return self._ptr

    @property
    def status(self) -> int:
        return _lib.PQstatus(self._live())

    @property
    def socket(self) -> int:
        return _lib.PQsocket(self._live())

    @property
    def backend_pid(self) -> int:
        return _lib.PQbackendPID(self._live())

    @property
    def transaction_status(self) -> int:
        return _lib.PQtransactionStatus(self._ptr) if self._ptr else TRANS_UNKNOWN

    @property
    def error_message(self) -> bytes:
        return (_lib.PQerrorMessage(self._ptr) if self._ptr else b"") or b""

    def parameter_status(self, name: bytes) -> bytes | None:
        return _lib.PQparameterStatus(self._live(), name)

    def _checked(self, ok: int) -> None:
        if not ok:
            raise LibpqError(self.error_message.decode("utf-8", "replace").strip() or "connection lost")

    def send_query(self, sql: bytes) -> None:
        self._checked(_lib.PQsendQuery(self._live(), sql))

    def set_single_row_mode(self) -> None:
        self._checked(_lib.PQsetSingleRowMode(self._live()))

    def consume_input(self) -> None:
        self._checked(_lib.PQconsumeInput(self._live()))

    def is_busy(self) -> bool:
        return bool(_lib.PQisBusy(self._live()))

    def get_result(self) -> Result | None:
        ptr = _lib.PQgetResult(self._live())
        return Result(ptr) if ptr else None

    def flush(self) -> int:
        done = _lib.PQflush(self._live())
        self._checked(done >= 0)
        return done

    def put_copy_end(self, error: bytes | None = None) -> None:
        self._checked(_lib.PQputCopyEnd(self._live(), error) >= 0)

    def get_copy_data(self, async_: int) -> tuple[int, bytes]:
        """(size, row) of COPY TO STDOUT's next row: 0 when none is in yet, -1 at its end."""
        buffer = c_void_p()
        size = _lib.PQgetCopyData(self._live(), ctypes.byref(buffer), async_)
        if size == -2:
            self._checked(0)
        if size <= 0 or not buffer.value:
            return size, b""
        try:
            return size, ctypes.string_at(buffer, size)
        finally:
            _lib.PQfreemem(buffer)

    def notifies(self) -> Notify | None:
        ptr = _lib.PQnotifies(self._live())
        if not ptr:
            return None
        try:
            got = ptr.contents
            return Notify(got.relname or b"", got.be_pid, got.extra or b"")
        finally:
            _lib.PQfreemem(ptr)

    def on_notice(self, handler) -> None:
        """`handler(Diagnostic)` for each notice or warning the server sends."""
        def receive(_arg, result):
            handler(Diagnostic(result))

        self._receiver = NOTICE_RECEIVER(receive)
        _lib.PQsetNoticeReceiver(self._live(), self._receiver, None)

    def cancel(self) -> None:
        """Ask the server to cancel the statement in flight (PQcancel, on a connection of its own)."""
        cancel = _lib.PQgetCancel(self._live())
        if not cancel:
            raise LibpqError("cannot cancel: no connection")
        try:
            error = ctypes.create_string_buffer(256)
            if not _lib.PQcancel(cancel, error, len(error)):
                raise LibpqError(error.value.decode("utf-8", "replace"))
        finally:
            _lib.PQfreeCancel(cancel)


class Connection:
    """A connection of the tool's (a session's, or its own control connection): its PGconn, the
    bound on waiting for an answer to its statements (control.py, session.py), and why the
    tool gave up on it (`dropped`: an answer that never came), for the clean-up."""

    def __init__(self, pgconn: PGconn, answer_timeout: float):
        self.pgconn = pgconn
        self.answer_timeout = answer_timeout
        self.dropped: str | None = None
        # After Ctrl-C, how long the clean-up waits for the answer a stop signal cut short
        # (control.py): longer while a statement the server ends by itself is out (slow_statement).
        self.in_flight_grace = INTERRUPT_GRACE_S

    @property
    def closed(self) -> bool:
        return self.pgconn.closed

    def fileno(self) -> int:
        return self.pgconn.socket

    def add_notice_handler(self, handler) -> None:
        self.pgconn.on_notice(handler)

    def close(self) -> None:
        self.pgconn.finish()
