"""The plain outcome of one statement, passed from the session driver to renderers."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# What a terminal acts on instead of showing: C0 controls but tab and newline, DEL, C1.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def shown(text: str) -> str:
    """Server text (an error's message, a notice) with its control characters written out, as
    a value's are (render/table.py): scenario SQL chooses it (RAISE ... chr(27) || ...)."""
    return _CONTROL.sub(_written_out, text)


def _written_out(found: re.Match) -> str:
    c = found.group()
    if c == "\r":
        return "\\r"
    return f"\\x{ord(c):02X}" if c < "\x80" else f"\\u{ord(c):04X}"


# Plain, not frozen (as run/events.py): made once per statement, then only read; nothing hashes one.
@dataclass(eq=False)
class SqlError:
    """A MySQL or MariaDB error: its `code` is the error number."""

    errno: int
    sqlstate: str
    message: str

    def __str__(self) -> str:
        # The mysql command-line client's form, which lessons quote.
        return f"ERROR {self.errno} ({self.sqlstate}): {shown(self.message)}"

    @property
    def code(self) -> int | str:
        """What expectations and the error classes match: MySQL's number, PostgreSQL's SQLSTATE."""
        return self.errno

    @property
    def error_class(self) -> str | None:
        """The portable class (`deadlock`, `lock-not-available`, ...), or None."""
        from jobqueue_demo.engine.mysql.errors import CLASSES

        return next((name for name, codes in CLASSES.items() if self.errno in codes), None)

    @property
    def name(self) -> str | None:
        """The code's name (ER_LOCK_DEADLOCK), when the tool knows it."""
        from jobqueue_demo.engine.mysql.errors import name_of

        return name_of(self.errno)


@dataclass(eq=False)
class Result:
    """A result set (columns is not None), an OK with an affected count, or an error.

    Values are the server's text form (None for NULL), so what is shown and what is
    compared with expectations is exactly what the server sent.
    """

    columns: tuple[str, ...] | None = None
    numeric: tuple[bool, ...] = ()
    rows: tuple[tuple[str | None, ...], ...] = ()
    # Rows the server sent beyond the ones kept (caps.py), counted, not stored; `capped`: the
    # kept ones reached caps.MAX_RESULT_BYTES; `cut`: values cut to caps.MAX_VALUE_BYTES.
    omitted: int = 0
    capped: bool = False
    cut: int = 0
    affected: int | None = None
    error: SqlError | None = None
    warnings: int = 0
    elapsed_ms: float = field(default=0.0, compare=False)
    # Rows an UPDATE matched, changed or not: a lost update may write the value already there
    # (affected 0), and anomaly.py must still see the write.
    matched: int | None = field(default=None, compare=False)
    # PostgreSQL's command tag (`BEGIN`, `UPDATE 1`, `ROLLBACK` for a COMMIT of an aborted
    # transaction), which psql prints where mysql says Query OK; None on MySQL.
    tag: str | None = None
    # Notices and warnings that arrived with the statement, in psql's form (`WARNING:  ...`).
    notices: tuple[str, ...] = ()
    # A step of several statements (PostgreSQL's simple query): the results before this one,
    # which is the last statement's or the first error, the one expectations are checked against.
    earlier: tuple[Result, ...] = ()

    @property
    def is_rows(self) -> bool:
        return self.columns is not None

    @property
    def whole(self) -> bool:
        """Every row and every value as the server sent it: nothing left out or cut."""
        return not (self.omitted or self.cut)
