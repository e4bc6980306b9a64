"""The hermitage-style table of a --matrix run: one column per combination of settings."""

from __future__ import annotations

from .table import format_table


def matrix_text(combinations, first: str, rows: list[tuple[str, ...]]) -> str:
    """A legend naming each combination [1], [2], ..., then the table with `first` as its
    first column's heading; combinations are too wide to head a column each."""
    legend = [f"[{i}] " + " ".join(map(str, c)) for i, c in enumerate(combinations, 1)]
    columns = (first, *(f"[{i}]" for i in range(1, len(combinations) + 1)))
    table = format_table(columns, (False,) * len(columns), rows)
    return "\n".join(legend + [table])
