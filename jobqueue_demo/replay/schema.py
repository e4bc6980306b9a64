"""The tables a report's locks are on, read from the user's CREATE TABLE and CREATE INDEX
statements (MariaDB/MySQL or PostgreSQL): each column's type, and each index's columns in
order, which is what an InnoDB record's fields are."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..engine.sql_lexer import END, OPEN, QUOTED, UNCLEAR, WORD, tokens
from ..errors import ReportError

PRIMARY = "PRIMARY"


@dataclass
class Column:
    name: str
    type: str  # lower case, e.g. "int", "varchar", "enum"
    unsigned: bool = False
    values: tuple[str, ...] = ()  # an ENUM's, in order
    nullable: bool = True
    default: str | None = None  # the DEFAULT's SQL text
    generated: bool = False  # AUTO_INCREMENT, SERIAL, IDENTITY: the server picks it


@dataclass
class Index:
    name: str
    columns: tuple[str, ...]
    unique: bool = False


@dataclass
class Table:
    name: str
    columns: dict[str, Column] = field(default_factory=dict)
    indexes: dict[str, Index] = field(default_factory=dict)  # PRIMARY first when there is one

    @property
    def primary(self) -> Index | None:
        return self.indexes.get(PRIMARY)

    def index(self, name: str) -> Index | None:
        return next((i for key, i in self.indexes.items() if key.lower() == name.lower()), None)

    def record_fields(self, index: Index) -> list[str | None]:
        """The columns of an InnoDB record of `index`, in order (None: a system field): the
        clustered index holds the key, the transaction id and roll pointer, then every other
        column; a secondary index its own columns, then the primary key's it lacks."""
        key = list(self.primary.columns) if self.primary else []
        if index.name == PRIMARY:
            return key + [None, None] + [c for c in self.columns if c not in key]
        return list(index.columns) + [c for c in key if c not in index.columns]


def read_schema(path: str, sql: str, mysql: bool) -> dict[str, Table]:
    """Table name -> Table, for every CREATE TABLE and CREATE INDEX of the text."""
    tables: dict[str, Table] = {}
    for statement in _statements(sql, mysql):
        words = [t[3] for t in statement[:4] if t[0] == WORD]
        if words[:2] == ["CREATE", "TABLE"] or words[:3] in (["CREATE", "TEMPORARY", "TABLE"],):
            table = _table(path, sql, statement)
            tables[table.name] = table
        elif words[:2] in (["CREATE", "INDEX"], ["CREATE", "UNIQUE"]):
            _index(sql, statement, tables)
    return tables


def _statements(sql: str, mysql: bool):
    current = []
    for token in tokens(sql, mysql):
        if token[0] in (OPEN, UNCLEAR):
            break
        if token[0] == END:
            if current:
                yield current
            current = []
        else:
            current.append(token)
    if current:
        yield current


def _name(sql: str, token) -> str:
    kind, start, end, text = token
    return sql[start + 1: end - 1] if kind == QUOTED else sql[start:end]


def _table(path: str, sql: str, statement: list) -> Table:
    i = next(n for n, t in enumerate(statement) if t[3] == "TABLE") + 1
    while statement[i][3] in ("IF", "NOT", "EXISTS"):
        i += 1
    name_at = i
    while i + 1 < len(statement) and statement[i + 1][3] == ".":
        i += 2  # schema.table: the table's own name is the last
        name_at = i
    table = Table(_name(sql, statement[name_at]))
    if i + 1 >= len(statement) or statement[i + 1][3] != "(":
        raise ReportError(path, f"CREATE TABLE {table.name} has no column list this reads (CREATE TABLE … LIKE / AS is not read)")
    for item in _items(statement[i + 2:]):
        _item(sql, item, table)
    return table


def _items(body: list) -> list[list]:
    """The comma-separated items inside the table's parentheses."""
    items, current, depth = [], [], 0
    for token in body:
        if token[3] == "(":
            depth += 1
        elif token[3] == ")":
            if depth == 0:
                break
            depth -= 1
        if token[3] == "," and depth == 0:
            items.append(current)
            current = []
        else:
            current.append(token)
    return items + ([current] if current else [])


def _columns_in(sql: str, item: list, start: int) -> tuple[str, ...]:
    """The column names inside the first parentheses at or after `start`, prefix lengths and ASC/DESC left out."""
    open_at = next((n for n in range(start, len(item)) if item[n][3] == "("), None)
    if open_at is None:
        return ()
    out, depth, expecting = [], 0, True
    for token in item[open_at + 1:]:
        if token[3] == "(":
            depth += 1
        elif token[3] == ")":
            if depth == 0:
                break
            depth -= 1
        elif depth == 0 and token[3] == ",":
            expecting = True
        elif depth == 0 and expecting and token[0] in (WORD, QUOTED):
            out.append(_name(sql, token))  # a prefix length, ASC or DESC after it is not a column
            expecting = False
    return tuple(out)


def _item(sql: str, item: list, table: Table) -> None:
    first = item[0][3] if item else ""
    words = [t[3] for t in item if t[0] == WORD]
    if first == "CONSTRAINT":
        item = item[2:]
        first = item[0][3] if item else ""
    if first == "PRIMARY":
        table.indexes = {PRIMARY: Index(PRIMARY, _columns_in(sql, item, 0), True), **table.indexes}
    elif first in ("KEY", "INDEX", "UNIQUE", "FULLTEXT", "SPATIAL", "FOREIGN", "CHECK", "EXCLUDE"):
        if first in ("FULLTEXT", "SPATIAL", "CHECK", "EXCLUDE"):
            return
        columns = _columns_in(sql, item, 0)
        named = [t for t in item[1:3] if t[3] not in ("KEY", "INDEX", "(")]
        name = _name(sql, named[0]) if named and named[0][3] != "(" else (columns[0] if columns else "")
        if first == "FOREIGN" and any(i.columns[: len(columns)] == columns for i in table.indexes.values()):
            return  # InnoDB makes an index for a foreign key only when none starts with its columns
        table.indexes.setdefault(name, Index(name, columns, first == "UNIQUE"))
    elif item:
        _column(sql, item, words, table)


def _column(sql: str, item: list, words: list[str], table: Table) -> None:
    name = _name(sql, item[0])
    kind = item[1][3].lower() if len(item) > 1 else ""
    values = ()
    if kind in ("enum", "set") and len(item) > 2 and item[2][3] == "(":
        inside = item[3: next((n for n in range(3, len(item)) if item[n][3] == ")"), len(item))]
        values = tuple(_name(sql, t).replace("''", "'") for t in inside if t[0] == QUOTED and t[3] == "'")
    column = Column(name, kind, "UNSIGNED" in words, values, "NOT" not in _before_null(words),
                    _default(sql, item), kind in ("serial", "bigserial", "smallserial") or "AUTO_INCREMENT" in words
                    or "IDENTITY" in words)
    table.columns[name] = column
    if "PRIMARY" in words:
        table.indexes = {PRIMARY: Index(PRIMARY, (name,), True), **table.indexes}
        column.nullable = False
    elif "UNIQUE" in words:
        table.indexes.setdefault(name, Index(name, (name,), True))


def _before_null(words: list[str]) -> list[str]:
    return [words[i - 1] for i, w in enumerate(words) if w == "NULL" and i > 0] + (["NOT"] if "PRIMARY" in words else [])


def _default(sql: str, item: list) -> str | None:
    at = next((n for n, t in enumerate(item) if t[3] == "DEFAULT"), None)
    if at is None or at + 1 >= len(item):
        return None
    token = item[at + 1]
    return sql[token[1]: token[2]]


def _index(sql: str, statement: list, tables: dict[str, Table]) -> None:
    """CREATE [UNIQUE] INDEX name ON table (columns)."""
    unique = statement[1][3] == "UNIQUE"
    on = next((n for n, t in enumerate(statement) if t[3] == "ON"), None)
    if on is None or on + 1 >= len(statement):
        return
    name_token = statement[on - 1]
    table_at = on + 1
    while table_at + 2 < len(statement) and statement[table_at + 1][3] == ".":
        table_at += 2
    table = tables.get(_name(sql, statement[table_at]))
    if table is not None:
        name = _name(sql, name_token)
        table.indexes.setdefault(name, Index(name, _columns_in(sql, statement, table_at), unique))
