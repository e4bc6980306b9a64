"""What scenario SQL may not do, found in its text before anything connects: the one check the
loader runs on every statement, setup and invariant.

A table's files go where DATA DIRECTORY or INDEX DIRECTORY say: the embedded MariaDB ignores
them (--symbolic-links=0), and a --dsn server does as long as the session's sql_mode holds
NO_DIR_IN_CREATE, which engine/mysql/server.py gives every session. So the words themselves are
refused on every engine, and on MariaDB and MySQL whatever could get round that reading:
naming sql_mode at all (in a string too, which PREPARE may run), SQL made at run time
(PREPARE or EXECUTE IMMEDIATE of anything but one string literal, whose text is then checked
as any other), executable comments (/*! */, /*M! */), which the server runs and a reader
takes for comments, and a capture's `:name` inside quotes or a comment: its value is sent as a
literal of its own, whose quotes would end those around it (or a newline in it the comment),
and the rest of the value would be SQL no reading here saw. A routine's, trigger's or event's
body is in its CREATE text, so the same reading sees it. Where a backslash makes the text
ambiguous, it is read each way a server's sql_mode may read it.
"""

from __future__ import annotations

import re

from ..engine import mysql
from ..engine.sql_lexer import END, EXECUTABLE, HINT, PUNCT, QUOTED, WORD, tokens, unquote
from .model import CAPTURE_REF

# Comments between the words included; in a string too (PREPARE may run it).
PLACES_FILES = re.compile(r"\b(DATA|INDEX)(?:\s|/\*.*?\*/|(?:--|#)[^\n]*\n)+DIRECTORY\b", re.IGNORECASE | re.DOTALL)
# Each refusal below needs one of these in the text as written (a capture's ':name' among them):
# text a string's escapes spell runs only through PREPARE or EXECUTE IMMEDIATE.
MAY_BE_REFUSED = re.compile(r"sql_mode|prepare|immediate|directory|/\*!|/\*m!|:[a-z_]", re.IGNORECASE)
# Backslashes escape in both quotes, in none (NO_BACKSLASH_ESCAPES), in ' alone (ANSI_QUOTES).
READINGS = ("'\"", "", "'")

SQL_MODE = (
    "sql_mode is refused, in a string too: the tool owns sql_mode: it keeps NO_DIR_IN_CREATE, "
    "which stops a table's files being put outside the server"
)
EXECUTABLE_COMMENT = (
    "an executable comment (/*! ... */, /*M! ... */) is refused: the server runs the SQL inside it, "
    "which a reader takes for a comment; write that SQL plainly"
)
CAPTURE_IN_TEXT = (
    "a capture's :name inside quotes or a comment is refused: its value is sent as a literal of its own, "
    "which would end the quotes or the comment around it; write :name where a value goes"
)


def refusal(sql: str, engine: str) -> tuple[int, str] | None:
    """Where in `sql` is what a scenario may not run on `engine`, and why; None if nothing."""
    found = _places_files(sql)
    if found or engine != mysql.NAME or not MAY_BE_REFUSED.search(sql):
        return found
    for escaping in READINGS if "\\" in sql else READINGS[:1]:
        found = _mysql_refusal(sql, escaping, captures=True)
        if found:
            return found
    return None


def _places_files(sql: str) -> tuple[int, str] | None:
    found = PLACES_FILES.search(sql)
    return None if found is None else (found.start(), _directory(found.group(1)))


def _directory(word: str) -> str:
    return (
        f"{word.upper()} DIRECTORY would put a table's files outside the server's data directory; "
        "scenario SQL may not choose where the server writes"
    )


def _capture_in_text(sql: str, found: list) -> tuple[int, str] | None:
    code = {start for kind, start, _end, text in found if kind == PUNCT and text == ":"}
    outside = next((m.start() for m in CAPTURE_REF.finditer(sql) if m.start() not in code), None)
    return None if outside is None else (outside, CAPTURE_IN_TEXT)


def _mysql_refusal(sql: str, escaping: str, captures: bool = False) -> tuple[int, str] | None:
    """The first refusal in `sql`; `captures`: whether `:name` is substituted in it (the text
    as written, not a literal's, which is inside quotes there)."""
    found = list(tokens(sql, True, escaping))
    caught = _capture_in_text(sql, found) if captures else None
    if caught:
        return caught
    for i, (kind, start, end, text) in enumerate(found):
        if kind == EXECUTABLE:
            return start, EXECUTABLE_COMMENT
        if kind in (WORD, QUOTED, HINT) and _names_sql_mode(sql, start, end, kind, escaping):
            return start, SQL_MODE
        if kind == WORD and text == "DIRECTORY" and i and found[i - 1][3] in ("DATA", "INDEX"):
            return found[i - 1][1], _directory(found[i - 1][3])
        dynamic = _dynamic(found, i)
        if dynamic:
            what, literal = dynamic
            if literal is None:
                return start, (
                    f"{what} anything but one string literal is refused: SQL made at run time "
                    "cannot be checked before it runs"
                )
            inside = _literal_refusal(sql, literal, escaping)
            if inside:
                return inside
    return None


def _names_sql_mode(sql: str, start: int, end: int, kind: str, escaping: str) -> bool:
    if "sql_mode" in sql[start:end].lower():
        return True
    return kind == QUOTED and "sql_mode" in unquote(sql, start, end, escaping)[0].lower()


def _dynamic(found: list, i: int) -> tuple[str, tuple | None] | None:
    """At a PREPARE or EXECUTE IMMEDIATE statement: what it is, and its one string literal
    (None when its text is anything else); None elsewhere."""
    words = [token[3] if token[0] == WORD else None for token in found[i : i + 3]]
    if words[:2] == ["EXECUTE", "IMMEDIATE"]:
        what, at, then = "EXECUTE IMMEDIATE", i + 2, {"USING"}
    elif len(words) == 3 and words[0] == "PREPARE" and found[i + 1][0] in (WORD, QUOTED) and words[2] == "FROM":
        what, at, then = "PREPARE ... FROM", i + 3, set()
    else:
        return None
    literal = found[at] if at < len(found) else None
    after = found[at + 1] if at + 1 < len(found) else None
    alone = after is None or after[0] == END or (after[0] == WORD and after[3] in then)
    if literal is None or literal[0] != QUOTED or literal[3] == "`" or not alone:
        return what, None
    return what, literal


def _literal_refusal(sql: str, literal: tuple, escaping: str) -> tuple[int, str] | None:
    """The refusal inside the text a PREPARE or EXECUTE IMMEDIATE runs, where it is in `sql`."""
    _kind, start, end, _quote = literal
    text, where = unquote(sql, start, end, escaping)
    found = _places_files(text) or _mysql_refusal(text, escaping)
    if found is None:
        return None
    offset, message = found
    return (where[offset] if offset < len(where) else start), message
