"""`run`, `verify` and `explore` with --matrix: one table across combinations of settings."""

from __future__ import annotations

MATRIX_HELP = (
    "NAME=V1,V2: run under each value of a server variable (or isolation, for every session); "
    "repeat for more axes, every combination is run. Prints a table of what differs. Global-only "
    "variables are set on the private embedded server only; for read-only ones a second embedded "
    "server is started with the value."
)


def check_axes(texts: list[str]) -> None:
    """Refuse a malformed --matrix before any server is started."""
    from .. import api

    api.check_matrix(texts)


def lesson_matrix_command(loaded: list, dsn: str | None, matrix: list[str], step_timeout: float, checking: bool) -> None:
    """`run` shows the differences (expected under other settings); `verify` fails on them."""
    from typer import Exit

    from ..errors import EXIT_MISMATCH
    from .shared import server_for

    check_axes(matrix)
    with server_for(dsn) as server:
        if not lesson_matrix(loaded, server, matrix, step_timeout) and checking:
            raise Exit(EXIT_MISMATCH)


def lesson_matrix(loaded: list, server, texts: list[str], step_timeout: float) -> bool:
    """Runs each scenario under every combination and prints the steps that differ; True
    when every combination met every expectation."""
    import sys

    from .. import api
    from ..render.matrix import lesson_matrix_lines, restart_lines
    from ..render.wrap import terminal_width

    runs, tables = api.lesson_matrix(loaded, server, texts, step_timeout)
    width = terminal_width(sys.stdout)
    for table in tables:
        print("\n".join(lesson_matrix_lines(runs, table, server.label, width)))
    for line in restart_lines(runs, width):
        print(line)
    return all(table.met for table in tables)


def explore_matrix(loaded, server, texts: list[str], options) -> bool:
    """Explores under every combination; prints outcome counts and findings side by side.
    True when no combination violated an invariant or got stuck."""
    import sys

    from .. import api
    from ..render.matrix import explore_matrix_lines
    from ..render.wrap import terminal_width

    runs = api.explore_matrix(loaded, server, texts, options)
    print("\n".join(explore_matrix_lines(runs, loaded.path, server.label, terminal_width(sys.stdout))))
    return not any(report.failed for report in runs.results)
