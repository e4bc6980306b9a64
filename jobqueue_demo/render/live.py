"""Rich views of a workers run: the live per-worker table, the summary, and the bench table."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from rich.console import Console
from rich.live import Live
from rich.table import Table

from ..sweep import SweepResult, SweepRow
from .table import format_table
from ..workers import Progress, WorkersSummary

REFRESH_PER_S = 4


def progress_table(progress: Progress) -> Table:
    table = Table(
        title=f"{progress.completed}/{progress.jobs} jobs  {progress.jobs_per_s:,.0f} jobs/s  "
        f"{progress.elapsed_s:.1f} s",
        caption=f"row lock waits (server-wide) {progress.row_lock_waits:,}   killed {progress.killed}",
    )
    # Short headings keep nine columns inside an 80-column terminal.
    for name in ("worker", "state", "done", "claims", "empty", "deadlock", "timeout", "nowait", "retries"):
        table.add_column(name, justify="left" if name == "state" else "right")
    for w in progress.workers:
        counts = (w.completed, w.claims, w.empty, w.deadlocks, w.lock_timeouts, w.nowait_failures, w.retries)
        table.add_row(str(w.index), w.state, *(f"{n:,}" for n in counts))
    return table


@contextlib.contextmanager
def live_progress(console: Console) -> Iterator:
    """A callback that redraws the progress table in place; the table disappears at the end."""
    with Live(console=console, refresh_per_second=REFRESH_PER_S, transient=True) as live:
        yield lambda progress: live.update(progress_table(progress))


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f} ms"


def summary_table(s: WorkersSummary) -> Table:
    table = Table(title=f"{s.strategy}, {s.workers} workers, {s.isolation}, {s.server}", show_header=False)
    table.add_column("measure")
    table.add_column("value", justify="right")
    rows = [
        ("jobs completed", f"{s.completed:,} of {s.jobs:,}"),
        ("seconds", f"{s.seconds:.3f}"),
        ("jobs/s", f"{s.jobs_per_s:,.1f}"),
        ("claim p50 / p99", f"{_ms(s.claim_ms_p50)} / {_ms(s.claim_ms_p99)}"),
        ("deadlocks (1213)", f"{s.deadlocks:,}"),
        ("lock wait timeouts (1205)", f"{s.lock_wait_timeouts:,}"),
        ("NOWAIT failures", f"{s.nowait_failures:,}"),
        ("row lock waits (server-wide)", f"{s.row_lock_waits:,}"),
        ("empty claims", f"{s.empty_claims:,}"),
        ("retries", f"{s.retries:,}"),
        ("killed", _killed(s)),
        ("lost", f"{s.lost:,}"),
        ("duplicated (second completions)", f"{s.duplicated:,}"),
        ("external effects / duplicates", f"{s.effects:,} / {s.external_duplicates:,}"),
    ]
    if s.idempotency_key:
        rows.append(("effects de-duplicated by key", f"{s.deduplicated:,}"))
    for name, value in rows:
        table.add_row(name, value)
    return table


def _killed(s: WorkersSummary) -> str:
    if not s.killed:
        return "0"
    noticed = ", ".join(f"{ms:.1f}" for ms in s.notice_ms)
    return f"{s.killed} (server noticed after {noticed} ms; {s.reclaimed} held job(s) done by others)"


def bench_table(result: SweepResult) -> str:
    """The sweep in psql's aligned format: plain text that pipes and diffs well, any width."""
    columns = (
        "isolation", "strategy", "workers", "jobs/s", "of ceiling",
        "claim p50 ms", "claim p99 ms", "deadlocks", "nowait fails", "retries",
    )
    rows = [_bench_row(row) for row in result.rows]
    title = f"jobs/s by strategy and workers: {result.jobs} jobs, work {result.work_ms:g} ms, {result.server}"
    return title + "\n" + format_table(columns, [False, False] + [True] * 8, rows)


def _bench_row(row: SweepRow) -> tuple:
    run = row.run
    return (
        run.isolation, run.strategy, str(run.workers), f"{run.jobs_per_s:.0f}", f"{row.ceiling_share:.0%}",
        _number(run.claim_ms_p50), _number(run.claim_ms_p99), str(run.deadlocks), str(run.nowait_failures), str(run.retries),
    )


def _number(value: float | None) -> str | None:
    return None if value is None else f"{value:.2f}"
