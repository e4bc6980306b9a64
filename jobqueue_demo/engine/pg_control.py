"""The tool's own SQL on a PostgreSQL control connection, and the one mapping of its errors.

As control.py for MySQL: a failure of the tool's own SQL is a ServerError told in one line
(exit 3), its code the SQLSTATE. Values come back in the server's text form (None for NULL),
read from the raw result, so nothing depends on psycopg's type conversions.
"""

from __future__ import annotations

from .control import ControlError
from .pg_errors import CONNECTION_FAILURE, LOST_CONNECTION

INSUFFICIENT_PRIVILEGE = "42501"


def sqlstate_of(exc: BaseException) -> str:
    """An error's SQLSTATE; a connection that went away under libpq has none, and gets 08006."""
    return getattr(exc, "sqlstate", None) or CONNECTION_FAILURE


def control_error(exc: BaseException, sql: str) -> ControlError:
    code = sqlstate_of(exc)
    diag = getattr(exc, "diag", None)
    message = " ".join(str((diag and diag.message_primary) or exc).split())
    if code in LOST_CONNECTION:
        return ControlError(f"lost the control connection: {message}", code)
    what = " ".join(sql.split()[:3])
    if code == INSUFFICIENT_PRIVILEGE:
        return ControlError(f"the server refused '{what} ...' (ERROR {code}: {message}); the DSN's user needs that privilege", code)
    return ControlError(f"the server refused '{what} ...' on the control connection (ERROR {code}: {message})", code)


def rows(conn, sql: str) -> tuple[tuple[str | None, ...], ...]:
    """Every row of one statement (of the last, if several), as text; errors mapped."""
    import psycopg

    try:
        cursor = conn.execute(sql.encode("utf-8"))
        while cursor.nextset():
            pass
        result = cursor.pgresult
    except psycopg.Error as exc:
        raise control_error(exc, sql) from None
    if result is None or result.ntuples == 0:
        return ()
    return tuple(
        tuple(_text(result.get_value(r, c)) for c in range(result.nfields)) for r in range(result.ntuples)
    )


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("utf-8", "replace")


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
