"""psql's default aligned table format (``\\pset format aligned``, border 1, ascii).

Reproduces, byte for byte, what ``psql`` prints for a result set, following
``print_aligned_text`` in PostgreSQL's ``src/fe_utils/print.c`` and
``pg_wcsformat``/``ucs_wcwidth`` for display widths. Rules:

* every cell is preceded by one space; cells are separated by ``" | "``;
* the header is centred: ``(w - len) // 2`` spaces before, the rest after
  (odd padding puts the extra space on the right); header lines always keep
  their trailing spaces, including the last column;
* the rule under the header is ``-`` for each column width plus one on each
  side, joined with ``+``;
* data cells are left-aligned, or right-aligned for numeric columns; the last
  column of a data line is not padded on the right, so a left-aligned last
  value has no trailing spaces (an empty/NULL last value leaves ``"| "``);
* NULL prints as the empty string (psql's default ``\\pset null``);
* a value containing newlines spans several lines; every line but its last
  is padded to the column width and followed by ``+`` instead of the space
  before the divider (a ``+`` even in the last column); other columns of the
  row are padded with blanks (the last column gets nothing);
* a multi-line header works the same way, with ``+`` markers;
* tabs expand to the next multiple of 8, ``\\r`` shows as ``\\r``, other
  control characters as ``\\xNN`` / ``\\uNNNN``;
* East Asian wide/fullwidth characters count two columns, combining marks
  (Mn, Me) zero; everything else one, including the em dash (East Asian
  "ambiguous") and format characters such as U+200B/U+00AD (psql 15 counts
  them as 1);
* the footer is ``(1 row)`` or ``(N rows)`` (``(0 rows)`` for an empty
  result); with zero columns the header line is absent and the rule is ``--``.

The returned text has no trailing newline; psql's blank line after the
footer is also not included.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

__all__ = ["format_table", "display_width"]

_ZERO_WIDTH_CATEGORIES = frozenset({"Mn", "Me"})


def _char_width(ch: str) -> int:
    """Display width of one printable character, as psql's ucs_wcwidth counts it."""
    category = unicodedata.category(ch)
    if category in _ZERO_WIDTH_CATEGORIES:
        return 0
    if category == "Cn":
        # CPython reports "F" for every unassigned code point; psql (following
        # EastAsianWidth.txt) counts them as 1, except in the CJK ideograph blocks.
        cp = ord(ch)
        return 2 if 0xF900 <= cp <= 0xFAFF or 0x20000 <= cp <= 0x3FFFD else 1
    if unicodedata.east_asian_width(ch) in ("W", "F"):
        return 2
    return 1


def _format_lines(value: str) -> list[tuple[str, int]]:
    """Split a value into display lines with their widths, as pg_wcsformat does."""
    # Text from the server never contains NUL; psql's C strings would stop there.
    value = value.split("\0", 1)[0]
    lines: list[tuple[str, int]] = []
    parts: list[str] = []
    width = 0
    for ch in value:
        cp = ord(ch)
        if ch == "\n":
            lines.append(("".join(parts), width))
            parts, width = [], 0
        elif ch == "\r":
            parts.append("\\r")
            width += 2
        elif ch == "\t":
            spaces = 8 - width % 8
            parts.append(" " * spaces)
            width += spaces
        elif cp < 0x20 or cp == 0x7F:
            parts.append(f"\\x{cp:02X}")
            width += 4
        elif 0x80 <= cp < 0xA0:
            parts.append(f"\\u{cp:04X}")
            width += 6
        else:
            parts.append(ch)
            width += _char_width(ch)
    lines.append(("".join(parts), width))
    return lines


def display_width(value: str) -> int:
    """Width psql gives a value: that of its widest line."""
    return max(w for _, w in _format_lines(value))


def format_table(
    columns: Sequence[str],
    numeric: Sequence[bool],
    rows: Sequence[Sequence[str | None]],
    omitted: int = 0,
    cut: int = 0,
    capped: bool = False,
) -> str:
    """Render a result set exactly as psql's default aligned output.

    ``numeric[i]`` right-aligns column ``i`` (missing entries mean text); a
    ``None`` value is SQL NULL. ``omitted`` rows the server sent but were not
    kept are counted in the footer: ``(N rows, M not shown)``, ``past 2 MiB`` when the
    result's byte cap left them out (``capped``), and the ``cut`` values too (engine/caps.py).
    The footer line ends the text; no newline follows it.
    """
    ncols = len(columns)
    right = [bool(numeric[i]) if i < len(numeric) else False for i in range(ncols)]
    headers = [_format_lines(name) for name in columns]
    cells = [
        [_format_lines("" if value is None else value) for value in row]
        for row in rows
    ]
    for row in cells:
        if len(row) != ncols:
            raise ValueError(f"row has {len(row)} values for {ncols} columns")

    widths = [max(w for _, w in lines) for lines in headers]
    for row in cells:
        for j, lines in enumerate(row):
            widths[j] = max(widths[j], max(w for _, w in lines))

    out: list[str] = []

    # Header: centred, every line padded to full width, "+" on continued lines.
    height = max((len(lines) for lines in headers), default=0)
    for k in range(height):
        line: list[str] = []
        for j, lines in enumerate(headers):
            line.append(" ")
            if k < len(lines):
                text, w = lines[k]
                pad = widths[j] - w
                line.append(" " * (pad // 2) + text + " " * ((pad + 1) // 2))
                line.append("+" if k + 1 < len(lines) else " ")
            else:
                line.append(" " * widths[j] + " ")
            if j < ncols - 1:
                line.append("|")
        out.append("".join(line))

    out.append("-" + "-+-".join("-" * w for w in widths) + "-")

    for row in cells:
        height = max(len(lines) for lines in row) if row else 0
        for k in range(height):
            line = []
            for j, lines in enumerate(row):
                last = j == ncols - 1
                line.append(" ")
                if k >= len(lines):
                    # This value has no more lines: blank it out, except at the end.
                    if not last:
                        line.append(" " * widths[j] + " |")
                    continue
                text, w = lines[k]
                more = k + 1 < len(lines)
                pad = " " * (widths[j] - w)
                if right[j]:
                    line.append(pad + text)
                elif last and not more:
                    line.append(text)
                else:
                    line.append(text + pad)
                if more:
                    line.append("+")
                elif not last:
                    line.append(" ")
                if not last:
                    line.append("|")
            out.append("".join(line))

    out.append(footer(len(rows), omitted, cut, capped))
    return "\n".join(out)


def footer(kept: int, omitted: int = 0, cut: int = 0, capped: bool = False) -> str:
    """psql's `(N rows)`, and what of them is not shown: rows left out, values cut."""
    from ..engine.caps import MAX_RESULT_BYTES, MAX_VALUE_BYTES, size_text

    n = kept + omitted
    parts = [f"{n} row" if n == 1 else f"{n} rows"]
    if omitted:
        parts.append(f"{omitted} not shown" + (f" past {size_text(MAX_RESULT_BYTES)}" if capped else ""))
    if cut:
        parts.append(f"{cut} value{'' if cut == 1 else 's'} cut to {size_text(MAX_VALUE_BYTES)}")
    return f"({', '.join(parts)})"
