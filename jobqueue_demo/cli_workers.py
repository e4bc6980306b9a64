"""The `workers` and `bench` commands: many worker processes on a queue, and the strategy sweep."""

from __future__ import annotations

import json
import sys
from typing import Optional

import typer

from .cli import DSN_HELP, app
from .errors import EXIT_MISMATCH

STRATEGY_HELP = (
    "Claim strategy: skip-locked, for-update, nowait-retry, update-limit; also no-lock "
    "(the broken naive claim) and own-rows (no contention: the ceiling)."
)
ISOLATION_HELP = "Isolation level of every worker: read-committed or repeatable-read."
WORK_HELP = "Simulated work per claim, in milliseconds, inside the claim transaction."
BATCH_HELP = "Jobs claimed per transaction."
NO_PLOT = "matplotlib is not installed (pip install 'jobqueue-demo[plot]'): the table alone was written"


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _consoles():
    from rich.console import Console

    # Colour only on a terminal, and never when NO_COLOR is set (https://no-color.org).
    return Console(), Console(stderr=True)


@app.command("workers")
def workers_command(
    workers: int = typer.Option(4, "--workers", "-w", help="Worker processes, each with its own connection."),
    jobs: int = typer.Option(1000, "--jobs", "-j", help="Jobs queued at the start."),
    strategy: str = typer.Option("skip-locked", "--strategy", "-s", help=STRATEGY_HELP),
    isolation: str = typer.Option("repeatable-read", "--isolation", help=ISOLATION_HELP),
    batch: int = typer.Option(1, "--batch", help=BATCH_HELP),
    work_ms: float = typer.Option(1.0, "--work-ms", help=WORK_HELP),
    kill: int = typer.Option(0, "--kill", help="SIGKILL this many workers mid-transaction at random moments."),
    idempotency_key: bool = typer.Option(
        False, "--idempotency-key", help="Write each external effect under the job's key, so repeats are dropped."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as one JSON line instead of a table."),
    dsn: Optional[str] = typer.Option(None, "--dsn", help=DSN_HELP, show_default=False),
) -> None:
    """Run worker processes on a job queue with one claim strategy and check the result.

    Each worker claims jobs, writes the job's external effect, works, marks the job done
    and records its completion in one transaction. Afterwards the database is checked:
    every job done exactly once (exit 1 if not).

    \b
    Example:
      jobqueue-demo workers --workers 8 --jobs 2000 --strategy skip-locked
      jobqueue-demo workers -w 4 --kill 2 --idempotency-key --json
    """
    from . import app as core
    from .workers import WorkersConfig, run_workers, validate

    config = WorkersConfig(strategy, isolation, workers, jobs, batch, work_ms, kill, idempotency_key)
    validate(config)
    out, err = _consoles()
    with core.server(dsn) as server:
        _say(
            f"-- workers: {strategy}, {workers} worker(s), {jobs} job(s), {isolation} "
            f"on {server.label} ({server.where})"
        )
        if err.is_terminal and not as_json:
            from .render.live import live_progress

            with live_progress(err) as show:
                summary = run_workers(config, server, show)
        else:
            summary = run_workers(config, server)
    if as_json:
        print(json.dumps(summary.record()))
    else:
        from .render.live import summary_table

        out.print(summary_table(summary))
    if not summary.invariants_hold:
        _say(
            f"-- invariants violated: {summary.lost} lost, {summary.duplicated} second completion(s), "
            f"{summary.completed} of {summary.jobs} completed"
        )
        raise typer.Exit(EXIT_MISMATCH)


@app.command("bench")
def bench_command(
    jobs: int = typer.Option(1000, "--jobs", "-j", help="Jobs in every run of the sweep."),
    workers: str = typer.Option("1,2,4,8,16", "--workers", "-w", help="Worker counts to sweep, comma-separated."),
    strategies: str = typer.Option(
        "skip-locked,for-update,nowait-retry,update-limit", "--strategies", help="Strategies to sweep, comma-separated."
    ),
    isolations: str = typer.Option(
        "read-committed,repeatable-read", "--isolation", help="Isolation levels to sweep, comma-separated."
    ),
    batch: int = typer.Option(1, "--batch", help=BATCH_HELP),
    work_ms: float = typer.Option(1.0, "--work-ms", help=WORK_HELP),
    repeat: int = typer.Option(1, "--repeat", help="Runs per step; the median run is reported."),
    plot: str = typer.Option("workers-bench.png", "--plot", help="Where to write the plot (.png or .svg); '' for none."),
    as_json: bool = typer.Option(False, "--json", help="Print the results as one JSON line instead of a table."),
    dsn: Optional[str] = typer.Option(None, "--dsn", help=DSN_HELP, show_default=False),
) -> None:
    """Sweep claim strategies x workers x isolation, next to the same-run ceiling.

    The ceiling runs the same transaction on rows of each worker's own (no contention).
    Prints jobs/s, the share of the ceiling, claim latencies and deadlocks, and the
    headline ratios at 8 workers; plots jobs/s against workers when matplotlib is installed.

    \b
    Example:
      jobqueue-demo bench
      jobqueue-demo bench --jobs 300 --workers 1,2,4 --strategies skip-locked,for-update --json
    """
    from . import app as core
    from .sweep import SWEEPABLE, SweepConfig, parse_counts, parse_names, sweep, validate_sweep, write_plot
    from .workers import ISOLATIONS

    config = SweepConfig(
        strategies=parse_names(strategies, SWEEPABLE, "strategy"),
        workers=parse_counts(workers),
        isolations=parse_names(isolations, ISOLATIONS, "isolation"),
        jobs=jobs,
        batch=batch,
        work_ms=work_ms,
        repeat=repeat,
    )
    validate_sweep(config)
    with core.server(dsn) as server:
        _say(f"-- bench on {server.label} ({server.where})")
        result = sweep(config, server, None if as_json else _row_printer())
    plotted = bool(plot) and write_plot(result, plot)
    if as_json:
        print(json.dumps({**result.record(), "plot": plot if plotted else None}))
        return
    from .render.live import bench_table

    print(bench_table(result))
    for line in _headline_lines(result):
        print(line)
    if plot:
        print(f"plot written to {plot}" if plotted else NO_PLOT)


def _row_printer():
    def show(row) -> None:
        _say(f"-- {row.run.isolation} {row.run.strategy} x{row.run.workers}: {row.run.jobs_per_s:,.0f} jobs/s")

    return show


def _headline_lines(result) -> list[str]:
    lines = []
    for h in result.headlines:
        ratio = "-" if h.skip_locked_vs_for_update is None else f"{h.skip_locked_vs_for_update:.2f}x"
        share = "-" if h.skip_locked_share_of_ceiling is None else f"{h.skip_locked_share_of_ceiling:.0%}"
        lines.append(f"{h.isolation} at {h.workers} workers: skip-locked {ratio} for-update; {share} of the ceiling")
    if result.deadlocks:
        counts = ", ".join(f"{iso} {n:,}" for iso, n in result.deadlocks.items())
        lines.append(f"deadlocks over the sweep: {counts}")
    return lines
