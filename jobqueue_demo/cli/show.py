"""The `show` command: a lesson at a glance, or its YAML source."""

from __future__ import annotations

import typer

from .shared import app


@app.command()
def show(
    lesson: str = typer.Argument(..., help="Lesson name or scenario file."),
    source: bool = typer.Option(False, "--source", help="Print the lesson's YAML as shipped, to copy and change."),
) -> None:
    """Show a lesson before running it: title, sessions, what it proves, the expected outcome
    and its explore variant. Nothing connects to a server.

    \b
    Example:
      jobqueue-demo show nowait
      jobqueue-demo show skip-locked --source
    """
    import sys

    from .. import api
    from ..render.lesson_card import card
    from ..render.wrap import terminal_width

    from .shared import options

    loaded = api.load(lesson)
    # Its expectations as on the engine --engine names: a lesson's outcome differs by engine.
    target = api.engine_target(None, options.engine)
    if target in loaded.engines:
        loaded = loaded.for_engine(target)
    if source:
        print(loaded.source, end="" if loaded.source.endswith("\n") else "\n")
        return
    name = api.lesson_name(loaded)
    print("\n".join(card(loaded, name, api.variant_of(name), terminal_width(sys.stdout))))
