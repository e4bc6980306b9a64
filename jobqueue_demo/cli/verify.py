"""The commands that check a scenario against a server: verify, export (the page of a
verified run) and record (expectations written from a run)."""

from __future__ import annotations

import sys
from enum import Enum
from typing import List, Optional

import typer

from ..errors import EXIT_MISMATCH
from .matrix import MATRIX_HELP, lesson_matrix_command
from .shared import (
    ISOLATIONTESTER_WAIT_S, ISOLATIONTESTER_WAIT_VAR, Cluster, Dsn, Dsns, ShowLocks, StepTimeout, app, fitted, say, server_for,
    step_timeout_option, step_timeout_or,
)


class PageFormat(str, Enum):
    html = "html"
    md = "md"
    json = "json"


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
    from .shared import options

    if dsn is not None or show_locks:
        raise UsageError("--engines runs each engine's embedded server: not with --dsn or --show-locks")
    names = list(dict.fromkeys(e.strip() for e in engines.split(",") if e.strip()))
    unknown = [e for e in names if e not in api.ENGINE_NAMES]
    if unknown or not names:
        raise UsageError(f"--engines: expected a list of {' and '.join(api.ENGINE_NAMES)}, e.g. mysql,postgresql")
    say(f"-- {loaded.title}: on {', '.join(names)} (embedded throwaway servers)")
    return api.lesson_page_engines(loaded, names, step_timeout, fmt, options.allow_shared_user)


def _page_format(output: str, asked: Optional[PageFormat]) -> PageFormat:
    """The format -o's suffix names; a suffix that names none, or another one, is refused."""
    import os

    from ..errors import UsageError
    from ..render.pages import PAGE_SUFFIXES

    if output == "-":
        return asked or PageFormat.html
    suffix = os.path.splitext(output)[1].lower()
    named = PAGE_SUFFIXES.get(suffix)
    if named is None:
        raise UsageError(f"{output}: the page's format follows the suffix; use .html, .md or .json")
    if asked is not None and asked.value != named:
        raise UsageError(f"{output}: the suffix says {named}, --format says {asked.value}; make them agree")
    return PageFormat(named)


VerifyStepTimeout = step_timeout_option(
    "Default 10; for an isolation spec checked against its expected output, isolationtester's: "
    f"${ISOLATIONTESTER_WAIT_VAR}, else {ISOLATIONTESTER_WAIT_S:g}."
)


@app.command()
def verify(
    scenarios: List[str] = typer.Argument(..., help="Scenario files, lesson names or isolation specs."),
    dsn: Dsns = None,
    step_timeout: VerifyStepTimeout = None,
    matrix: List[str] = typer.Option([], "--matrix", metavar="NAME=V1,V2", help=MATRIX_HELP, show_default=False),
    cluster: Cluster = None,
) -> None:
    """Run scenarios and check every step against its expectation.

    Prints each difference (step, session, expected, got) and exits 1 if any; prints
    "Verified against <server> <version>" when all hold. An isolation spec with an expected
    output (NAME.out beside NAME.spec, or in ../expected/ as PostgreSQL keeps them) is checked
    against it on PostgreSQL, as pg_isolation_regress checks isolationtester's: a difference is
    shown as a diff. Several such specs run in turn in one scratch database.

    \b
    Example:
      jobqueue-demo verify skip-locked nowait outbox
      jobqueue-demo verify skip-locked --matrix innodb_snapshot_isolation=ON,OFF
      jobqueue-demo verify cluster-skip-locked
      jobqueue-demo verify skip-locked --cluster 3
      jobqueue-demo --engine postgresql verify skip-locked.spec deadlock.spec
    """
    from .. import api

    loaded = [api.load(s) for s in scenarios]
    if matrix:
        lesson_matrix_command(loaded, dsn, matrix, step_timeout_or(step_timeout, False), checking=True)
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
            _tell(f"{differ} of {len(items)} scenario(s) differ on {label}")
        else:
            _tell(f"Verified against {label}")
        failed += differ
    if failed:
        raise typer.Exit(EXIT_MISMATCH)


def _verify_on(items: list, server, step_timeout: float | None) -> int:
    """How many of `items` differ from their expectations, each told as it is run. The specs
    checked against their expected output share one scratch database, made when the first comes."""
    from contextlib import ExitStack

    from .. import api

    failed = 0
    with ExitStack() as shared:
        scratch = None
        for item in items:
            if api.output_checked(item, server):
                wait = step_timeout_or(step_timeout, True)
                scratch = scratch or shared.enter_context(api.shared_scratch(server, wait))
                failed += _check_output(item, server, wait, scratch)
            else:
                failed += _check_expectations(item, server, step_timeout_or(step_timeout, False))
    return failed


def _check_output(item, server, step_timeout: float, scratch) -> int:
    """1 when the spec's output differs from every expected file, told with its diff; else 0."""
    import os

    from .. import api
    from ..errors import StuckRun

    try:
        checked = api.check_spec_output(item, server, step_timeout, scratch)
    except StuckRun as stuck:
        _tell(f"{item.path}: the run got stuck: {stuck}")
        return 1
    if checked.matched is not None:
        _tell(f"{item.path}: ok (its output is {os.path.normpath(checked.matched)})")
        return 0
    _tell(f"{item.path}: its output differs from {os.path.normpath(checked.expected[0])}"
          + (f" (and {len(checked.expected) - 1} alternative(s))" if len(checked.expected) > 1 else ""))
    for line in checked.diff.splitlines():
        print(f"  {line}")
    return 1


def _check_expectations(item, server, step_timeout: float) -> int:
    """1 when the scenario's run does not meet its expectations, each difference told; else 0."""
    from .. import api
    from ..errors import StuckRun

    try:
        report = api.run(item, server, step_timeout)
    except StuckRun as stuck:
        _tell(f"{item.path}: {len(stuck.mismatches)} expectation(s) not met, then the run got stuck")
        _print_mismatches(stuck.mismatches)
        _tell(f"  {stuck}", "    ")
        return 1
    if report.mismatches:
        _tell(f"{item.path}: {len(report.mismatches)} expectation(s) not met")
        _print_mismatches(report.mismatches)
        return 1
    _tell(f"{item.path}: ok ({report.checked} expectation(s))")
    return 0


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
            _tell(f"{item.path}: skipped, written for {' and '.join(item.engines)} only")
    if not kept:
        raise UsageError(f"none of these scenarios is written for {target}")
    return kept


def _print_mismatches(mismatches) -> None:
    for m in mismatches:
        _tell("  " + str(m).replace("\n", "\n  "), "    ")


def _tell(text: str, indent: str = "   ") -> None:
    """A line of verify's report, wrapped on a terminal as every view is."""
    print(fitted(text, sys.stdout, indent))


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
    if loaded.spec is not None:
        raise UsageError(
            f"{loaded.path}: record writes expectations into a YAML scenario; an isolation spec's expected "
            f"output is isolationtester's: jobqueue-demo run {loaded.path} --format isolationtester > expected.out"
        )
    name = api.lesson_name(loaded)
    if name != loaded.path and not in_place:
        raise UsageError(
            f"{name} is a lesson shipped with jobqueue-demo; record a copy "
            f"(jobqueue-demo show {name} --source > my-{name}.yaml), or pass --in-place to rewrite it"
        )
    with server_for(dsn, (loaded,)) as server:
        written = api.record(loaded, server, step_timeout)
    _tell(f"{loaded.path}: recorded {written} statement result(s); {api.verified_line(server)}")
