"""Typed errors, each carrying the exit code the CLI maps it to at one boundary."""

from __future__ import annotations

EXIT_OK = 0
EXIT_MISMATCH = 1
EXIT_USAGE = 2
EXIT_SERVER = 3
# Typer's answer to KeyboardInterrupt, which SIGTERM is mapped to.
EXIT_INTERRUPTED = 130


class DemoError(Exception):
    """Base of every error the CLI reports as one line without a traceback."""

    exit_code = EXIT_USAGE


class UsageError(DemoError):
    exit_code = EXIT_USAGE


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


class RecordError(DemoError):
    """`record` would have written a file that does not load or does not hold; nothing was written."""

    exit_code = EXIT_USAGE


class ServerError(DemoError):
    """The server could not be reached, started or used."""

    exit_code = EXIT_SERVER


class StuckError(DemoError):
    """The schedule cannot go on: the next step waits on something nothing will release."""

    exit_code = EXIT_MISMATCH


class FetchTimeout(StuckError):
    """A result still arriving when the step timeout ran out; its connection is dropped."""


class UnusableTemplate(ServerError):
    """The cached template could not be read, or a server did not start from it."""

    def __init__(self, message: str, inode: int | None):
        super().__init__(message)
        self.inode = inode


class StartFailed(ServerError):
    """The embedded server process exited, or did not answer, while starting."""


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
