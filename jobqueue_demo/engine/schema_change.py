"""Whether a step's SQL may change the schema, read from its text the way the server lexes it.

Explore restores the tables' rows from a copy only when the steps change nothing else: a
table, trigger, rule or function a step makes would outlive the restore, and one that fires
on it would run inside the tool's reset. So every statement of a step (a step may send
several) must start with a word of ROWS_ONLY, and a query must not hold INTO (PostgreSQL's
SELECT ... INTO makes a table). Anything else counts as a change: CREATE behind a comment,
DO, CALL, PREPARE and EXECUTE (MySQL prepares DDL), MariaDB's SET STATEMENT ... FOR a change and
BEGIN NOT ATOMIC (a compound statement), EXPLAIN (EXPLAIN ANALYZE runs its
statement), a word not listed. So does text the server could read otherwise than this
reading: a backslash inside quotes (its meaning hangs on standard_conforming_strings or
sql_mode), a dollar sign on PostgreSQL (dollar quoting), MySQL's executable comments
(/*! */, /*M! */). A needless rebuild costs time; a missed change costs a wrong reset.
"""

from __future__ import annotations

from .sql_lexer import END, EXECUTABLE, HINT, OPEN, UNCLEAR, tokens

ROWS_ONLY = frozenset(
    "SELECT INSERT UPDATE DELETE REPLACE MERGE WITH VALUES TABLE BEGIN START COMMIT END ROLLBACK ABORT "
    "SAVEPOINT RELEASE SET RESET SHOW LOCK UNLOCK DECLARE FETCH MOVE CLOSE DISCARD DEALLOCATE "
    "LISTEN NOTIFY UNLISTEN XA HANDLER".split()
)
# After one of these, INTO names the table rows go into, not a new one.
WRITES_INTO = frozenset({"INSERT", "REPLACE", "MERGE"})
# Statements that change no row of a table (a row lock taken by SELECT ... FOR UPDATE moves
# no row and changes no value). WITH is left out: a CTE may hold an UPDATE.
READS_ROWS = frozenset(
    "SELECT VALUES TABLE BEGIN START COMMIT END ROLLBACK ABORT SAVEPOINT RELEASE SET RESET SHOW LOCK "
    "DECLARE FETCH MOVE CLOSE DISCARD DEALLOCATE LISTEN NOTIFY UNLISTEN".split()
)


class _Unclear(Exception):
    """Text this reading cannot be sure the server reads the same way."""


def steps_obstacle(steps, mysql: bool) -> str | None:
    """Why restoring rows would not reset what the steps and invariants (their SQL) do, or None."""
    return "the steps or invariants may change the schema" if any(changes_schema(sql, mysql) for sql in steps) else None


def changes_schema(sql: str, mysql: bool) -> bool:
    try:
        statements = _statements(sql, mysql)
    except _Unclear:
        return True
    return any(_changes(words) for words in statements)


def may_write_rows(sql: str, mysql: bool) -> bool:
    """Whether `sql` may insert, change or delete a row: any statement not of READS_ROWS, or
    holding INTO, and any text this reading is unsure of. Whether a function a SELECT calls
    writes is the caller's to know."""
    try:
        statements = _statements(sql, mysql)
    except _Unclear:
        return True
    return any(_writes(words) for words in statements)


def _writes(words: list[str]) -> bool:
    words = words[next((i for i, w in enumerate(words) if w != "("), len(words)):]
    return bool(words) and (words[0] not in READS_ROWS or "INTO" in words)


def _changes(words: list[str]) -> bool:
    words = words[next((i for i, w in enumerate(words) if w != "("), len(words)):]
    if not words:
        return False
    if words[0] not in ROWS_ONLY:
        return True
    # MariaDB's SET STATEMENT ... FOR runs the statement after FOR, and BEGIN NOT ATOMIC
    # starts a compound statement (EXECUTE IMMEDIATE of any text inside): one statement each.
    if words[:2] == ["SET", "STATEMENT"]:
        return "FOR" not in words or any(_changes(words[i + 1:]) for i, w in enumerate(words) if w == "FOR")
    if words[:2] == ["BEGIN", "NOT"]:
        return True
    writes = False
    for word in words:
        writes = writes or word in WRITES_INTO
        if word == "INTO" and not writes:
            return True
    return False


def _statements(sql: str, mysql: bool) -> list[list[str]]:
    """The words of each statement (upper case; quoted text and punctuation as one character)."""
    statements: list[list[str]] = [[]]
    for kind, _start, _end, text in tokens(sql, mysql):
        if kind in (EXECUTABLE, OPEN, UNCLEAR):
            raise _Unclear
        if kind == END:
            statements.append([])
        elif kind != HINT:
            statements[-1].append(text)
    return statements
