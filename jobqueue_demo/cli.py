"""The command line: a thin layer that parses options, calls the library and maps errors.

Domain errors become exit codes here and only here: 0 ok, 1 expectations not met (or a
stuck schedule), 2 bad scenario or usage, 3 server or connection problem, 130 interrupted.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import List, Optional

import typer

from .errors import EXIT_MISMATCH, EXIT_OK, DemoError

EXIT_CODES_HELP = (
    "Exit codes: 0 ok; 1 expectations not met or the schedule got stuck; "
    "2 bad scenario or usage; 3 server or connection problem; 130 interrupted."
)

app = typer.Typer(
    help="Run job-queue lessons (SELECT ... FOR UPDATE SKIP LOCKED and friends) on a real "
    "MariaDB or MySQL server and print them as transcripts.\n\n" + EXIT_CODES_HELP,
    add_completion=False,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    rich_markup_mode=None,
)

DSN_HELP = (
    "Server to use: mysql://user:pass@host:port/db (or ?unix_socket=/path). "
    "Default: $JOBQUEUE_DEMO_DSN, else a private throwaway server started for this run."
)
STEP_TIMEOUT_HELP = "Longest wait for any one statement or fault, in seconds."
_debug = False


@app.callback()
def _options(debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors.")) -> None:
    global _debug
    _debug = debug


def _color() -> bool:
    return sys.stdout.isatty() and "NO_COLOR" not in os.environ


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


@app.command()
def run(
    scenario: str = typer.Argument(..., help="Scenario file or lesson name."),
    dsn: Optional[str] = typer.Option(None, "--dsn", help=DSN_HELP, show_default=False),
    step_timeout: float = typer.Option(10.0, "--step-timeout", help=STEP_TIMEOUT_HELP, min=0.1),
) -> None:
    """Run a scenario and print its transcript.

    \b
    Example:
      jobqueue-demo run scenarios/skip-locked.yaml
      jobqueue-demo run scenarios/skip-locked.yaml --dsn mysql://root@127.0.0.1:3306/test
    """
    from . import app as core
    from .render.transcript import TranscriptWriter, event_lines

    loaded = core.load(scenario)
    writer = TranscriptWriter(sys.stdout, loaded.session_names, _color())
    with core.server(dsn) as server:
        _say(f"-- {loaded.title}: on {server.label} ({server.where})")
        report = core.run(loaded, server, step_timeout, lambda e: writer.write(event_lines(e)))
    if report.mismatches:
        _say(f"-- note: {len(report.mismatches)} expectation(s) not met; 'jobqueue-demo verify' shows them")


@app.command()
def verify(
    scenarios: List[str] = typer.Argument(..., help="Scenario files or lesson names."),
    dsn: Optional[str] = typer.Option(None, "--dsn", help=DSN_HELP, show_default=False),
    step_timeout: float = typer.Option(10.0, "--step-timeout", help=STEP_TIMEOUT_HELP, min=0.1),
) -> None:
    """Run scenarios and check every step against its expectation.

    Prints each difference (step, session, expected, got) and exits 1 if any; prints
    "Verified against <server> <version>" when all hold.

    \b
    Example:
      jobqueue-demo verify scenarios/*.yaml
    """
    from . import app as core

    loaded = [core.load(s) for s in scenarios]
    failed = 0
    with core.server(dsn) as server:
        for item in loaded:
            report = core.run(item, server, step_timeout)
            if report.mismatches:
                failed += 1
                print(f"{item.path}: {len(report.mismatches)} expectation(s) not met")
                for m in report.mismatches:
                    print("  " + str(m).replace("\n", "\n  "))
            else:
                print(f"{item.path}: ok ({report.checked} expectation(s))")
        if failed:
            print(f"{failed} of {len(loaded)} scenario(s) differ on {server.label}")
            raise typer.Exit(EXIT_MISMATCH)
        print(f"Verified against {server.label}")


@app.command()
def record(
    scenario: str = typer.Argument(..., help="Scenario file to update in place."),
    dsn: Optional[str] = typer.Option(None, "--dsn", help=DSN_HELP, show_default=False),
    step_timeout: float = typer.Option(10.0, "--step-timeout", help=STEP_TIMEOUT_HELP, min=0.1),
) -> None:
    """Run a scenario and write what it observed into the file as expectations.

    Each statement's `expect:` is replaced (or added) and `verified:` names the server and
    date; everything else in the file is left as written.

    \b
    Example:
      jobqueue-demo record scenarios/my-lesson.yaml
    """
    from . import app as core

    loaded = core.load(scenario)
    with core.server(dsn) as server:
        written = core.record(loaded, server, step_timeout)
    print(f"{loaded.path}: recorded {written} statement result(s); {core.verified_line(server)}")


@app.command()
def lessons() -> None:
    """List the lessons that ship with jobqueue-demo.

    Each can be given by name to run, verify, record and export.

    \b
    Example:
      jobqueue-demo lessons
      jobqueue-demo run nowait
    """
    from .lessons import catalogue

    for lesson in catalogue():
        print(f"{lesson.name:22s} {lesson.summary}")
        print(f"{'':22s} sessions {', '.join(lesson.sessions)}; verified: {lesson.verified or 'not recorded'}")


def main(argv: list[str] | None = None) -> int:
    """Entry point: the one place where domain errors become a message and an exit code.

    Usage errors, --help and Ctrl-C (130) are handled by typer's standalone mode.
    """
    try:
        app(args=argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else EXIT_OK
    except DemoError as e:
        if _debug:
            raise
        _say(f"jobqueue-demo: {e}")
        return e.exit_code
    return EXIT_OK


def entry() -> None:
    sys.exit(main())
