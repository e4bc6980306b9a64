"""The tool's own SQL on a control connection, and the one mapping of its errors.

Whatever helper runs it (the runner, explore's resets, the wait monitor, the workers' checks),
a failure of the tool's own SQL is a server problem told in one line (exit 3): a lost
connection, a missing privilege, anything else the server refused. Scenario SQL never runs
here; its errors are results in the transcript.
"""

from __future__ import annotations

from ..types import ControlError
from .errors import LOST_CONNECTION

ER_DBACCESS_DENIED = 1044
ER_ACCESS_DENIED = 1045
ER_TABLEACCESS_DENIED = 1142
ER_SPECIFIC_ACCESS_DENIED = 1227
PRIVILEGE_ERRORS = frozenset({ER_DBACCESS_DENIED, ER_ACCESS_DENIED, ER_TABLEACCESS_DENIED, ER_SPECIFIC_ACCESS_DENIED})


def errno_of(exc: BaseException) -> int:
    args = getattr(exc, "args", ())
    return args[0] if args and isinstance(args[0], int) else 0


def control_error(exc: BaseException, sql: str) -> ControlError:
    """The one line for a failed statement of the tool's own: what was refused, and why."""
    errno = errno_of(exc)
    message = " ".join(str(exc.args[-1]).split()) if getattr(exc, "args", ()) else str(exc)
    if errno in LOST_CONNECTION:
        return ControlError(f"lost the control connection: {message}", errno)
    what = " ".join(sql.split()[:3])
    if errno in PRIVILEGE_ERRORS:
        return ControlError(f"the server refused '{what} ...' (ERROR {errno}: {message}); the DSN's user needs that privilege", errno)
    return ControlError(f"the server refused '{what} ...' on the control connection (ERROR {errno}: {message})", errno)


def rows(conn, sql: str) -> tuple:
    """Every row of one statement (of the first, if several), errors mapped."""
    import MySQLdb

    try:
        conn.query(sql.encode("utf-8"))
        stored = conn.store_result()
        result = stored.fetch_row(0) if stored is not None else ()
        while conn.next_result() == 0:  # an unread result would desynchronise the connection
            conn.store_result()
    except MySQLdb.Error as exc:
        raise control_error(exc, sql) from None
    return result


def execute(conn, sql: str) -> None:
    rows(conn, sql)


def value(conn, sql: str) -> str | None:
    """The first column of the first row, as text, or None."""
    found = rows(conn, sql)
    return text(found[0][0]) if found else None


def flag(conn, sql: str) -> bool:
    """Whether a statement like SELECT GET_LOCK(...) answered 1."""
    return value(conn, sql) == "1"


def text(value) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return value.decode("utf-8", "replace")

