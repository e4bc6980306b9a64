"""SQL text cut into tokens the way MariaDB, MySQL or PostgreSQL lexes it: words, quoted text,
punctuation and statement ends, comments left out. What a reading cannot be sure of is a token
of its own, for the reader to decide: explore's schema_change.py takes it for a change, the
loader's scenario/sql_guard.py refuses what it must.

Both servers take only ASCII white space as space, and every character beyond ASCII as part of
a word, as they do in a name: a reading that split a word the server keeps whole could see
`PREPARE s FROM` where the server sees another name.
"""

from __future__ import annotations

WORD, QUOTED, PUNCT, END = "word", "quoted", "punct", ";"
# MySQL's /*! */ and MariaDB's /*M! */: a comment whose text the server runs.
EXECUTABLE = "executable"
# MySQL 8's optimizer hints, /*+ */: a comment the server reads (SET_VAR sets a variable).
HINT = "hint"
# A quote or comment never closed: the rest of the text is inside it.
OPEN = "open"
# Text the server could read otherwise than this reading: a backslash inside quotes when the
# reader does not know what it means, a dollar sign on PostgreSQL (dollar quoting), a carriage
# return in a PostgreSQL line comment (its end there, not MySQL's). The reading stops there.
UNCLEAR = "unclear"

SPACE = " \t\n\r\x0b\x0c"


def tokens(sql: str, mysql: bool, escaping: str | None = None):
    """(kind, start, end, text) of each token: a word's text upper case, quoted text's its quote
    character, punctuation its character. `escaping`: the quote characters inside which a
    backslash escapes the next character, as the session's sql_mode has it (MySQL: both quotes,
    none with NO_BACKSLASH_ESCAPES, ' alone with ANSI_QUOTES); None when unknown."""
    i, n = 0, len(sql)
    while i < n:
        c, start = sql[i], i
        if c in SPACE:
            i += 1
        elif _line_comment(sql, i, mysql):
            end = sql.find("\n", i)
            end = n if end < 0 else end
            if not mysql and "\r" in sql[i:end]:
                yield UNCLEAR, i, n, ""
                return
            i = end + 1
        elif sql.startswith("/*", i):
            kind, i = _comment_kind(sql, i, mysql), _block_comment(sql, i, mysql)
            if kind:
                yield kind, start, n if i < 0 else i, ""
            if i < 0:
                yield OPEN, start, n, "/*"
                return
        elif c in "'\"" or (mysql and c == "`"):
            i = _quoted(sql, i, escaping if c != "`" else "")
            if i < 0:
                yield (UNCLEAR, start, n, "") if i == -2 else (OPEN, start, n, c)
                return
            yield QUOTED, start, i, c
        elif c == "$" and not mysql:
            yield UNCLEAR, i, n, ""
            return
        elif c == ";":
            i += 1
            yield END, start, i, c
        elif _in_word(c):
            while i < n and _in_word(sql[i]):
                if sql[i] == "$" and not mysql:
                    yield UNCLEAR, i, n, ""
                    return
                i += 1
            yield WORD, start, i, sql[start:i].upper()
        else:
            i += 1
            yield PUNCT, start, i, c


def _in_word(c: str) -> bool:
    return c.isascii() and (c.isalnum() or c in "_$") or not c.isascii()


def _line_comment(sql: str, i: int, mysql: bool) -> bool:
    if not mysql:
        return sql.startswith("--", i)
    if sql[i] == "#":
        return True
    # MySQL reads "--" as a comment only before a space or a control character.
    return sql.startswith("--", i) and (i + 2 == len(sql) or sql[i + 2] <= " ")


def _comment_kind(sql: str, i: int, mysql: bool) -> str | None:
    if not mysql:
        return None
    if sql.startswith("/*!", i) or sql[i + 2 : i + 4].upper() == "M!":
        return EXECUTABLE
    return HINT if sql.startswith("/*+", i) else None


def _block_comment(sql: str, i: int, mysql: bool) -> int:
    """Where the comment starting at `i` ends (-1: never): PostgreSQL's nest, MySQL's do not."""
    if mysql:
        end = sql.find("*/", i + 2)
        return -1 if end < 0 else end + 2
    depth, j = 0, i
    while j < len(sql):
        if sql.startswith("/*", j):
            depth, j = depth + 1, j + 2
        elif sql.startswith("*/", j):
            depth, j = depth - 1, j + 2
            if depth == 0:
                return j
        else:
            j += 1
    return -1


def _quoted(sql: str, i: int, escaping: str | None) -> int:
    """Past the quoted text starting at `i`; a doubled quote stays inside, and so does a
    character a backslash escapes. -1: never closed; -2: a backslash of unknown meaning."""
    quote, j = sql[i], i + 1
    while j < len(sql):
        if sql[j] == "\\":
            if escaping is None:
                return -2
            if quote in escaping:
                j += 2
                continue
        if sql[j] == quote:
            if sql.startswith(quote * 2, j):
                j += 2
                continue
            return j + 1
        j += 1
    return -1


# MySQL's escapes in a string; any other escaped character is itself, but \% and \_ keep their
# backslash (they are LIKE's).
ESCAPES = {"0": "\0", "b": "\b", "n": "\n", "r": "\r", "t": "\t", "Z": "\x1a", "%": "\\%", "_": "\\_"}


def unquote(sql: str, start: int, end: int, escaping: str) -> tuple[str, list[int]]:
    """The text of the quoted token sql[start:end] as MySQL reads it, and where in `sql` each
    of its characters came from."""
    quote, text, where = sql[start], [], []
    j = start + 1
    while j < end - 1:
        c, origin = sql[j], j
        if c == "\\" and quote in escaping:
            c = ESCAPES.get(sql[j + 1], sql[j + 1])
            j += 2
        else:
            j += 2 if c == quote else 1
        text.append(c)
        where += [origin] * len(c)
    return "".join(text), where
