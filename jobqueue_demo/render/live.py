"""Rich views of a workers run: the live per-worker table, the summary, and the bench table."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from rich import box
from rich.console import Console
from rich.live import Live
from rich.measure import Measurement
from rich.progress import BarColumn, MofNCompleteColumn, Progress as Bar, TextColumn, TimeRemainingColumn
from rich.table import Table

from ..workers.sweep import SweepResult, SweepRow
from ..workers.crew import Progress, WorkerView, WorkersSummary

REFRESH_PER_S = 4
# Short runs finish before a live display would help; it appears once a run passes this.
SHOW_AFTER_S = 2.0
# The per-worker columns, most wanted first: at a narrow width the last ones are left out
# (and named in the caption) rather than cutting headings.
WORKER_COLUMNS = (
    ("worker", lambda w: str(w.index)),
    ("state", lambda w: w.state),
    ("done", lambda w: w.completed),
    ("claims", lambda w: w.claims),
    ("deadlocks", lambda w: w.deadlocks),
    ("retries", lambda w: w.retries),
    ("empty", lambda w: w.empty),
    ("timeouts", lambda w: w.lock_timeouts),
    ("nowait", lambda w: w.nowait_failures),
    ("leases lost", lambda w: w.leases_lost),
    ("serial. fails", lambda w: w.serialization_failures),
)
ALWAYS_SHOWN = 4


def worker_table(workers: list[WorkerView], width: int, title: str = "", caption: str = "") -> Table:
    """The per-worker counts with whole headings, as many columns as fit in `width`."""
    shown = len(WORKER_COLUMNS)
    while True:
        table = _worker_table(workers, shown, title, caption)
        if shown == ALWAYS_SHOWN or _width(table) <= width:
            return table
        shown -= 1


def _worker_table(workers: list[WorkerView], shown: int, title: str, caption: str) -> Table:
    hidden = [name for name, _ in WORKER_COLUMNS[shown:]]
    if hidden:
        caption = (caption + "\n" if caption else "") + f"not shown (too narrow): {', '.join(hidden)}"
    table = Table(title=title or None, caption=caption or None, box=box.SIMPLE_HEAD, padding=(0, 1))
    for name, _ in WORKER_COLUMNS[:shown]:
        table.add_column(name, justify="left" if name == "state" else "right", no_wrap=True)
    for w in workers:
        table.add_row(*(_cell(value(w)) for _, value in WORKER_COLUMNS[:shown]))
    return table


def _cell(value) -> str:
    return f"{value:,}" if isinstance(value, int) else value


def _width(table: Table) -> int:
    console = Console(width=1000)
    return Measurement.get(console, console.options, table).maximum


def progress_table(progress: Progress, width: int = 80) -> Table:
    return worker_table(
        progress.workers,
        width,
        title=f"{progress.completed}/{progress.jobs} jobs  {progress.jobs_per_s:,.0f} jobs/s  {progress.elapsed_s:.1f} s",
        caption=f"row lock waits ({progress.row_lock_waits_scope}) {_count(progress.row_lock_waits)}  killed {progress.killed}",
    )


@contextlib.contextmanager
def live_progress(console: Console) -> Iterator:
    """A callback that redraws the progress table in place once the run passes SHOW_AFTER_S."""
    with Live(console=console, refresh_per_second=REFRESH_PER_S, transient=True, auto_refresh=False) as live:

        def show(progress: Progress) -> None:
            if progress.elapsed_s >= SHOW_AFTER_S:
                live.update(progress_table(progress, console.width), refresh=True)

        yield show


@contextlib.contextmanager
def bench_progress(console: Console, total: int) -> Iterator:
    """A callback(done, label) for the sweep: N of M and the time left, shown once the sweep passes SHOW_AFTER_S."""
    bar = Bar(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("about"), TimeRemainingColumn(),
        TextColumn("left"), console=console, transient=True,
    )
    task = bar.add_task("bench", total=total)
    started = time.monotonic()
    shown = False

    def step(done: int, label: str) -> None:
        nonlocal shown
        bar.update(task, completed=done, description=label)
        if not shown and time.monotonic() - started >= SHOW_AFTER_S:
            bar.start()
            shown = True

    try:
        yield step
    finally:
        if shown:
            bar.stop()


def _count(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


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
        ("deadlocks", f"{s.deadlocks:,}"),
        ("lock wait timeouts", f"{s.lock_wait_timeouts:,}"),
        ("NOWAIT failures", f"{s.nowait_failures:,}"),
        ("serialization failures", f"{s.serialization_failures:,}"),
        (f"row lock waits ({s.row_lock_waits_scope})", _count(s.row_lock_waits)),
        ("empty claims", f"{s.empty_claims:,}"),
        ("retries", f"{s.retries:,}"),
        ("killed", _killed(s)),
        ("lost", f"{s.lost:,}"),
        ("duplicated (second completions)", f"{s.duplicated:,}"),
        ("external effects / duplicates", f"{s.effects:,} / {s.external_duplicates:,}"),
    ]
    if s.strategy.startswith("queue "):
        rows[-2:] = [("done twice", f"{s.done_twice:,}"), ("left claimed", f"{s.left_claimed:,}"),
                     ("effects (executions) / repeats", f"{s.effects:,} / {s.external_duplicates:,}")]
        rows.append(("run again (no kill)", f"{s.run_again:,}"))
        if s.failures_injected or s.fail_runs:
            rows.append(("failed (--fail-rate) / fail: run", f"{s.failures_injected:,} / {s.fail_runs:,}"))
        if s.failed_jobs:
            rows.append(("ended failed (no retry:)", f"{s.failed_jobs:,}"))
        rows += [(f"retried at {statement}", f"{count:,}") for statement, count in s.retried_by_statement.items()]
        rows += [(f"  of them deadlocks at {where}", f"{count:,}") for where, count in s.deadlocked_by_statement.items()]
    if s.idempotency_key:
        rows.append(("effects de-duplicated by key", f"{s.deduplicated:,}"))
    if s.lease_ms:
        rows.append(("lease / leases lost (ran twice)", f"{s.lease_ms:g} ms / {s.leases_lost:,}"))
    for name, value in rows:
        table.add_row(name, value)
    return table


def _killed(s: WorkersSummary) -> str:
    if not s.killed:
        return "0"
    noticed = ", ".join(f"{ms:.1f}" for ms in s.notice_ms)
    rerun = ", ".join("-" if ms is None else f"{ms:.0f}" for ms in s.rerun_ms)
    return (
        f"{s.killed} (server noticed after {noticed} ms; held jobs ran again after {rerun} ms; "
        f"{s.reclaimed} held job(s) done by others)"
    )


def bench_table(result: SweepResult, width: int | None = None) -> str:
    """The sweep in psql's aligned format: plain text that pipes and diffs well; on a terminal
    (`width`) cut into tables that fit it, each keeping isolation, strategy and workers."""
    from .wrap import fitted_table, wrap

    columns = (
        "isolation", "strategy", "workers", "jobs/s", "of ceiling",
        "claim p50 ms", "claim p99 ms", "deadlocks", "nowait fails", "serial. fails", "retries", "ran twice", "rerun ms",
    )
    rows = [_bench_row(row) for row in result.rows]
    killed = f", {result.kill} killed per run" if result.kill else ""
    title = f"jobs/s by strategy and workers: {result.jobs} jobs, work {result.work_ms:g} ms{killed}, {result.server}"
    return "\n".join([*wrap(title, width, "   "), fitted_table(columns, [False, False] + [True] * 11, rows, width, keys=3)])


def _bench_row(row: SweepRow) -> tuple:
    run = row.run
    return (
        run.isolation, run.strategy, str(run.workers), f"{run.jobs_per_s:.0f}", f"{row.ceiling_share:.0%}",
        _number(run.claim_ms_p50), _number(run.claim_ms_p99), str(run.deadlocks), str(run.nowait_failures),
        str(run.serialization_failures), str(run.retries),
        str(run.external_duplicates), _rerun(run),
    )


def _rerun(run: WorkersSummary) -> str | None:
    """The slowest of the run's kills: from SIGKILL until another worker ran a job the killed one held."""
    known = [ms for ms in run.rerun_ms if ms is not None]
    return f"{max(known):.0f}" if known else None


def _number(value: float | None) -> str | None:
    return None if value is None else f"{value:.2f}"


def headline_lines(result: SweepResult, width: int | None = None) -> list[str]:
    """skip-locked against for-update and the ceiling, per isolation; a ratio only to a strategy that ran."""
    from .wrap import wrap

    lines = [_headline(h) for h in result.headlines]
    if result.deadlocks:
        counts = ", ".join(f"{iso} {n:,}" for iso, n in result.deadlocks.items())
        lines.append(f"deadlocks over the sweep: {counts}")
    return [piece for line in lines for piece in wrap(line, width, "   ")]


def _headline(h) -> str:
    head = f"{h.isolation} at {h.workers} workers: "
    if h.skip_locked_share_of_ceiling is None:
        return head + "skip-locked was not in this sweep (--strategies), so there is no headline"
    if h.skip_locked_vs_for_update is None:
        ratio = "skip-locked (for-update was not in this sweep: no ratio)"
    else:
        ratio = f"skip-locked {h.skip_locked_vs_for_update:.2f}x for-update"
    share = f"{h.skip_locked_share_of_ceiling:.0%} of the ceiling"
    if h.skip_locked_share_of_ceiling > 1:
        # The ceiling is a run of its own, not a bound: a cold or disturbed ceiling run is beaten.
        share += " (above 100%: the ceiling's own run was slower, a noisy figure; --repeat 3 takes medians)"
    return f"{head}{ratio}; {share}"
