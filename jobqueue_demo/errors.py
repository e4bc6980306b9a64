"""Typed errors, each carrying the exit code the CLI maps it to at one boundary."""

from __future__ import annotations

import signal

EXIT_OK = 0
EXIT_MISMATCH = 1
EXIT_USAGE = 2
EXIT_SERVER = 3
EXIT_OUTPUT = 4
# A stop signal ends the run with the shell's code for it, 128 + the signal's number.
EXIT_SIGNAL_BASE = 128
EXIT_INTERRUPTED = EXIT_SIGNAL_BASE + signal.SIGINT
# A reader that went away (a closed pipe) ends a Unix tool as SIGPIPE would, silently.
EXIT_BROKEN_PIPE = EXIT_SIGNAL_BASE + signal.SIGPIPE

# How a stop signal is told: Ctrl-C is what a user pressed, the others are named.
STOP_WORDS = {
    signal.SIGINT: "interrupted (Ctrl-C)",
    signal.SIGTERM: "terminated by SIGTERM",
    signal.SIGHUP: "hung up (SIGHUP: the terminal closed)",
}
STOP_SIGNALS = tuple(STOP_WORDS)


class Stopped(KeyboardInterrupt):
    """A stop signal, raised wherever the program was: a KeyboardInterrupt, so every clean-up
    written for Ctrl-C runs for SIGTERM and SIGHUP too; it remembers which signal it was."""

    def __init__(self, signum: int = signal.SIGINT):
        super().__init__(signum)
        self.signum = signum
        self.exit_code = EXIT_SIGNAL_BASE + signum

    def __str__(self) -> str:
        return STOP_WORDS.get(self.signum, f"stopped by signal {self.signum}")


def stop_of(exc: BaseException | None) -> Stopped:
    """The stop signal behind a KeyboardInterrupt: one raised by Python itself is Ctrl-C."""
    return exc if isinstance(exc, Stopped) else Stopped()


class DemoError(Exception):
    """Base of every error the CLI reports as one line without a traceback."""

    exit_code = EXIT_USAGE


class UsageError(DemoError):
    exit_code = EXIT_USAGE


class TableMissing(UsageError):
    """`replay --dsn`: the database lacks a table the report's locks are on (the wrong database,
    most likely): a bad input, as a schema file without it is."""

    def __init__(self, database: str, table: str):
        super().__init__(f"--dsn's database {database} has no table {table}, which the report's locks are on")


class ScenarioError(DemoError):
    """A scenario file that cannot be used; the message names file and line."""

    exit_code = EXIT_USAGE

    def __init__(self, path: str, message: str, line: int | None = None, column: int | None = None):
        self.path = path
        self.line = line
        self.column = column
        self.detail = message
        where = path
        if line is not None:
            where += f":{line}"
            if column is not None:
                where += f":{column}"
        super().__init__(f"{where}: {message}")


class ReportError(ScenarioError):
    """A deadlock report given to `replay`, or the schema or rows with it, that cannot be
    used; the message names the file and, where one is to blame, the line."""


class NotReproduced(DemoError):
    """`replay` ran every schedule it could build and none showed the report's cycle."""

    exit_code = EXIT_MISMATCH


class RecordError(DemoError):
    """`record` would have written a file that does not load or does not hold; nothing was written."""

    exit_code = EXIT_USAGE


class ServerError(DemoError):
    """The server could not be reached, started or used."""

    exit_code = EXIT_SERVER


class StuckError(DemoError):
    """The schedule cannot go on: the next step waits on something nothing will release."""

    exit_code = EXIT_MISMATCH


class IsolationtesterEnd(DemoError):
    """An end of a spec's run that isolationtester comes to as well; with `--format
    isolationtester` it ends as isolationtester does, `words` on standard error (empty: told
    already, as an event) and exit code 1."""

    isolationtester_exit = EXIT_MISMATCH
    words = ""


class SpecSetupFailed(IsolationtesterEnd, ScenarioError):
    """A spec's setup block (or a session's) failed: the run ends there; the failure was told
    as an event first."""


class SpecAbandoned(IsolationtesterEnd, StuckError):
    """A spec's run given up as isolationtester gives it up: a step still running after twice
    the step timeout, or steps still held by their annotations at a permutation's end."""

    def __init__(self, message: str, words: str):
        super().__init__(message)
        self.words = words


class FetchTimeout(StuckError):
    """A result still arriving when the step timeout ran out; its connection is dropped."""


class UnusableTemplate(ServerError):
    """The cached template could not be read, or a server did not start from it."""

    def __init__(self, message: str, inode: int | None):
        super().__init__(message)
        self.inode = inode


class StartFailed(ServerError):
    """The embedded server process exited, or did not answer, while starting."""


class OutputError(DemoError):
    """Standard output could not be written (a full disk, a closed descriptor)."""

    exit_code = EXIT_OUTPUT


class ReaderGone(OutputError):
    """Standard output is a pipe whose reader has gone (`| head`): nothing more to say."""

    exit_code = EXIT_BROKEN_PIPE


class MismatchError(DemoError):
    exit_code = EXIT_MISMATCH


class ExpectationsNotMet(MismatchError):
    """A run that differs from its scenario's expectations; `mismatches` lists each difference."""

    def __init__(self, message: str, mismatches: list):
        super().__init__(message)
        self.mismatches = mismatches


class WorkersStuck(StuckError):
    """No job completed for the stall window; `diagnosis` (workers/stall.py) says what the workers wait for."""

    def __init__(self, message: str, diagnosis):
        super().__init__(message)
        self.diagnosis = diagnosis


class StuckRun(StuckError):
    """A run that got stuck; `mismatches` lists the differences met before it stopped."""

    def __init__(self, message: str, mismatches: list):
        super().__init__(message)
        self.mismatches = mismatches
