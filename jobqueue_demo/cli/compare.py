"""`compare`: one lesson on two engines, side by side."""

from __future__ import annotations

from enum import Enum
from typing import List

import typer

from ..errors import EXIT_MISMATCH
from .shared import DSN_FORMS, StepTimeout, app, options


class CompareFormat(str, Enum):
    text = "text"
    json = "json"


@app.command()
def compare(
    scenario: str = typer.Argument(..., help="Lesson name or scenario file, written for both engines."),
    dsn: List[str] = typer.Option(
        [], "--dsn", show_default=False,
        help=f"Twice, one server per side: {DSN_FORMS}. Default: for each engine, $JOBQUEUE_DEMO_DSN where it "
        "names that engine, else that engine's private throwaway server.",
    ),
    step_timeout: StepTimeout = 10.0,
    fmt: CompareFormat = typer.Option(
        CompareFormat.text, "--format", help="text: the two transcripts in columns; json: the differences."
    ),
) -> None:
    """Run a lesson on MariaDB/MySQL and on PostgreSQL and print the two transcripts side by
    side, in the terminal's width (80 columns in a file or a pipe), one row per step; a step whose statement's outcome differs (waited
    on one engine and not the other, an error against rows, other rows, errors of another
    class) is marked with * and listed with both outcomes under the columns. Exit code 1
    when a run did not meet the lesson's expectations for its engine.

    \b
    Example:
      jobqueue-demo compare gap-locks
      jobqueue-demo compare deadlock --format json
    """
    import sys

    from .. import api
    from ..render.compare import compare_json, compare_text
    from ..render.wrap import terminal_width

    loaded = api.load(scenario)
    done = api.compare(loaded, dsn, step_timeout, options.allow_shared_user)
    if fmt is CompareFormat.json:
        print(compare_json(done.left, done.right, done.differences), end="")
    else:
        print(compare_text(done.left, done.right, done.differences, terminal_width(sys.stdout) or 80), end="")
    if done.left.mismatches or done.right.mismatches:
        raise typer.Exit(EXIT_MISMATCH)
