"""The commands that run a scenario: run, export, verify, record; and lessons, cleanup."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from enum import Enum
from typing import List, Optional

import typer

from ..errors import EXIT_INTERRUPTED, EXIT_MISMATCH
from .matrix import MATRIX_HELP
from .shared import MAX_SECONDS, Cluster, Dsn, Dsns, ShowLocks, StepTimeout, app, finite, heading, say, say_notes, server_for


class Layout(str, Enum):
    transcript = "transcript"
    columns = "columns"


class RunFormat(str, Enum):
    text = "text"
    json = "json"


class PageFormat(str, Enum):
    html = "html"
    md = "md"
    json = "json"


@app.command()
def run(
    scenario: str = typer.Argument(..., help="Scenario file or lesson name."),
    dsn: Dsns = None,
    step_timeout: StepTimeout = 10.0,
    step: bool = typer.Option(
        False, "--step", help="Pause before each step and show what comes next: Enter runs it, q quits "
        "(sessions rolled back, scratch database dropped)."
    ),
    pace: Optional[float] = typer.Option(
        None, "--pace", metavar="SECONDS", min=0.0, max=MAX_SECONDS, callback=finite, show_default=False,
        help="Run one step every SECONDS, for a talk; with --step, Enter runs the next one sooner.",
    ),
    layout: Layout = typer.Option(
        Layout.transcript, "--layout", help="transcript: psql style; columns: one column per session, time downwards."
    ),
    fmt: RunFormat = typer.Option(
        RunFormat.text, "--format", help="text, or json: one JSON object per event per line (JSON Lines)."
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
    """
    from .. import api
    from ..errors import UsageError
    from ..render.stepper import Interrupted, Pacing, Quit
    from ..render.transcript import prompted

    if fmt is RunFormat.json and layout is Layout.columns:
        raise UsageError("--layout columns is a text layout; leave it out with --format json")
    loaded = api.load(scenario)
    if matrix:
        _matrix_alone(step or pace is not None or fmt is RunFormat.json or layout is Layout.columns or show_locks)
        _lesson_matrix([loaded], dsn, matrix, step_timeout, checking=False)
        return
    show = _run_view(loaded, layout, fmt)
    with server_for(dsn, (loaded,), cluster) as server:
        # Part of the transcript, so a handout written with `> file` starts with it; JSON
        # Lines keep standard output for events only.
        heading(f"-- {loaded.title}: on {server.label} ({server.where})", fmt is RunFormat.json)
        with _step_gate(Pacing(step, pace), len(loaded.steps)) as gate:

            def on_event(event) -> None:
                gate(event)
                show(prompted(event, loaded.prompts) if fmt is RunFormat.text else event)

            try:
                report = api.run(loaded, server, step_timeout, on_event, show_locks)
            except Quit as stop:
                say(f"-- {stop}: sessions rolled back, scratch database dropped")
                say_notes(stop)
                if isinstance(stop, Interrupted):
                    raise typer.Exit(EXIT_INTERRUPTED) from None
                return
            except KeyboardInterrupt:
                if not step:
                    raise
                # Ctrl-C while a step ran: the run has been closed on the way out, as for q.
                say(f"-- interrupted (Ctrl-C) during step {gate.at} of {gate.total}: "
                     "sessions rolled back, scratch database dropped")
                raise typer.Exit(EXIT_INTERRUPTED) from None
    if report.mismatches:
        say(f"-- {len(report.mismatches)} expectation(s) not met; 'jobqueue-demo verify' shows them")
        raise typer.Exit(EXIT_MISMATCH)


def _matrix_alone(other_options: bool) -> None:
    from ..errors import UsageError

    if other_options:
        raise UsageError(
            "--matrix prints one table for all combinations; leave out --step, --pace, --format, --layout and --show-locks"
        )


def _lesson_matrix(loaded: list, dsn: str | None, matrix: list[str], step_timeout: float, checking: bool) -> None:
    """`run` shows the differences (expected under other settings); `verify` fails on them."""
    from .matrix import check_axes, lesson_matrix

    check_axes(matrix)
    with server_for(dsn) as server:
        if not lesson_matrix(loaded, server, matrix, step_timeout) and checking:
            raise typer.Exit(EXIT_MISMATCH)


def _run_view(loaded, layout: Layout, fmt: RunFormat):
    """A function that shows one event on standard output, in the chosen form."""
    import shutil

    if fmt is RunFormat.json:
        from ..render.events_json import JsonEventsView

        return JsonEventsView(sys.stdout).write
    from ..render.color import color_on

    if layout is Layout.columns:
        from ..render.columns import ColumnsView

        width = shutil.get_terminal_size().columns
        return ColumnsView(sys.stdout, tuple(loaded.prompts.values()), width, color_on(sys.stdout)).write
    from ..render.transcript import TranscriptWriter, event_lines

    writer = TranscriptWriter(sys.stdout, tuple(loaded.prompts.values()), color_on(sys.stdout))
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


@app.command()
def export(
    scenario: str = typer.Argument(..., help="Scenario file or lesson name."),
    output: str = typer.Option("-", "-o", "--output", help="File to write the page to; - for standard output."),
    fmt: Optional[PageFormat] = typer.Option(
        None, "--format", show_default=False,
        help="html, md or json; by default from the -o file's suffix (.html, .md, .json), html for standard output.",
    ),
    dsn: Dsn = None,
    step_timeout: StepTimeout = 10.0,
    show_locks: ShowLocks = False,
    engines: Optional[str] = typer.Option(
        None, "--engines", metavar="ENGINE,ENGINE", show_default=False,
        help="One transcript per engine on the page (mysql,postgresql), each run on that engine's "
        "embedded server ($JOBQUEUE_DEMO_DSN where it names that engine); not with --dsn or --show-locks.",
    ),
) -> None:
    """Run and verify a scenario, then write its lesson page.

    The page has the title, introduction, the transcript with narration, why each piece
    matters, "Verified against <server> <version> on <date>", how to run it yourself and
    the scenario source. HTML pages are self-contained (inline CSS, nothing loaded from the
    network). When the run does not meet the scenario's expectations nothing is written: each
    difference is listed and the exit code is 1.

    \b
    Example:
      jobqueue-demo export skip-locked -o skip-locked.html
      jobqueue-demo export nowait -o nowait.md
      jobqueue-demo export outbox -o outbox.json
      jobqueue-demo export filesort-locks --show-locks -o filesort-locks.html
      jobqueue-demo export gap-locks --engines mysql,postgresql -o gap-locks.html
    """
    from .. import api
    from ..errors import ExpectationsNotMet
    from ..safe_write import check_writable, write_file

    fmt = _page_format(output, fmt)
    if output != "-":
        check_writable(output)
    loaded = api.load(scenario)
    try:
        if engines is not None:
            page = _page_on_engines(loaded, engines, dsn, show_locks, step_timeout, fmt.value)
        else:
            with server_for(dsn, (loaded,)) as server:
                say(f"-- {loaded.title}: on {server.label} ({server.where})")
                page = api.lesson_page(loaded, server, step_timeout, fmt.value, show_locks)
    except ExpectationsNotMet as e:
        for mismatch in e.mismatches:
            say("  " + str(mismatch).replace("\n", "\n  "))
        raise
    if output == "-":
        sys.stdout.write(page)
        return
    write_file(output, page)
    say(f"-- wrote {output} ({fmt.value})")


def _page_on_engines(loaded, engines: str, dsn, show_locks: bool, step_timeout: float, fmt: str) -> str:
    from .. import api
    from ..errors import UsageError
    from .shared import ENGINES, options

    if dsn is not None or show_locks:
        raise UsageError("--engines runs each engine's embedded server: not with --dsn or --show-locks")
    names = list(dict.fromkeys(e.strip() for e in engines.split(",") if e.strip()))
    unknown = [e for e in names if e not in ENGINES]
    if unknown or not names:
        raise UsageError(f"--engines: expected a list of {' and '.join(ENGINES)}, e.g. mysql,postgresql")
    say(f"-- {loaded.title}: on {', '.join(names)} (embedded throwaway servers)")
    return api.lesson_page_engines(loaded, names, step_timeout, fmt, options.allow_shared_user)


def _page_format(output: str, asked: Optional[PageFormat]) -> PageFormat:
    """The format -o's suffix names; a suffix that names none, or another one, is refused."""
    import os

    from ..errors import UsageError
    from ..render.export import PAGE_SUFFIXES

    if output == "-":
        return asked or PageFormat.html
    suffix = os.path.splitext(output)[1].lower()
    named = PAGE_SUFFIXES.get(suffix)
    if named is None:
        raise UsageError(f"{output}: the page's format follows the suffix; use .html, .md or .json")
    if asked is not None and asked.value != named:
        raise UsageError(f"{output}: the suffix says {named}, --format says {asked.value}; make them agree")
    return PageFormat(named)


@app.command()
def verify(
    scenarios: List[str] = typer.Argument(..., help="Scenario files or lesson names."),
    dsn: Dsns = None,
    step_timeout: StepTimeout = 10.0,
    matrix: List[str] = typer.Option([], "--matrix", metavar="NAME=V1,V2", help=MATRIX_HELP, show_default=False),
    cluster: Cluster = None,
) -> None:
    """Run scenarios and check every step against its expectation.

    Prints each difference (step, session, expected, got) and exits 1 if any; prints
    "Verified against <server> <version>" when all hold.

    \b
    Example:
      jobqueue-demo verify skip-locked nowait outbox
      jobqueue-demo verify skip-locked --matrix innodb_snapshot_isolation=ON,OFF
      jobqueue-demo verify cluster-skip-locked
      jobqueue-demo verify skip-locked --cluster 3
    """
    from .. import api

    loaded = [api.load(s) for s in scenarios]
    if matrix:
        _lesson_matrix(loaded, dsn, matrix, step_timeout, checking=True)
        return
    if len(loaded) > 1:
        loaded = _written_for_engine(loaded, api.split_dsns(dsn)[0])
    # Cluster lessons run on a Galera cluster, the others on the one server.
    groups: dict[int | None, list] = {}
    for item in loaded:
        groups.setdefault(cluster or item.cluster, []).append(item)
    failed = 0
    for size, items in groups.items():
        with server_for(dsn, tuple(items), size) as server:
            differ = _verify_on(items, server, step_timeout)
        # Each group has its own server: each is named with its own verdict, a cluster as one.
        label = f"{server.label} ({server.where})" if server.nodes else server.label
        if differ:
            print(f"{differ} of {len(items)} scenario(s) differ on {label}")
        else:
            print(f"Verified against {label}")
        failed += differ
    if failed:
        raise typer.Exit(EXIT_MISMATCH)


def _verify_on(items: list, server, step_timeout: float) -> int:
    """How many of `items` differ from their expectations, each told as it is run."""
    from .. import api
    from ..errors import StuckRun

    failed = 0
    for item in items:
        try:
            report = api.run(item, server, step_timeout)
        except StuckRun as stuck:
            failed += 1
            print(f"{item.path}: {len(stuck.mismatches)} expectation(s) not met, then the run got stuck")
            _print_mismatches(stuck.mismatches)
            print(f"  {stuck}")
            continue
        if report.mismatches:
            failed += 1
            print(f"{item.path}: {len(report.mismatches)} expectation(s) not met")
            _print_mismatches(report.mismatches)
        else:
            print(f"{item.path}: ok ({report.checked} expectation(s))")
    return failed


def _written_for_engine(loaded: list, dsn) -> list:
    """Several lessons at once (`verify scenarios/*.yaml`): those not written for the server's
    engine are skipped, each said, rather than refusing them all."""
    from .. import api
    from ..errors import UsageError
    from .shared import options

    target = api.engine_target(dsn, options.engine)
    kept = [item for item in loaded if target in item.engines]
    for item in loaded:
        if item not in kept:
            print(f"{item.path}: skipped, written for {' and '.join(item.engines)} only")
    if not kept:
        raise UsageError(f"none of these scenarios is written for {target}")
    return kept


def _print_mismatches(mismatches) -> None:
    for m in mismatches:
        print("  " + str(m).replace("\n", "\n  "))


@app.command()
def record(
    scenario: str = typer.Argument(..., help="Scenario file to update in place."),
    dsn: Dsn = None,
    step_timeout: StepTimeout = 10.0,
    in_place: bool = typer.Option(
        False, "--in-place", help="Allow rewriting a lesson shipped with jobqueue-demo (its maintainers' re-recording)."
    ),
) -> None:
    """Run a scenario and write what it observed into the file as expectations.

    Each statement's `expect:` is replaced (or added) and `verified:` names the server and
    date; everything else in the file is left as written. A shipped lesson is rewritten
    only with --in-place: record a copy of it instead.

    \b
    Example:
      jobqueue-demo show nowait --source > my-nowait.yaml
      jobqueue-demo record my-nowait.yaml
    """
    from .. import api
    from ..errors import UsageError

    loaded = api.load(scenario)
    name = api.lesson_name(loaded)
    if name != loaded.path and not in_place:
        raise UsageError(
            f"{name} is a lesson shipped with jobqueue-demo; record a copy "
            f"(jobqueue-demo show {name} --source > my-{name}.yaml), or pass --in-place to rewrite it"
        )
    with server_for(dsn, (loaded,)) as server:
        written = api.record(loaded, server, step_timeout)
    print(f"{loaded.path}: recorded {written} statement result(s); {api.verified_line(server)}")


@app.command()
def lessons() -> None:
    """List the lessons that ship with jobqueue-demo.

    Each can be given by name to run, verify, record and export.

    \b
    Example:
      jobqueue-demo lessons
      jobqueue-demo run nowait
    """
    from .. import api
    from ..errors import EXIT_USAGE

    found = api.lessons()
    width = max((len(lesson.name) for lesson in found), default=0)
    variants_said = False
    for lesson in found:
        if lesson.problem:
            say(f"jobqueue-demo: {lesson.problem}")
            continue
        if lesson.for_explore and not variants_said:
            print("\n-- written for 'jobqueue-demo explore' (every order, checked by invariants):")
            variants_said = True
        explore = f"; explore: {lesson.explore}" if lesson.explore else ""
        explore += f"; explore variant of {', '.join(lesson.variant_of)}" if lesson.variant_of else ""
        print(f"{lesson.name:{width}s}  {lesson.summary}")
        print(
            f"{'':{width}s}  sessions {', '.join(lesson.sessions)}; engines {', '.join(lesson.engines)}; "
            f"verified: {lesson.verified or 'not recorded'}{explore}"
        )
    if any(lesson.problem for lesson in found):
        raise typer.Exit(EXIT_USAGE)


@app.command()
def cleanup(
    dsn: Optional[str] = typer.Option(
        None, "--dsn", show_default=False,
        help="Server to sweep: mysql://user:pass@host:port/db. Default: $JOBQUEUE_DEMO_DSN; "
        "with neither, only this machine's temporary directories.",
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="List what would be removed; remove nothing."),
    cache: bool = typer.Option(
        False, "--cache", help="Also remove the cached embedded-server templates (rebuilt on next use)."
    ),
) -> None:
    """Remove what killed runs left behind: scratch databases and per-run users on the server,
    embedded servers' temporary directories on this machine.

    Only what provably belongs to a run that is gone: a database or user whose run's named
    lock is free, a directory whose marker lock is free. Every run already does this at its
    start; databases of older versions (jqd_ and 10 hex digits) are listed, never dropped.

    \b
    Example:
      jobqueue-demo cleanup --dry-run
      jobqueue-demo cleanup --dsn mysql://root@127.0.0.1:3306/test
    """
    from .. import api
    from ..errors import ServerError

    done = api.cleanup(dsn, dry_run, cache)
    for found in done.found:
        print(found)
    if not done.found:
        print("nothing left behind")
    if done.problems:
        raise ServerError("; ".join(done.problems))
