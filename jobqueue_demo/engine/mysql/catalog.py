"""A database's tables as CREATE statements (SHOW CREATE TABLE), for `replay --dsn`: the
schema a deadlock report's locks are on, read without reading a row."""

from __future__ import annotations

from contextlib import closing

from ...errors import UsageError
from .control import rows, text


def create_statements(params, tables: tuple[str, ...]) -> str:
    if not params.database:
        raise UsageError("--dsn must name the database whose schema to read (mysql://user@host/DATABASE)")
    with closing(params.connect()) as conn:
        out = []
        for table in tables:
            found = rows(conn, "SHOW CREATE TABLE `" + table.replace("`", "``") + "`")
            if found:
                out.append(text(found[0][1]) + ";\n")
    return "".join(out)
