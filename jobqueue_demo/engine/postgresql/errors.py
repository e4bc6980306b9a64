"""PostgreSQL error codes (SQLSTATEs) the lessons talk about, by name and by portable class.

On PostgreSQL an error's code is its five-character SQLSTATE: the server sends one with
every error, in every language, so behaviour branches on it and never on message text.
Names are PostgreSQL's condition names (Appendix A of its manual), upper-cased as
mysql/errors.py spells MySQL's; the classes are the same portable ones, so a lesson's
`expect: {error: deadlock}` means the same thing on both engines.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..types import SqlError, shown

UNIQUE_VIOLATION = "23505"
SYNTAX_ERROR = "42601"
UNDEFINED_TABLE = "42P01"
LOCK_NOT_AVAILABLE = "55P03"  # NOWAIT, and lock_timeout running out
DEADLOCK_DETECTED = "40P01"
SERIALIZATION_FAILURE = "40001"  # REPEATABLE READ / SERIALIZABLE write conflicts
QUERY_CANCELED = "57014"  # pg_cancel_backend, statement_timeout
ADMIN_SHUTDOWN = "57P01"  # pg_terminate_backend: "terminating connection due to administrator command"
IN_FAILED_SQL_TRANSACTION = "25P02"  # every statement after an error until ROLLBACK
CONNECTION_EXCEPTION = "08000"
CONNECTION_DOES_NOT_EXIST = "08003"
# libpq reports a connection that went away under it without a SQLSTATE; the client
# side of this tool gives it this one, as the mysql client gives CR_SERVER_LOST.
CONNECTION_FAILURE = "08006"

NAMES = {
    "UNIQUE_VIOLATION": UNIQUE_VIOLATION,
    "SYNTAX_ERROR": SYNTAX_ERROR,
    "UNDEFINED_TABLE": UNDEFINED_TABLE,
    "LOCK_NOT_AVAILABLE": LOCK_NOT_AVAILABLE,
    "DEADLOCK_DETECTED": DEADLOCK_DETECTED,
    "SERIALIZATION_FAILURE": SERIALIZATION_FAILURE,
    "QUERY_CANCELED": QUERY_CANCELED,
    "ADMIN_SHUTDOWN": ADMIN_SHUTDOWN,
    "IN_FAILED_SQL_TRANSACTION": IN_FAILED_SQL_TRANSACTION,
    "CONNECTION_EXCEPTION": CONNECTION_EXCEPTION,
    "CONNECTION_DOES_NOT_EXIST": CONNECTION_DOES_NOT_EXIST,
    "CONNECTION_FAILURE": CONNECTION_FAILURE,
}

CLASSES = {
    "lock-not-available": frozenset({LOCK_NOT_AVAILABLE}),
    "deadlock": frozenset({DEADLOCK_DETECTED}),
    "connection-lost": frozenset({CONNECTION_EXCEPTION, CONNECTION_DOES_NOT_EXIST, CONNECTION_FAILURE, ADMIN_SHUTDOWN}),
    "interrupted": frozenset({QUERY_CANCELED}),
    "duplicate-key": frozenset({UNIQUE_VIOLATION}),
    "serialization-failure": frozenset({SERIALIZATION_FAILURE}),
}

LOST_CONNECTION = CLASSES["connection-lost"]

_BY_CODE = {v: k for k, v in NAMES.items()}


# How an expectation may spell an error here besides a class (scenario/loader.py).
SPELT_AS = "a SQLSTATE, a condition name"


def _is_sqlstate(text: str) -> bool:
    return len(text) == 5 and text.isalnum() and text.upper() == text


def resolve(spelling: str | int) -> frozenset[str]:
    """The SQLSTATEs a lesson's spelling means: a class, a condition name, or a SQLSTATE itself.

    YAML reads an all-digit SQLSTATE (`40001`) as a number, so an int is taken as its digits.
    """
    text = f"{spelling:05d}" if isinstance(spelling, int) else str(spelling)
    if text in CLASSES:
        return CLASSES[text]
    if text.upper() in NAMES:
        return frozenset({NAMES[text.upper()]})
    if _is_sqlstate(text.upper()):
        return frozenset({text.upper()})
    raise KeyError(spelling)


def name_of(sqlstate: str) -> str | None:
    return _BY_CODE.get(sqlstate)


def class_of(sqlstate: str) -> str | None:
    """The portable class of a SQLSTATE (`lock-not-available`, ...), None when it has none."""
    return next((name for name, codes in CLASSES.items() if sqlstate in codes), None)


def known_spellings() -> str:
    return ", ".join(sorted(CLASSES)) + ", " + ", ".join(sorted(NAMES)) + ", or any SQLSTATE (55P03)"


# Plain and hashable by identity, as SqlError is: a dataclass cannot be frozen over a plain base.
@dataclass(eq=False)
class PgError(SqlError):
    """A PostgreSQL error: no number (`errno` 0), its `code` is the SQLSTATE."""

    severity: str = "ERROR"
    # The whole message as libpq words it (PQresultErrorMessage: the statement's LINE and
    # cursor, DETAIL, HINT, CONTEXT, each line ending in a newline), which isolationtester
    # prints for a failed setup or teardown; empty when libpq had none.
    libpq_text: str = ""
    # Made by libpq, not sent by the server (a connection gone): isolationtester prints such
    # an error's whole text, the server's last word and libpq's account of the closed socket.
    by_libpq: bool = False

    def __str__(self) -> str:
        # psql's form, which the seed transcript quotes: `ERROR:  could not obtain lock on row ...`.
        return f"{self.severity}:  {shown(self.message)}"

    @property
    def code(self) -> int | str:
        return self.sqlstate

    @property
    def error_class(self) -> str | None:
        return class_of(self.sqlstate)

    @property
    def name(self) -> str | None:
        return name_of(self.sqlstate)
