"""The hermitage-style table of a --matrix run: one column per combination of settings."""

from __future__ import annotations

from .wrap import fitted_table, wrap


def matrix_text(combinations, first: str, rows: list[tuple[str, ...]], width: int | None = None) -> str:
    """A legend naming each combination [1], [2], ..., then the table with `first` as its
    first column's heading; combinations are too wide to head a column each. Within `width`
    (a terminal's): the table cut into tables that each keep the first column."""
    legend = [f"[{i}] " + " ".join(map(str, c)) for i, c in enumerate(combinations, 1)]
    columns = (first, *(f"[{i}]" for i in range(1, len(combinations) + 1)))
    table = fitted_table(columns, (False,) * len(columns), rows, width)
    return "\n".join([piece for line in legend for piece in wrap(line, width, "    ")] + [table])


def _fitted(lines: list[str], width: int | None) -> list[str]:
    return [piece for line in lines for piece in wrap(line, width, "   ")]


def lesson_matrix_lines(runs, table, server_label: str, width: int | None = None) -> list[str]:
    """One scenario's table for run and verify --matrix: the steps that differ, then each
    combination's expectations."""
    found = table.differences
    rows = [(label, *cells) for label, cells in zip(found.labels, found.rows)]
    rows.append(("expectations", *table.summaries))
    return [
        *_fitted([f"-- {table.scenario.path}: {len(runs.combinations)} combination(s) on {server_label}"], width),
        matrix_text(runs.combinations, "step", rows, width),
        *_fitted([f"-- {found.same} statement(s) with the same outcome everywhere are not shown"], width),
    ]


def restart_lines(runs, width: int | None = None) -> list[str]:
    started = [f"-- a second embedded server started with {' '.join(r.options)}: {r.seconds:.2f} s" for r in runs.restarts]
    return _fitted(started, width)


def explore_matrix_lines(runs, scenario_path: str, server_label: str, width: int | None = None) -> list[str]:
    """explore --matrix: outcome counts and findings side by side, then the verdict."""
    from ..explore.search import OUTCOMES

    reports, plan = runs.results, runs.combinations
    rows = [(kind, *(f"{r.counts[kind]:,}" for r in reports)) for kind in OUTCOMES]
    for kind, what in dict.fromkeys((f.kind, f.what) for r in reports for f in r.findings):
        cells = []
        for report in reports:
            found = next((f for f in report.findings if (f.kind, f.what) == (kind, what)), None)
            cells.append(f"{found.schedules:,} of {report.explored:,}" if found else "-")
        rows.append((f"{kind}: {what}", *cells))
    failed = [f"[{i}]" for i, r in enumerate(reports, 1) if r.failed]
    if failed:
        verdict = f"verdict: FAILED under {', '.join(failed)} of {len(plan)} combination(s) (exit 1)"
    else:
        verdict = f"verdict: invariants hold, no unexpected error and nothing got stuck under all {len(plan)} combination(s)"
    header = f"-- {scenario_path}: {len(plan)} combination(s) on {server_label}"
    return [*_fitted([header], width), matrix_text(plan, "schedules", rows, width), *restart_lines(runs, width),
            *_fitted([verdict], width)]
