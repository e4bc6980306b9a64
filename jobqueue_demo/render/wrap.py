"""Every line a view writes fits its width: the one wrapping all views share.

Text breaks at spaces, continuation lines indented; a word is cut only when it alone is wider
than the line. Narration is prose: its source's single line breaks are spaces, blank lines
are paragraph breaks. Our own tables too wide for the width wrap their long values inside
their cells, else are cut into several tables each repeating the key columns, else are shown
expanded (psql's \\x). Only a server's result table keeps psql's form whatever the width: it
is what the server returned. A file or a pipe (no width) is not wrapped.
"""

from __future__ import annotations

from collections.abc import Sequence

from .table import display_width, format_table

# Terminal cells a line takes, counted as psql counts them (wide characters two).
cells = display_width


def terminal_width(stream) -> int | None:
    """The width of the terminal `stream` writes to; None for a file or a pipe, which are not wrapped."""
    if not stream.isatty():
        return None
    import shutil

    return shutil.get_terminal_size().columns


def fold(text: str, width: int) -> list[str]:
    """Cut `text` into pieces of at most `width` cells, wherever that falls."""
    out, piece, used = [], "", 0
    for char in text:
        size = display_width(char)
        if used + size > width and piece:
            out.append(piece)
            piece, used = "", 0
        piece += char
        used += size
    return out + [piece] if piece or not out else out


def wrap(text: str, width: int | None, indent: str = "") -> list[str]:
    """Word-wrap one line to `width` cells, later lines starting with `indent`; a word wider
    than the line is folded. Leading spaces are kept, since they align SQL under its prompt.
    `width` None: the line as it is."""
    if width is None:
        return [text]
    indent = indent[: width // 2]
    body = text.expandtabs(4).lstrip(" ")
    out: list[str] = []
    line = text[: len(text) - len(body)]
    for word in body.split(" "):
        candidate = f"{line} {word}" if line.strip() else line + word
        if cells(candidate) <= width:
            line = candidate
            continue
        if line.strip():
            out.append(line)
            line = indent + word
        else:
            line = candidate
        while cells(line) > width:
            head = fold(line, width)[0]
            out.append(head)
            line = indent + line[len(head):]
    return out + [line] if line.strip() or not out else out


def wrap_lines(text: str, width: int | None, indent: str = "") -> list[str]:
    """Each line of `text` wrapped on its own: its line breaks are kept."""
    return [piece for line in text.split("\n") for piece in wrap(line, width, indent)]


def paragraphs(text: str) -> list[str]:
    """Prose as paragraphs: lines joined with spaces, a blank line between paragraphs."""
    found = [" ".join(chunk.split()) for chunk in text.strip().split("\n\n")]
    return [p for p in found if p]


def reflow(text: str, width: int | None, indent: str = "") -> list[str]:
    """Prose rewrapped to `width`, paragraphs apart; `width` None leaves it as written."""
    if width is None:
        return text.split("\n")
    out: list[str] = []
    for paragraph in paragraphs(text):
        out += ([""] if out else []) + wrap(paragraph, width, indent)
    return out


def fitted_table(columns: Sequence[str], numeric: Sequence[bool], rows: Sequence[Sequence[str | None]],
                 width: int | None, keys: int = 1) -> str:
    """Our own table in psql's form, within `width`: one table with long values wrapped in
    their cells, else several tables each with the first `keys` columns, else expanded. On a
    terminal the header's trailing blanks go too: one past the edge would wrap."""
    whole = format_table(columns, numeric, rows)
    if width is None:
        return whole
    if _widest(whole) > width:
        # One table whose long values wrap inside their cells reads best, when it fits.
        whole = _shrunk_table(list(range(len(columns))), columns, numeric, rows, width)
    if _widest(whole) > width:
        groups = _column_groups(columns, numeric, rows, width, keys)
        whole = "\n\n".join(_table_of(group, columns, numeric, rows, width, keys) for group in groups)
    if _widest(whole) > width:  # not even the key columns fit: one `column | value` line each
        whole = "\n".join(expanded(columns, rows, width))
    return "\n".join(line.rstrip() for line in whole.split("\n"))


def _widest(table: str) -> int:
    return max(cells(line.rstrip()) for line in table.split("\n"))


def _column_groups(columns, numeric, rows, width: int, keys: int) -> list[list[int]]:
    """The other columns, in order, as many to a table as fit beside the key columns."""
    groups: list[list[int]] = []
    for index in range(keys, len(columns)):
        trial = [*groups[-1], index] if groups else [index]
        if groups and _widest(_project(trial, columns, numeric, rows, keys)) <= width:
            groups[-1] = trial
        else:
            groups.append([index])
    return groups or [[]]


def _project(group, columns, numeric, rows, keys: int) -> str:
    picked = [*range(keys), *group]
    return format_table([columns[i] for i in picked], [numeric[i] for i in picked], [[r[i] for i in picked] for r in rows])


def _table_of(group, columns, numeric, rows, width: int, keys: int) -> str:
    table = _project(group, columns, numeric, rows, keys)
    return table if _widest(table) <= width else _shrunk_table([*range(keys), *group], columns, numeric, rows, width)


def _shrunk_table(picked: list[int], columns, numeric, rows, width: int) -> str:
    """The `picked` columns with the widest narrowed to fit `width`, their values wrapping at
    spaces inside their cells; no column narrower than its heading or its longest word."""
    natural = [max([cells(columns[i]), *(cells(r[i] or "") for r in rows)]) for i in picked]
    floors = [max([cells(columns[i]), *(cells(w) for r in rows for w in (r[i] or "").split())]) for i in picked]
    room = _shrunk(natural, floors, width - 3 * (len(picked) - 1) - 2)
    wrapped = [["\n".join(wrap_lines(r[i], w)) if r[i] else r[i] for i, w in zip(picked, room)] for r in rows]
    return format_table([columns[i] for i in picked], [numeric[i] for i in picked], wrapped)


def _shrunk(widths: list[int], floors: list[int], budget: int) -> list[int]:
    """Column widths summing to `budget` at most: the widest narrowed first, none below its floor."""
    widths = list(widths)
    while sum(widths) > budget:
        shrinkable = [i for i, w in enumerate(widths) if w > floors[i]]
        if not shrinkable:
            break
        widths[max(shrinkable, key=lambda i: widths[i])] -= 1
    return widths


def expanded(columns, rows, width: int) -> list[str]:
    """One `name | value` line per column and a `-[ RECORD n ]` rule per row, as psql's \\x."""
    names = max(cells(c) for c in columns)
    values = max((cells(v or "") for row in rows for v in row), default=0)
    longest = max((cells(w) for row in rows for v in row for w in (v or "").split()), default=0)
    # When a word would not fit beside the names, each value goes under its name instead.
    stacked = longest > width - names - 3
    out = []
    for number, row in enumerate(rows, 1):
        head = f"-[ RECORD {number} ]"
        if len(head) <= names + 1 and not stacked:
            out.append(head + "-" * (names + 1 - len(head)) + "+" + "-" * min(values + 1, width - names - 2))
        else:  # the `+` would not sit over a ` | ` below it
            out.append(head + "-" * max(0, min(width, names + values + 3) - len(head)))
        for name, value in zip(columns, row):
            out += _stacked(name, value or "", width) if stacked else _field(name, names, value or "", width)
    return out or ["(0 rows)"]


def _stacked(name: str, value: str, width: int) -> list[str]:
    return [name] + [f"  {part}" for text in value.split("\n") for part in wrap(text, width - 2)]


def _field(name: str, names: int, value: str, width: int) -> list[str]:
    """`name | value`, the value wrapping at spaces under itself."""
    room = width - names - 3
    out, label = [], name + " " * (names - cells(name))
    for part in (p for text in value.split("\n") for p in wrap(text, max(2, room))):
        out.append(f"{label} | {part}".rstrip())
        label = " " * names
    return out
