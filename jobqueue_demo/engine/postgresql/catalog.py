"""A database's tables as CREATE statements, built from the catalog as pg_dump --schema-only
reads it, for `replay --dsn`: the columns, the primary key and every other index, no row read.
A column whose default is a sequence's nextval() becomes serial, as the sequence is not copied."""

from __future__ import annotations

import json
from contextlib import closing

from ...errors import TableMissing, UsageError
from .control import literal, rows

SERIAL = {"integer": "SERIAL", "bigint": "BIGSERIAL", "smallint": "SMALLSERIAL"}


def create_statements(params, tables: tuple[str, ...]) -> str:
    if not params.database:
        raise UsageError("--dsn must name the database whose schema to read (postgresql://user@host/DATABASE)")
    with closing(params.connect()) as conn:
        return "".join(_table(conn, params.database, table) for table in tables)


def _table(conn, database: str, table: str) -> str:
    columns = rows(
        conn,
        "SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull, pg_get_expr(d.adbin, d.adrelid) "
        "FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum "
        f"WHERE a.attrelid = to_regclass({literal(_quoted(table))}) AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
    )
    if not columns:
        raise TableMissing(database, table)
    lines = []
    for name, kind, not_null, default in columns:
        if default and default.startswith("nextval(") and kind in SERIAL:
            kind, default = SERIAL[kind], None
        line = f"  {_quoted(name)} {kind}" + (" NOT NULL" if not_null == "t" else "") + (f" DEFAULT {default}" if default else "")
        lines.append(line)
    indexes = rows(
        conn,
        "SELECT i.indisprimary, pg_get_indexdef(i.indexrelid), "
        "to_json(ARRAY(SELECT a.attname FROM unnest(i.indkey) k JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k)) "
        f"FROM pg_index i WHERE i.indrelid = to_regclass({literal(_quoted(table))}) ORDER BY i.indexrelid",
    )
    primary = [json.loads(cols) for is_primary, _, cols in indexes if is_primary == "t"]
    if primary:
        lines.append(f"  PRIMARY KEY ({', '.join(_quoted(c) for c in primary[0])})")
    others = "".join(f"{definition};\n" for is_primary, definition, _ in indexes if is_primary != "t")
    return f"CREATE TABLE {_quoted(table)} (\n" + ",\n".join(lines) + "\n);\n" + others


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
