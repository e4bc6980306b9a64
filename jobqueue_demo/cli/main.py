"""The command line's entry point: the one place where domain errors become exit codes.

0 ok, 1 expectations not met (or a stuck schedule), 2 bad scenario or usage, 3 server or
connection problem, 4 standard output could not be written, 128 + n stopped by signal n
(130 Ctrl-C, 143 SIGTERM, 129 SIGHUP), 141 the reader of a pipe went away. The commands live one group per module; importing one
registers its commands on the app.
"""

from __future__ import annotations

import importlib
import os
import sys

from .. import api
from ..errors import EXIT_OK, DemoError, ReaderGone, Stopped
from .shared import app, guard_stdout, options, say, say_notes
from .stops import catch_stops, told

# Each command module and the commands it registers, in the order --help lists them.
COMMAND_MODULES = {
    "run": ("run",),
    "serve": ("serve",),
    "verify": ("export", "verify", "record"),
    "lessons": ("lessons", "cleanup"),
    "compare": ("compare",),
    "explore": ("explore",),
    "show": ("show",),
    "workers": ("workers", "bench"),
    "replay": ("replay",),
}


# The options given before the command (shared.py's callback): flags, and those that take a value.
GLOBAL_FLAGS = ("--debug", "--allow-shared-user")
GLOBAL_VALUED = ("--engine",)


def command_at(argv: list[str]) -> int:
    """Where the command word is: the first word that is neither an option nor a global option's value."""
    at = 0
    while at < len(argv) and argv[at].startswith("-"):
        at += 2 if argv[at] in GLOBAL_VALUED else 1
    return min(at, len(argv))


def hoisted(argv: list[str]) -> list[str]:
    """The global options moved before the command, so `run nowait --engine postgresql` means
    `--engine postgresql run nowait`: a reader cannot be expected to know which options are global."""
    at = command_at(argv)
    before, after, moved = argv[: at + 1], [], []
    rest = iter(argv[at + 1:])
    for arg in rest:
        if arg == "--":
            after += [arg, *rest]
        elif arg in GLOBAL_FLAGS or arg.split("=", 1)[0] in GLOBAL_VALUED:
            moved.append(arg)
            if arg in GLOBAL_VALUED:
                moved.append(next(rest, ""))
        else:
            after.append(arg)
    if moved and moved[-1] == "":
        return argv  # `--engine` with no value: click says what is missing
    return argv[:at] + moved + before[at:] + after


def commands_for(argv: list[str]):
    """The app, with the module of the command `argv` names registered, or every module when
    it names none (--help, a typo): typer builds a click command for each registered one on
    every call, and each module brings its own imports, a few ms of every run's start-up."""
    # --help before the command asks for the app's help, which lists every command.
    at = command_at(argv)
    named = argv[at] if at < len(argv) and "--help" not in argv[:at] else None
    wanted = [module for module, names in COMMAND_MODULES.items() if named in names] or COMMAND_MODULES
    for module in wanted:
        importlib.import_module(f"{__package__}.{module}")
    return app


def all_commands():
    """The app with every command registered, for what lists them (tests, docs checks)."""
    return commands_for([])


_stopped: Stopped | None = None


def _interrupt(signum, frame) -> None:
    """The first stop signal interrupts, unless it comes during a clean-up, which ends first;
    later ones must not break the clean-up it started."""
    global _stopped
    _stopped = Stopped(signum)
    catch_stops(_cleaning_up)
    # Bounds the clean-up's waits, so a server that no longer answers cannot hold it.
    if not api.note_interrupt(_stopped):
        raise _stopped


def _cleaning_up(signum, frame) -> None:
    # os.write, not print: a handler that interrupts a print to stderr must not print itself.
    os.write(2, b"jobqueue-demo: cleaning up (sessions, scratch database, server); a moment\n")


def main(argv: list[str] | None = None) -> int:
    """Entry point: the one place where domain errors become a message and an exit code.

    Usage errors and --help are handled by typer's standalone mode; a stop signal it turns
    into exit 130 is told here and ends with the signal's own code.
    """
    # `kill <pid>` and a closed terminal get the same clean-up as Ctrl-C: sessions rolled
    # back, scratch database dropped, embedded server stopped.
    catch_stops(_interrupt)
    guard_stdout()
    if argv is None:
        argv = sys.argv[1:]
    argv = hoisted(argv)
    try:
        commands_for(argv)(args=argv)
    except KeyboardInterrupt as e:  # outside typer's own catch: importing the command, building it
        return told(e)
    except SystemExit as e:
        stop = _untold_stop(e)
        if stop is not None:
            say(f"jobqueue-demo: {stop}")
        say_notes(e)
        if _stopped is not None:
            return _stopped.exit_code
        return e.code if isinstance(e.code, int) else EXIT_OK
    except ReaderGone as e:
        say_notes(e)
        return e.exit_code
    except DemoError as e:
        if options.debug:
            import traceback

            traceback.print_exc()
        if _stopped is not None:
            say(f"jobqueue-demo: {_stopped}")
        say(f"jobqueue-demo: {e}")
        say_notes(e)
        # A clean-up cut short by a stop signal (the server no longer answering) still ends as stopped.
        return _stopped.exit_code if _stopped is not None else e.exit_code
    return EXIT_OK


def _untold_stop(exit: SystemExit) -> BaseException | None:
    """The stop signal typer turned into exit 130 without a word; a command that told it
    (run --step) raised its own exit, caused by nothing."""
    cause = getattr(exit.__context__, "__cause__", None)
    return cause if isinstance(cause, KeyboardInterrupt) else None

