"""The command that runs a lesson as a web page the class follows: serve. Its own module, so
that only `serve` imports the web stack (cli/main.py)."""

import sys
from contextlib import nullcontext
from typing import Optional

import typer

from ..errors import EXIT_MISMATCH
from .shared import Cluster, Dsns, ShowLocks, StepTimeout, app, fitted, heading, pace_option, say, server_for, told_quit

HOST_HELP = (
    "The address to listen on. The default, 127.0.0.1, serves this machine only; 0.0.0.0 serves every "
    "network this machine is on (a classroom's): anyone there can open the students' page and see the "
    "lesson, its SQL and its results, and vote with --predict; only the teacher's address (a random "
    "token) runs steps. Nothing else of this machine is served."
)


@app.command()
def serve(
    scenario: str = typer.Argument(..., help="Scenario file, .spec file or lesson name."),
    dsn: Dsns = None,
    step_timeout: StepTimeout = 10.0,
    host: str = typer.Option("127.0.0.1", "--host", help=HOST_HELP),
    port: Optional[int] = typer.Option(
        None, "--port", min=0, max=65535, show_default=False,
        help="The port to listen on; 0 takes any free one. Default: 8000, or the next free one up to 8019.",
    ),
    predict: bool = typer.Option(
        False, "--predict", help="Before each statement the pages ask the class what it will do (return rows or OK, "
        "wait, fail); the teacher's first press reveals the tally, the second runs it."
    ),
    pace: Optional[float] = pace_option("Run one step every SECONDS by itself; the teacher can still step sooner."),
    show_locks: ShowLocks = False,
    cluster: Cluster = None,
) -> None:
    """Run a lesson as a web page the whole class follows, one step at a time.

    Prints the students' address and the teacher's (with a random token). The teacher steps
    from the page (the button, space or the right arrow), from this terminal (Enter) or with
    POST /api/step?teacher=TOKEN; students' pages only look, and may look back through the
    steps already run. q, or the end of standard input, ends the lesson where it waits for a
    step (with --pace the lesson goes on by itself); at the end the pages show the verdict and
    the page of the whole run, and Enter, q or the end of input closes them. Ctrl-C ends it
    at any point: sessions rolled back, scratch database dropped, every page told, exit 130.

    \b
    Example:
      jobqueue-demo serve skip-locked
      jobqueue-demo serve deadlock --predict --show-locks
      jobqueue-demo serve skip-locked --pace 0.2
      jobqueue-demo serve skip-locked --host 0.0.0.0 --port 0
    """
    from .. import api
    from ..render.stepper import Keys, Quit
    from ..render.color import color_on
    from ..render.transcript import TranscriptWriter, event_lines, prompted
    from ..render.wrap import terminal_width

    loaded = api.load(scenario)
    if loaded.spec is not None and show_locks:
        from ..errors import UsageError

        raise UsageError("an isolation spec runs as isolationtester runs it: --show-locks is for YAML scenarios")
    options = api.serve_options(host, port, predict, pace)
    with server_for(dsn, (loaded,), cluster) as server:
        heading(f"-- {loaded.title}: on {server.label} ({server.where})", False)
        writer = TranscriptWriter(sys.stdout, tuple(loaded.prompts.values()), color_on(sys.stdout), terminal_width(sys.stdout))

        def announce(addresses) -> None:
            # On standard output, flushed at once: a script (or a test) reads them to open the pages.
            print(f"students: {addresses.students}\nteacher: {addresses.teacher}", flush=True)
            say(fitted("-- Enter (or the teacher's page) runs the next step; q ends the lesson (everything is rolled back)",
                       sys.stderr))

        def show(event) -> None:
            writer.write(event_lines(prompted(event, loaded.prompts)))

        stdin = sys.stdin.fileno() if sys.stdin is not None else None
        try:
            with Keys(stdin) if stdin is not None else nullcontext() as keys:
                report = api.serve(loaded, server, step_timeout, options, keys, announce, show, show_locks)
        except Quit as stop:
            told_quit(stop)
            return
    if report.mismatches:
        say(f"-- {len(report.mismatches)} expectation(s) not met; 'jobqueue-demo verify' shows them")
        raise typer.Exit(EXIT_MISMATCH)
    say(f"-- every expectation met ({report.checked} checked); sessions closed, scratch database dropped")

