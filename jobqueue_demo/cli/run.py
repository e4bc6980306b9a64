"""The command that runs a scenario and shows it: run. Its own module, so that a run builds
one click command, not those of every command that runs a scenario (cli/main.py).

No `from __future__ import annotations` here or in shared.py: typer reads run's annotations
and the global options' on every run, and as strings it compiles and evaluates each one
first (about 0.6 ms of the seed run's start-up)."""

import sys
from contextlib import contextmanager
from enum import Enum
from typing import List, Optional

import typer

from ..errors import EXIT_MISMATCH, stop_of
from .matrix import MATRIX_HELP, lesson_matrix_command
from .shared import (
    ISOLATIONTESTER_WAIT_S, ISOLATIONTESTER_WAIT_VAR, Cluster, Dsns, ShowLocks, app, heading, pace_option, say, told_quit,
    server_for, step_timeout_option, step_timeout_or,
)


class Layout(str, Enum):
    transcript = "transcript"
    columns = "columns"


RunStepTimeout = step_timeout_option(
    "Default 10; with --format isolationtester, isolationtester's: "
    f"${ISOLATIONTESTER_WAIT_VAR}, else {ISOLATIONTESTER_WAIT_S:g} (a spec's step still running then "
    "is cancelled; the run ends after twice it)."
)


class RunFormat(str, Enum):
    text = "text"
    json = "json"
    isolationtester = "isolationtester"


@app.command()
def run(
    scenario: str = typer.Argument(..., help="Scenario file or lesson name."),
    dsn: Dsns = None,
    step_timeout: RunStepTimeout = None,
    step: bool = typer.Option(
        False, "--step", help="Pause before each step and show what comes next: Enter runs it, q quits "
        "(sessions rolled back, scratch database dropped)."
    ),
    pace: Optional[float] = pace_option("Run one step every SECONDS, for a talk; with --step, Enter runs the next one sooner."),
    layout: Layout = typer.Option(
        Layout.transcript, "--layout", help="transcript: psql style; columns: one column per session, time downwards."
    ),
    fmt: RunFormat = typer.Option(
        RunFormat.text, "--format",
        help="text, json: one JSON object per event per line (JSON Lines), or isolationtester: a .spec's run as "
        "PostgreSQL's isolationtester prints it.",
    ),
    show_locks: ShowLocks = False,
    matrix: List[str] = typer.Option([], "--matrix", metavar="NAME=V1,V2", help=MATRIX_HELP, show_default=False),
    cluster: Cluster = None,
) -> None:
    """Run a scenario and print its transcript.

    \b
    Example:
      jobqueue-demo run skip-locked
      jobqueue-demo run skip-locked --step --layout columns
      jobqueue-demo run skip-locked --pace 3
      jobqueue-demo run skip-locked --format json
      jobqueue-demo run index-locks --show-locks
      jobqueue-demo run gap-locks --matrix isolation=read-committed,repeatable-read
      jobqueue-demo run deadlock > handout.txt
      jobqueue-demo run skip-locked --dsn mysql://root@127.0.0.1:3306/test
      jobqueue-demo run cluster-skip-locked --layout columns
      jobqueue-demo run skip-locked.spec --format isolationtester
    """
    from .. import api
    from ..errors import IsolationtesterEnd, UsageError
    from ..render.stepper import Pacing, Quit
    from ..render.transcript import prompted

    if fmt is not RunFormat.text and layout is Layout.columns:
        raise UsageError(f"--layout columns is a text layout; leave it out with --format {fmt.value}")
    step_timeout = _step_timeout(step_timeout, fmt)
    loaded = api.load(scenario)
    if fmt is RunFormat.isolationtester and loaded.spec is None:
        raise UsageError("--format isolationtester prints an isolation spec's run; give a .spec file")
    if loaded.spec is not None and (matrix or show_locks):
        raise UsageError("an isolation spec runs as isolationtester runs it: --matrix and --show-locks are for YAML scenarios")
    if matrix:
        _matrix_alone(step or pace is not None or fmt is RunFormat.json or layout is Layout.columns or show_locks)
        lesson_matrix_command([loaded], dsn, matrix, step_timeout, checking=False)
        return
    show = _run_view(loaded, layout, fmt)
    with server_for(dsn, (loaded,), cluster) as server:
        # Part of the transcript, so a handout written with `> file` starts with it; JSON
        # Lines keep standard output for events only.
        if fmt is not RunFormat.isolationtester:
            heading(f"-- {loaded.title}: on {server.label} ({server.where})", fmt is RunFormat.json)
        with _step_gate(Pacing(step, pace), len(loaded.steps)) as gate:

            def on_event(event) -> None:
                gate(event)
                show(prompted(event, loaded.prompts) if fmt is RunFormat.text else event)

            try:
                report = api.run(loaded, server, step_timeout, on_event, show_locks)
            except IsolationtesterEnd as end:
                if fmt is not RunFormat.isolationtester:
                    raise
                # As isolationtester ends: its words on standard error, after all it printed, its exit code.
                sys.stdout.flush()
                sys.stderr.write(end.words)
                raise typer.Exit(end.isolationtester_exit) from None
            except Quit as stop:
                told_quit(stop)
                return
            except KeyboardInterrupt as exc:
                if not step:
                    raise
                # A stop signal while a step ran: the run has been closed on the way out, as for q.
                stop = stop_of(exc)
                say(f"-- {stop} during step {gate.at} of {gate.total}: sessions rolled back, scratch database dropped")
                raise typer.Exit(stop.exit_code) from None
    if report.mismatches:
        say(f"-- {len(report.mismatches)} expectation(s) not met; 'jobqueue-demo verify' shows them")
        raise typer.Exit(EXIT_MISMATCH)


def _step_timeout(given: float | None, fmt: "RunFormat") -> float:
    """--step-timeout as given, else the tool's 10 s; for isolationtester's output its own wait."""
    return step_timeout_or(given, isolationtester=fmt is RunFormat.isolationtester)


def _matrix_alone(other_options: bool) -> None:
    from ..errors import UsageError

    if other_options:
        raise UsageError(
            "--matrix prints one table for all combinations; leave out --step, --pace, --format, --layout and --show-locks"
        )


def _run_view(loaded, layout: Layout, fmt: RunFormat):
    """A function that shows one event on standard output, in the chosen form."""
    import shutil

    if fmt is RunFormat.json:
        from ..render.events_json import JsonEventsView

        return JsonEventsView(sys.stdout).write
    if fmt is RunFormat.isolationtester:
        from ..render.isolationtester import IsolationtesterView

        return IsolationtesterView(sys.stdout, sys.stderr, loaded, sys.stdout.isatty()).write
    from ..render.color import color_on

    if layout is Layout.columns:
        from ..render.columns import ColumnsView

        width = shutil.get_terminal_size().columns
        return ColumnsView(sys.stdout, tuple(loaded.prompts.values()), width, color_on(sys.stdout)).write
    from ..render.transcript import TranscriptWriter, event_lines

    from ..render.wrap import terminal_width

    writer = TranscriptWriter(sys.stdout, tuple(loaded.prompts.values()), color_on(sys.stdout), terminal_width(sys.stdout))
    return lambda event: writer.write(event_lines(event))


@contextmanager
def _step_gate(pacing, total: int):
    """What to call with each event before it is shown: holds steps for --step and --pace."""
    import shutil

    from ..render.stepper import Keys, StepGate

    if not pacing.step:
        yield StepGate(pacing, total, None, sys.stderr, 80)
        return
    if sys.stdin is None:
        from ..errors import UsageError

        raise UsageError("--step reads keys from standard input, and there is none")
    with Keys(sys.stdin.fileno()) as keys:
        yield StepGate(pacing, total, keys, sys.stderr, shutil.get_terminal_size().columns)
