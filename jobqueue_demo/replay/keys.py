"""An InnoDB record's fields, as the report prints their bytes, turned back into SQL values
by the column's type. InnoDB stores an integer big-endian with its sign bit flipped (1 is
80000001), an ENUM as its position in the list, a DATETIME packed into 5 bytes (MySQL 5.6's
format, MariaDB's default since 10.1), a TIMESTAMP as seconds since the epoch."""

from __future__ import annotations

import datetime

from .report import Field
from .schema import Column

INTEGER_BYTES = {"tinyint": 1, "smallint": 2, "mediumint": 3, "int": 4, "integer": 4, "bigint": 8}
TEXT_TYPES = ("char", "varchar", "tinytext", "text", "mediumtext", "longtext")
BINARY_TYPES = ("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob")


class Undecodable(Exception):
    """A field this cannot turn back into its value; the message says why."""


def literal(field: Field, column: Column) -> str:
    """The field as an SQL literal for MariaDB/MySQL."""
    if field.data is None:
        return "NULL"
    if field.truncated:
        raise Undecodable(f"InnoDB printed only the first {len(field.data)} bytes of {column.name}")
    data, kind = field.data, column.type
    if kind in INTEGER_BYTES and len(data) == INTEGER_BYTES[kind]:
        value = int.from_bytes(data, "big")
        return str(value if column.unsigned else value - (1 << (8 * len(data) - 1)))
    if kind == "enum" and len(data) in (1, 2):
        position = int.from_bytes(data, "big")
        if not 0 < position <= len(column.values):
            raise Undecodable(f"{column.name} holds ENUM position {position}, and the schema lists {len(column.values)} values")
        return text_literal(column.values[position - 1])
    if kind in TEXT_TYPES:
        try:
            value = data.decode("utf-8")
        except UnicodeDecodeError:
            return "X'" + data.hex() + "'"
        return text_literal(value.rstrip(" ") if kind == "char" else value)
    if kind in BINARY_TYPES:
        return "X'" + data.hex() + "'"
    if kind == "datetime" and len(data) >= 5:
        return text_literal(_datetime(int.from_bytes(data[:5], "big") - (1 << 39)))
    if kind == "timestamp" and len(data) >= 4:
        return f"FROM_UNIXTIME({int.from_bytes(data[:4], 'big')})"
    raise Undecodable(f"{column.name} is {column.type.upper()} ({len(data)} bytes), a type this does not decode; give the rows with --rows")


def _datetime(packed: int) -> str:
    ymd, hms = packed >> 17, packed & 0x1FFFF
    year_month, day = ymd >> 5, ymd & 31
    year, month = divmod(year_month, 13)
    try:
        when = datetime.datetime(year, month, day, hms >> 12, (hms >> 6) & 63, hms & 63)
    except ValueError:
        raise Undecodable(f"bytes that are no DATETIME ({packed:#x})") from None
    return when.isoformat(" ")


def text_literal(value: str) -> str:
    """A quoted string, or a hex literal where quoting would need a backslash or carry a
    character a lesson may not hold (a control character)."""
    if "\\" in value or any(ord(c) < 32 or ord(c) == 127 for c in value):
        return "X'" + value.encode().hex() + "'"
    return "'" + value.replace("'", "''") + "'"


def quoted_name(name: str, mysql: bool) -> str:
    quote = "`" if mysql else '"'
    return quote + name.replace(quote, quote * 2) + quote
