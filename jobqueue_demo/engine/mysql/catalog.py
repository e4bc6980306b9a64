"""A database's tables as CREATE statements (SHOW CREATE TABLE), for `replay --dsn`: the
schema a deadlock report's locks are on, read without reading a row."""

from __future__ import annotations

from contextlib import closing

from ...errors import TableMissing, UsageError
from ..types import ControlError
from .control import rows, text

NO_SUCH_TABLE = 1146


def create_statements(params, tables: tuple[str, ...]) -> str:
    if not params.database:
        raise UsageError("--dsn must name the database whose schema to read (mysql://user@host/DATABASE)")
    with closing(params.connect()) as conn:
        out = []
        for table in tables:
            try:
                found = rows(conn, "SHOW CREATE TABLE `" + table.replace("`", "``") + "`")
            except ControlError as exc:
                if exc.errno != NO_SUCH_TABLE:
                    raise
                raise TableMissing(params.database, table) from None
            if found:
                out.append(text(found[0][1]) + ";\n")
    return "".join(out)
