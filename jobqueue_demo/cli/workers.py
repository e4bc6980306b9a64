"""The `workers` and `bench` commands: many worker processes on a queue, and the strategy sweep."""

from __future__ import annotations

import contextlib
import json
import sys
import time
from typing import Annotated, Optional

import typer

from .. import api
from .shared import Cluster, Dsn, Dsns, app, fitted, options, say, server_for
from ..errors import EXIT_MISMATCH, UsageError, WorkersStuck, stop_of

REGISTRY = api.strategies()

STRATEGY_HELP = (
    "Claim strategy: "
    + ", ".join(s.name for s in REGISTRY if not (s.broken or s.ceiling))
    + "; also "
    + ", ".join(f"{s.name} ({'the broken claim' if s.broken else 'no contention: the ceiling'})" for s in REGISTRY if s.broken or s.ceiling)
    + ". Each is explained in docs/workers.md."
)
STATE_ORDER_HELP = (
    "How jobs.state sorts in the (state, id) index: done-last (an ENUM) or done-first (a VARCHAR: "
    "the layout that livelocks under REPEATABLE READ on MariaDB, kept to show it)."
)
LEASE_HELP = "Lease length of the lease strategies, in ms [default: 1000 for lease, 250 for lease-heartbeat]."
ISOLATION_HELP = "Isolation level of every worker: read-committed or repeatable-read."
WORK_HELP = "Simulated work per claim, in milliseconds: inside the claim transaction, except for the lease strategies."
BATCH_HELP = "Jobs claimed per transaction."
ENGINE_HELP = (
    "The throwaway server's engine when no DSN is given: mysql or postgresql [default: the global --engine, "
    "else mysql]. A DSN names its own engine."
)
# Also a command option, so that `workers --engine postgresql` reads as it runs; the global
# `jobqueue-demo --engine postgresql workers` means the same.
Engine = Annotated[Optional[str], typer.Option("--engine", help=ENGINE_HELP, show_default=False)]
STALL_HELP = (
    "Seconds with no job completed after which the run stops, prints what the workers wait for and exits 1 "
    "[default: 30]."
)
QUEUE_HELP = (
    "A queue file (docs/queue-format.md): the workers run its SQL instead of a strategy's, as the per-run user, "
    "and the tool checks that no job was lost, done twice or left claimed."
)
PLOT_SUFFIXES = (".png", ".svg")


def _check_plot(path: str) -> None:
    """--plot refused before the sweep, not after its minutes: a suffix that names no format
    matplotlib is asked for, or a file that cannot be written (safe_write's rules, as export -o)."""
    from ..safe_write import check_writable

    if not path.lower().endswith(PLOT_SUFFIXES):
        raise UsageError(f"{path}: the plot's format follows the suffix; use .png or .svg")
    check_writable(path)


NO_PLOT = "matplotlib is not installed (pip install 'jobqueue-demo[plot]'): the table alone was written"


def _consoles():
    from ..render.color import console

    return console(), console(stderr=True)


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
    lease_ms: Optional[float] = typer.Option(None, "--lease-ms", help=LEASE_HELP, show_default=False),
    state_order: str = typer.Option("done-last", "--state-order", help=STATE_ORDER_HELP),
    stall: Optional[float] = typer.Option(None, "--stall", help=STALL_HELP, show_default=False),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as one JSON line instead of a table."),
    queue: Optional[str] = typer.Option(None, "--queue", help=QUEUE_HELP, show_default=False),
    enqueue_during: bool = typer.Option(
        False, "--enqueue-during", help="With --queue: enqueue half the jobs while the workers claim."
    ),
    fail_rate: float = typer.Option(
        0.0, "--fail-rate", help="With --queue: this share of the jobs fail their first execution, and the file's "
        "fail: and retry: run for them (docs/queue-format.md).",
    ),
    dsn: Dsns = None,
    engine: Engine = None,
    cluster: Cluster = None,
) -> None:
    """Run worker processes on a job queue with one claim strategy and check the result.

    Each worker claims jobs, writes the job's external effect, works, marks the job done
    and records its completion in one transaction (the lease strategies commit the claim
    first and work outside it). Afterwards the database is checked: every job done exactly
    once; the last line says so, or what broke (exit 1). A run in which no job completes
    for 30 s (--stall) prints what the workers wait for, from the server, and exits 1.

    \b
    Example:
      jobqueue-demo workers --workers 8 --jobs 2000 --strategy skip-locked
      jobqueue-demo workers -w 4 --kill 2 --idempotency-key --json
      jobqueue-demo workers -w 8 --jobs 600 --work-ms 5 --kill 3 --strategy lease-heartbeat
      jobqueue-demo workers --engine postgresql -w 4 --kill 1 --strategy update-limit
      jobqueue-demo workers --cluster 3 -w 6 --jobs 300
      jobqueue-demo workers --queue read-then-mark-fixed -w 4 --jobs 300 --isolation read-committed

    With --cluster N the workers are spread over a private N-node Galera cluster (worker i on
    node i mod N + 1), every node is checked, and the same workers then run on node 1 only
    and on a single server, for the throughput, the transactions rolled back with ERROR 1213
    and the effects run twice of each. --kill kills workers on any node, each watched on its own.
    A stalled run there reads every node: each worker is named with its node (worker 3@2), the
    nodes' appliers too, and a line gives the nodes' flow control when one holds back write sets.
    """
    config = api.workers_config(
        strategy=strategy, isolation=isolation, workers=workers, jobs=jobs, batch=batch, work_ms=work_ms, kill=kill,
        idempotency_key=idempotency_key, state_order=state_order, lease_ms=lease_ms,
        queue=None if queue is None else api.load_queue(queue), enqueue_during=enqueue_during, fail_rate=fail_rate,
        **({} if stall is None else {"stall_s": stall}),
    )
    out, err = _consoles()
    if cluster or api.split_dsns(dsn)[1]:
        _on_cluster(config, dsn, cluster, out, as_json)
        return
    with _server(dsn, engine) as server:
        say(
            f"-- workers: {strategy if queue is None else 'queue ' + queue}, {workers} worker(s), {jobs} job(s), {isolation} "
            f"on {server.label} ({server.where})"
        )
        with _stuck_reported(as_json):
            summary = _run_live(config, server, err) if err.is_terminal and not as_json else api.run_workers(config, server)
    _report(summary, out, as_json)
    if summary.stopped is not None:
        raise summary.stopped  # told and ended at the CLI's boundary, as any stop signal
    if not summary.invariants_hold:
        raise typer.Exit(EXIT_MISMATCH)


def _server(dsn, engine: str | None, cluster: int | None = None):
    """The server of --dsn, else the embedded one of this command's --engine, else of the global one."""
    if engine is not None:
        options.engine = engine  # the command's --engine stands for the global one
    return server_for(dsn, cluster=cluster)


def _on_cluster(config, dsn, size: int | None, out, as_json: bool) -> None:
    if config.queue is not None:
        _queue_on_cluster(config, dsn, size, out, as_json)
        return
    with server_for(dsn, cluster=size) as server:
        say(f"-- workers: {config.strategy}, {config.workers} worker(s), {config.jobs} job(s) on {server.label} ({server.where})")
        with _stuck_reported(as_json):
            compared = api.compare_cluster(config, server)
    if as_json:
        print(json.dumps(compared.as_dict()))
    else:
        _report(compared.spread, out, as_json)
        for line in compared.lines():
            print(line)
    if not compared.invariants_hold:
        raise typer.Exit(EXIT_MISMATCH)


def _queue_on_cluster(config, dsn, size: int | None, out, as_json: bool) -> None:
    """A queue file's workers spread over the nodes (worker i on node i mod N + 1), checked on node 1."""
    with server_for(dsn, cluster=size) as server:
        say(f"-- workers: queue {config.queue.path}, {config.workers} worker(s), {config.jobs} job(s) over "
            f"{len(server.nodes)} nodes of {server.label} ({server.where})")
        with _stuck_reported(as_json):
            summary = api.run_workers(config, server)
    _report(summary, out, as_json)
    if not summary.invariants_hold:
        raise typer.Exit(EXIT_MISMATCH)


def _run_live(config, server, err):
    from ..render.live import live_progress

    with live_progress(err) as show:
        return api.run_workers(config, server, show)


@contextlib.contextmanager
def _stuck_reported(as_json: bool):
    """A stalled run's picture printed on its way out; the error itself (exit 1) is main's to print."""
    try:
        yield
    except WorkersStuck as stuck:
        _report_stuck(stuck, as_json)
        raise


def _report_stuck(stuck, as_json: bool) -> None:
    """The server's waits-for picture, before the one-line error the CLI prints."""
    if as_json:
        print(json.dumps({"stuck": str(stuck), "diagnosis": stuck.diagnosis.as_dict()}))
    say(f"-- {stuck}; what the workers wait for:")
    for line in stuck.diagnosis.lines():
        say(f"--   {line}")


def _report(summary, out, as_json: bool) -> None:
    """The per-worker table, the summary and the verdict (stderr under --json, which keeps stdout one line)."""
    if as_json:
        print(json.dumps(summary.as_dict()))
        say(f"-- {summary.verdict}")
        return
    from ..render.live import summary_table, worker_table

    out.print(worker_table(summary.per_worker, out.width))
    out.print(summary_table(summary))
    out.print(summary.verdict, highlight=False)


@app.command("bench")
def bench_command(
    jobs: Optional[int] = typer.Option(
        None, "--jobs", "-j", help="Jobs in every run of the sweep [default: 400; 1000 with --full].", show_default=False
    ),
    workers: Optional[str] = typer.Option(
        None, "--workers", "-w", help="Worker counts to sweep, comma-separated [default: 2,8; 1,2,4,8,16 with --full].",
        show_default=False,
    ),
    strategies: str = typer.Option(
        ",".join(s.name for s in REGISTRY if s.swept), "--strategies", help="Strategies to sweep, comma-separated."
    ),
    isolations: str = typer.Option(
        "read-committed,repeatable-read", "--isolation", help="Isolation levels to sweep, comma-separated."
    ),
    full: bool = typer.Option(False, "--full", help="The whole sweep: 1,2,4,8,16 workers, 1000 jobs (several minutes)."),
    batch: int = typer.Option(1, "--batch", help=BATCH_HELP),
    work_ms: float = typer.Option(1.0, "--work-ms", help=WORK_HELP),
    kill: int = typer.Option(0, "--kill", help="SIGKILL this many workers in every run (the ceiling excepted)."),
    repeat: int = typer.Option(1, "--repeat", help="Runs per step; the median run is reported."),
    queues: str = typer.Option(
        "", "--queue", help="Queue files (docs/queue-format.md), comma-separated, run next to the strategies.",
        show_default=False,
    ),
    plot: str = typer.Option("workers-bench.png", "--plot", help="Where to write the plot (.png or .svg); '' for none."),
    as_json: bool = typer.Option(False, "--json", help="Print the results as one JSON line instead of a table."),
    dsn: Dsn = None,
    engine: Engine = None,
    cluster: Cluster = None,
) -> None:
    """Sweep claim strategies x workers x isolation, next to the same-run ceiling.

    The ceiling runs the same transaction on rows of each worker's own (no contention).
    Prints jobs/s, the share of the ceiling, claim latencies and deadlocks, and the
    headline ratios at 8 workers; plots jobs/s against workers when matplotlib is installed.
    The default sweep takes about a minute; --full runs the whole one.

    \b
    Example:
      jobqueue-demo bench
      jobqueue-demo bench --jobs 300 --workers 2,4 --strategies skip-locked,lease --kill 1 --json
      jobqueue-demo bench --engine postgresql --plot workers-bench-pg.png
      jobqueue-demo bench --cluster 3 --jobs 200 --workers 3,6 --strategies skip-locked --isolation read-committed --plot ''

    With --cluster N every run spreads its workers over a private N-node Galera cluster.
    """
    config = api.sweep_config(strategies, workers, isolations, jobs, full, batch, work_ms, repeat, kill, queues)
    if plot:
        _check_plot(plot)
    _, err = _consoles()
    with _server(dsn, engine, cluster) as server:
        say(f"-- bench on {server.label} ({server.where}): {config.runs} runs")
        result = _sweep_with_progress(config, server, err, as_json)
    plotted = bool(plot) and api.write_plot(result, plot)
    if as_json:
        print(json.dumps({**result.as_dict(), "plot": plot if plotted else None}))
        if result.stopped is not None:
            raise result.stopped
        return
    from ..render.live import bench_table, headline_lines
    from ..render.wrap import terminal_width

    width = terminal_width(sys.stdout)
    print(bench_table(result, width))
    for line in headline_lines(result, width):
        print(line)
    if plot:
        print(fitted(f"plot written to {plot}" if plotted else NO_PLOT, sys.stdout))
    held = all(row.run.invariants_hold for row in result.rows)
    if result.stopped is not None:
        print(f"{stop_of(result.stopped)} after {len(result.rows)} row(s) of the sweep; invariants "
              + ("hold in their runs" if held else "violated in a run"))
        raise result.stopped
    print(f"invariants hold in all {config.runs} runs: no job lost, none done twice" if held else "invariants violated in a run")


def _sweep_with_progress(config, server, err, as_json: bool):
    """N of M and the time left: a bar on a terminal, else a line per run (none under --json)."""
    if err.is_terminal:
        from ..render.live import bench_progress

        with bench_progress(err, config.runs) as step:
            return api.sweep(config, server, on_step=step)
    return api.sweep(config, server, None if as_json else _row_printer(), None if as_json else _step_printer(config.runs))


def _step_printer(total: int):
    started = time.monotonic()

    def show(done: int, label: str) -> None:
        if done:
            left = (time.monotonic() - started) / done * (total - done)
            say(f"-- {done} of {total}, about {left:.0f} s left")

    return show


def _row_printer():
    def show(row) -> None:
        say(f"-- {row.run.isolation} {row.run.strategy} x{row.run.workers}: {row.run.jobs_per_s:,.0f} jobs/s")

    return show
