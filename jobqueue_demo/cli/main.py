"""The command line's entry point: the one place where domain errors become exit codes.

0 ok, 1 expectations not met (or a stuck schedule), 2 bad scenario or usage, 3 server or
connection problem, 130 interrupted. The commands live one group per module; importing them
registers them on the app, in the order --help lists them.
"""

from __future__ import annotations

import os
import signal
import sys

from ..errors import EXIT_INTERRUPTED, EXIT_OK, DemoError
# Each import registers its commands on app; this order is the order of --help.
from . import run  # noqa: F401  run, export, verify, record, lessons, cleanup
from . import compare  # noqa: F401, I001
from . import explore  # noqa: F401, I001
from . import show  # noqa: F401
from . import workers  # noqa: F401  workers, bench
from .shared import app, options, say, say_notes

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


_interrupted = False


def _interrupt(signum, frame) -> None:
    """The first stop signal interrupts; later ones must not break the clean-up it started."""
    from .. import api as core

    global _interrupted
    _interrupted = True
    for stop in STOP_SIGNALS:
        signal.signal(stop, _cleaning_up)
    # Bounds the clean-up's waits, so a server that no longer answers cannot hold it.
    core.note_interrupt()
    raise KeyboardInterrupt


def _cleaning_up(signum, frame) -> None:
    # os.write, not print: a handler that interrupts a print to stderr must not print itself.
    os.write(2, b"jobqueue-demo: cleaning up (sessions, scratch database, server); a moment\n")


def main(argv: list[str] | None = None) -> int:
    """Entry point: the one place where domain errors become a message and an exit code.

    Usage errors, --help and Ctrl-C (130) are handled by typer's standalone mode.
    """
    # `kill <pid>` and a closed terminal get the same clean-up as Ctrl-C: sessions rolled
    # back, scratch database dropped, embedded server stopped.
    for stop in STOP_SIGNALS:
        signal.signal(stop, _interrupt)
    try:
        app(args=argv)
    except SystemExit as e:
        say_notes(e)
        return e.code if isinstance(e.code, int) else EXIT_OK
    except DemoError as e:
        if options.debug:
            import traceback

            traceback.print_exc()
        say(f"jobqueue-demo: {e}")
        say_notes(e)
        # A clean-up cut short by Ctrl-C (the server no longer answering) still ends as interrupted.
        return EXIT_INTERRUPTED if _interrupted else e.exit_code
    return EXIT_OK


def entry() -> None:
    sys.exit(main())
