"""The `explore` command: every schedule of a scenario, checked against its invariants."""

from __future__ import annotations

import json
import sys
from typing import List, Optional

import typer

from .. import api
from .shared import Cluster, Dsns, StepTimeout, app, fitted, heading, server_for
from ..errors import EXIT_MISMATCH, UsageError
from .matrix import MATRIX_HELP

FAULTS_HELP = f"Also let one session give up at every point: {', '.join(api.explore_faults())} (comma-separated)."


@app.command()
def explore(
    scenario: Optional[str] = typer.Argument(None, help="Scenario file or lesson name (or --queue).", show_default=False),
    queue: Optional[str] = typer.Option(
        None, "--queue", help="A queue file (docs/queue-format.md): claimers A and B run its SQL once each (an "
        "enqueuer E, a rescuer R when it has rescue:), checked that no job is done twice or left claimed.",
        show_default=False,
    ),
    enqueue_during: bool = typer.Option(False, "--enqueue-during", help="With --queue: the second job is enqueued by E, in every order."),
    fail_once: bool = typer.Option(
        False, "--fail-once", help="With --queue: A's first job fails; A runs the file's fail: and retry: for it, then claims again.",
    ),
    dsn: Dsns = None,
    faults: str = typer.Option("", "--faults", help=FAULTS_HELP, show_default=False),
    max_schedules: Optional[int] = typer.Option(None, "--max-schedules", min=1, help="Stop after this many schedules."),
    sample: Optional[int] = typer.Option(None, "--sample", min=1, help="Run this many random schedules instead of all."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Seed for --sample (default: random, and printed)."),
    jobs: int = typer.Option(2, "--jobs", min=1, max=16, help="Schedules run at once, each on its own connections."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    step_timeout: StepTimeout = 10.0,
    matrix: List[str] = typer.Option([], "--matrix", metavar="NAME=V1,V2", help=MATRIX_HELP, show_default=False),
    cluster: Cluster = None,
    show_all: bool = typer.Option(
        False, "--show-all", help="A .spec: print every permutation as isolationtester prints it, as it ends "
        "(without --faults, what isolationtester prints for the spec), then the report.",
    ),
) -> None:
    """Run every interleaving of a scenario's sessions and check its invariants after each.

    Each session keeps its own step order, and a session whose statement waits on a lock
    takes no further step until it completes. Prints the size of the space, the count of
    schedules by outcome (ok, invariant violated, deadlock, unexpected error, stuck, and an
    error a statement's expect: names) and, for each distinct problem, the shortest schedule
    showing it as a transcript. Exits 1 when an invariant was violated, a schedule got stuck
    or a statement failed with an error its expect: does not name.

    A PostgreSQL isolation spec (.spec) is explored as isolationtester runs it: its
    permutations (those written, or every interleaving of its steps), with --faults in place
    of each step, and its `#@invariant NAME { SQL }` lines (holding while the SQL returns no
    row) checked after each; a step's error is the spec's output, not a finding.

    \b
    Example:
      jobqueue-demo explore skip-locked-explore
      jobqueue-demo explore claim-without-lock-explore --faults rollback,disconnect
      jobqueue-demo explore skip-locked-explore --sample 200 --seed 7 --json
      jobqueue-demo explore claim-without-lock-explore --matrix innodb_snapshot_isolation=ON,OFF
      jobqueue-demo explore skip-locked-explore --cluster 3 --max-schedules 100
      jobqueue-demo explore --queue read-then-mark-bug
      jobqueue-demo explore --queue delayed-job-fixed --fail-once --max-schedules 300
      jobqueue-demo explore lost-claim.spec --faults disconnect
    """
    from ..render.color import color_on
    from ..render.explore_report import as_dict, print_report, verdict
    from ..render.late_progress import LateProgress
    from ..render.wrap import terminal_width

    options = api.explore_options(faults, max_schedules, sample, seed, jobs, step_timeout)
    loaded = _target(scenario, queue, enqueue_during, fail_once)
    if loaded.spec is not None:
        _explore_spec(loaded, dsn, options, as_json, show_all, bool(matrix), cluster)
        return
    if show_all:
        raise UsageError("--show-all prints a .spec's permutations as isolationtester does; a YAML scenario's "
                         "counterexamples are in the report (run SCENARIO shows its own order)")
    at_most = api.explore_planned(loaded, options)
    if matrix:
        _explore_matrix(loaded, dsn, matrix, options, as_json)
        return
    note = api.explore_advice(loaded)
    if note and not as_json:
        print(fitted(f"-- {note}", sys.stdout))
    with server_for(dsn, (loaded,), cluster) as server:
        heading(f"-- {loaded.title}: exploring on {server.label} ({server.where})", as_json)
        # Waits take some schedules out of the space, so a run may end before the bar is full.
        with LateProgress("schedules", at_most, quiet=as_json) as advance:
            report = api.explore(loaded, server, options, lambda _: advance())
    if as_json:
        print(json.dumps({**as_dict(report), "note": note}, indent=2, ensure_ascii=False))
    else:
        print_report(report, sys.stdout, color_on(sys.stdout), terminal_width(sys.stdout))
        print(fitted(verdict(report), sys.stdout))
    if report.stopped is not None:
        raise report.stopped  # told and ended at the CLI's boundary, as any stop signal
    if report.failed:
        raise typer.Exit(EXIT_MISMATCH)


def _explore_spec(loaded, dsn, options, as_json: bool, show_all: bool, matrix: bool, cluster) -> None:
    from ..render.late_progress import LateProgress
    from ..render.spec_explore_report import PermutationPrinter, print_spec_report, spec_as_dict
    from ..render.wrap import terminal_width

    if matrix or cluster:
        raise UsageError(f"--{'matrix' if matrix else 'cluster'} explores YAML scenarios; a .spec runs on one server")
    if as_json and show_all:
        raise UsageError("--show-all prints the permutations as text; leave out --json (its findings carry their output)")
    planned = api.explore_planned(loaded, options)
    with server_for(dsn, (loaded,)) as server:
        heading(f"-- {loaded.title}: exploring its permutations on {server.label} ({server.where})", as_json or show_all)
        printer = PermutationPrinter(loaded, sys.stdout, sys.stderr, sys.stdout.isatty()) if show_all else None
        with LateProgress("permutations", planned, quiet=as_json or show_all) as advance:
            report = api.explore_spec(loaded, server, options, printer or (lambda _: advance()))
    if as_json:
        print(json.dumps(spec_as_dict(loaded, report), indent=2, ensure_ascii=False))
    else:
        if show_all:
            print()
        print_spec_report(loaded, report, sys.stdout, terminal_width(sys.stdout))
    if report.failed:
        raise typer.Exit(EXIT_MISMATCH)


def _target(scenario: str | None, queue: str | None, enqueue_during: bool, fail_once: bool):
    """The scenario to explore: a lesson or file, or the one a queue file makes."""
    if (scenario is None) == (queue is None):
        raise UsageError("explore takes a scenario or --queue FILE (one of them)")
    if (enqueue_during or fail_once) and queue is None:
        raise UsageError(f"{'--enqueue-during' if enqueue_during else '--fail-once'} needs --queue")
    return api.queue_scenario(queue, enqueue_during, fail_once) if queue is not None else api.load(scenario)


def _explore_matrix(loaded, dsn, matrix: list[str], options, as_json: bool) -> None:
    from .matrix import check_axes, explore_matrix

    if as_json:
        raise UsageError("--matrix prints one table for all combinations; leave out --json")
    check_axes(matrix)
    with server_for(dsn) as server:
        if not explore_matrix(loaded, server, matrix, options):
            raise typer.Exit(EXIT_MISMATCH)
