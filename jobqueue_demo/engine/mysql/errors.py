"""MySQL and MariaDB error numbers the lessons talk about, by name and by portable class.

Behaviour branches on these numbers, never on message text (messages differ by server and
language).
"""

from __future__ import annotations


from ..types import SqlError, shown

ER_DUP_ENTRY = 1062
ER_PARSE_ERROR = 1064
ER_NO_SUCH_TABLE = 1146
ER_LOCK_WAIT_TIMEOUT = 1205
ER_LOCK_DEADLOCK = 1213
ER_QUERY_INTERRUPTED = 1317
ER_CONNECTION_KILLED = 1927  # MariaDB
ER_LOCK_NOWAIT = 3572  # MySQL 8; MariaDB reports NOWAIT as 1205
ER_CLIENT_INTERACTION_TIMEOUT = 4031  # MySQL 8
CR_SERVER_GONE_ERROR = 2006
CR_SERVER_LOST = 2013

NAMES = {
    "ER_DUP_ENTRY": ER_DUP_ENTRY,
    "ER_PARSE_ERROR": ER_PARSE_ERROR,
    "ER_NO_SUCH_TABLE": ER_NO_SUCH_TABLE,
    "ER_LOCK_WAIT_TIMEOUT": ER_LOCK_WAIT_TIMEOUT,
    "ER_LOCK_DEADLOCK": ER_LOCK_DEADLOCK,
    "ER_QUERY_INTERRUPTED": ER_QUERY_INTERRUPTED,
    "ER_CONNECTION_KILLED": ER_CONNECTION_KILLED,
    "ER_LOCK_NOWAIT": ER_LOCK_NOWAIT,
    "ER_CLIENT_INTERACTION_TIMEOUT": ER_CLIENT_INTERACTION_TIMEOUT,
    "CR_SERVER_GONE_ERROR": CR_SERVER_GONE_ERROR,
    "CR_SERVER_LOST": CR_SERVER_LOST,
}

CLASSES = {
    "lock-not-available": frozenset({ER_LOCK_WAIT_TIMEOUT, ER_LOCK_NOWAIT}),
    "deadlock": frozenset({ER_LOCK_DEADLOCK}),
    "connection-lost": frozenset(
        {CR_SERVER_GONE_ERROR, CR_SERVER_LOST, ER_CONNECTION_KILLED, ER_CLIENT_INTERACTION_TIMEOUT}
    ),
    "interrupted": frozenset({ER_QUERY_INTERRUPTED}),
    "duplicate-key": frozenset({ER_DUP_ENTRY}),
}

LOST_CONNECTION = CLASSES["connection-lost"]

_BY_NUMBER = {v: k for k, v in NAMES.items()}


# How an expectation may spell an error here besides a class or a name (scenario/loader.py).
SPELT_AS = "a number"


def resolve(spelling: str) -> frozenset[int]:
    """The error numbers a lesson's spelling means: a number, a class or a name; KeyError when
    none (ValueError for digits int() cannot read, e.g. '²')."""
    if spelling.isdigit():
        return frozenset({int(spelling)})
    if spelling in CLASSES:
        return CLASSES[spelling]
    if spelling.upper() in NAMES:
        return frozenset({NAMES[spelling.upper()]})
    raise KeyError(spelling)


def name_of(errno: int) -> str | None:
    return _BY_NUMBER.get(errno)


def known_spellings() -> str:
    return ", ".join(sorted(CLASSES)) + ", " + ", ".join(sorted(NAMES))


# No dataclass of its own: it adds no field, and every run defines it (start-up).
class MySqlError(SqlError):
    """A MySQL or MariaDB error: its `code` is the error number."""

    def __str__(self) -> str:
        # The mysql command-line client's form, which lessons quote.
        return f"ERROR {self.errno} ({self.sqlstate}): {shown(self.message)}"

    @property
    def code(self) -> int | str:
        return self.errno

    @property
    def error_class(self) -> str | None:
        return next((name for name, codes in CLASSES.items() if self.errno in codes), None)

    @property
    def name(self) -> str | None:
        return name_of(self.errno)

    @property
    def statement_only(self) -> bool:
        return self.errno == ER_LOCK_WAIT_TIMEOUT
