"""The commands about what ships and what runs leave behind: lessons, cleanup."""

from __future__ import annotations

from typing import Optional

import typer

from .shared import app, say


@app.command()
def lessons() -> None:
    """List the lessons that ship with jobqueue-demo.

    Each can be given by name to run, verify, record and export.

    \b
    Example:
      jobqueue-demo lessons
      jobqueue-demo run nowait
    """
    import sys

    from .. import api
    from ..errors import EXIT_USAGE
    from ..render.lesson_card import lesson_list
    from ..render.wrap import terminal_width

    found = api.lessons()
    out = lesson_list(found, terminal_width(sys.stdout))
    for lesson in found:
        if lesson.problem:
            say(f"jobqueue-demo: {lesson.problem}")
    for line in out:
        print(line)
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
