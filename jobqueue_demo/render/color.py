"""One colour policy for every view: rich's own decision, made without importing rich.

Colour goes to a terminal (or wherever TTY_COMPATIBLE=1 or a non-empty FORCE_COLOR says it
may), never when NO_COLOR is set (https://no-color.org) or TERM is dumb: rich's rules
(rich/console.py: is_terminal, is_dumb_terminal, no_color). Deciding here, not by asking a
rich Console, keeps rich's import (about 23 ms) off every run whose output is plain; every
Console of ours is made by `console()`, so rich styles exactly when this says so.
"""

from __future__ import annotations

import os
import sys

# Session i's colour in every view, by rich's names.
SESSION_COLOURS = ("cyan", "magenta", "yellow", "green", "blue", "red")


def color_on(stream) -> bool:
    env = os.environ
    if env.get("NO_COLOR", ""):
        return False
    compatible = env.get("TTY_COMPATIBLE", "")
    if compatible in ("0", "1"):
        terminal = compatible == "1"
    elif "FORCE_COLOR" in env:
        terminal = env["FORCE_COLOR"] != ""
    else:
        terminal = _isatty(stream)
    return terminal and env.get("TERM", "").lower() not in ("dumb", "unknown")


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no such method, or a closed stream
        return False


def session_colours(sessions: tuple[str, ...]) -> dict[str, str]:
    return {name: SESSION_COLOURS[i % len(SESSION_COLOURS)] for i, name in enumerate(sessions)}


def console(stream=None, stderr: bool = False, on: bool | None = None, **options):
    """A rich Console on `stream` (standard output, or error with `stderr`) that colours when
    `on`, by default when color_on says so."""
    from rich.console import Console

    if on is None:
        on = color_on(stream or (sys.stderr if stderr else sys.stdout))
    # Told to colour, rich must not decide otherwise from the stream (a StringIO, a pipe with FORCE_COLOR).
    return Console(file=stream, stderr=stderr, force_terminal=on or None, color_system="auto" if on else None, **options)
