"""`run FILE.spec --format isolationtester`: a spec's run printed as PostgreSQL's isolationtester
prints it, byte for byte (PostgreSQL 14 and later), so its expected output files can be read
against ours.

Its lines: `Parsed test spec with N sessions`, a blank line and `starting permutation: ...`
before each permutation, `step NAME: SQL` (the SQL exactly as the spec holds it),
`step NAME: SQL <waiting ...>` then later `step NAME: <... completed>`, each result set as
libpq's PQprint draws it (aligned, `|` between columns, headers over a dashed line, a column
right-aligned while every value in it looks like a number, `(N rows)` and a blank line),
`ERROR:  message` (the primary message alone: a detail may hold transaction ids), each
notice as `SESSION: NOTICE:  message`, and each NOTIFY a session received after its step. What isolationtester writes to standard error (a
teardown that failed, a step no permutation uses) goes to `err`.
"""

from __future__ import annotations

from typing import TextIO

from ..engine.types import Result, shown
from ..run import events as ev

_NUMBER_CHARS = frozenset("0123456789.Ee -")


class IsolationtesterView:
    """`terminal`: the output is one, where what the server sent (values, messages) has its
    control characters written out, as every view does; in a file or a pipe it is as
    isolationtester prints it, byte for byte."""

    def __init__(self, out: TextIO, err: TextIO, scenario, terminal: bool = False):
        self.out = out
        self.err = err
        self.scenario = scenario
        self.terminal = terminal

    def write(self, event) -> None:
        text = self.text(event)
        if text:
            self.out.write(shown(text) if self.terminal else text)
            # A file or a pipe is written when a step is seen waiting (what a reader watches
            # for), else as its buffer fills: a flush an event was a system call a line.
            if self.terminal or isinstance(event, ev.Waiting):
                self.out.flush()

    def text(self, event) -> str:
        if isinstance(event, ev.RunStarted):
            self._warn_unused()
            return f"Parsed test spec with {len(self.scenario.sessions)} sessions\n"
        if isinstance(event, ev.PermutationStarting):
            return "\nstarting permutation: " + " ".join(event.steps) + "\n"
        if isinstance(event, ev.Noticed):
            return "".join(f"{event.session}: {line}\n" for line in event.lines)
        if isinstance(event, ev.Waiting):
            return f"step {event.comment}: {event.sql} <waiting ...>\n"
        if isinstance(event, ev.Completed):
            head = f"step {event.comment}: <... completed>\n" if event.waited_ms is not None else f"step {event.comment}: {event.sql}\n"
            return head + "".join(_answer(event.session, r) for r in _each(event.result))
        if isinstance(event, ev.ScriptAnswered):
            return self._script(event)
        if isinstance(event, ev.Notified):
            return f'{event.session}: NOTIFY "{event.channel}" with payload "{event.payload}" from {event.sender}\n'
        if isinstance(event, ev.StepCanceled):
            return f"isolationtester: canceling step {event.step} after {event.seconds} seconds\n"
        return self._explored(event)

    def _explored(self, event) -> str:
        """What only explore's permutations have, in lines of the same form: a fault done in a
        step's place, a permutation that could not complete, the invariants after it."""
        if isinstance(event, ev.FaultApplied):
            return f"step {self.scenario.steps[event.index].comment}!{event.action}: <{event.detail}>\n"
        if isinstance(event, ev.PermutationStuck):
            return f"{event.message}\n"
        if isinstance(event, ev.Checked):
            return "".join(_invariant(inv, got) for inv, got in event.results)
        return ""

    def _script(self, event: ev.ScriptAnswered) -> str:
        """A block's last result, as PQexec returns it; a failed block is told on `err`, in
        libpq's words (PQerrorMessage: its DETAIL, HINT and cursor lines too). A block of no
        statement fails too, with no words at all, not even a newline."""
        error = event.result.error
        if error is not None or event.result.empty:
            where = f"{event.what} of session {event.session}" if event.session else event.what
            text = "" if error is None else getattr(error, "libpq_text", "") or f"{_error(error)}\n"
            self.out.flush()
            self.err.write(f"{where} failed: {text}")
            self.err.flush()
            return ""
        return pq_print(event.result)

    def _warn_unused(self) -> None:
        spec = self.scenario.spec
        if not spec.permutations:
            return
        used = {p.name for permutation in spec.permutations for p in permutation}
        for name in sorted(spec.steps()):
            if name not in used:
                self.err.write(f"unused step name: {name}\n")
        self.err.flush()


def _each(result: Result) -> tuple[Result, ...]:
    return tuple(getattr(result, "earlier", ())) + (result,)


def _invariant(invariant, got: Result) -> str:
    if got.error is None and not got.rows:
        return f"invariant {invariant.name}: holds\n"
    return f"invariant {invariant.name}: VIOLATED\n" + _answer("", got)


def _answer(session: str, result: Result) -> str:
    notices = "".join(f"{session}: {line}\n" for line in getattr(result, "notices", ()))
    if result.error is not None:
        return notices + f"{_error(result.error)}\n"
    return notices + pq_print(result)


def _error(error) -> str:
    """PostgreSQL's `ERROR:  message` as the server sent it (libpq's whole text for an error
    libpq made, as PQresultErrorMessage gives it); another engine's as its client prints it
    (a spec's MySQL variant)."""
    if getattr(error, "by_libpq", False) and error.libpq_text:
        return error.libpq_text  # its last line ends in a newline: a blank line follows, as there
    severity = getattr(error, "severity", None)
    return f"{severity}:  {error.message}" if severity else str(error)


def pq_print(result: Result) -> str:
    """A result set as libpq's PQprint draws it with header, align and `|`: widths in bytes,
    a column right-aligned while each of its non-empty values is made of digits, `.`, `E`,
    `e`, space and `-`, ends with a digit and does not start with an E; nothing at all for
    a result without columns."""
    if not result.columns:
        return ""
    width = [len(name.encode()) for name in result.columns]
    text = [False] * len(width)
    for row in result.rows:
        for j, value in enumerate(row):
            if not value:
                continue
            if not text[j] and not _looks_numeric(value):
                text[j] = True
            width[j] = max(width[j], len(value.encode()))

    def line(values) -> str:
        return "|".join(_pad(v or "", width[j], text[j]) for j, v in enumerate(values)) + "\n"

    count = len(result.rows) + result.omitted
    border = "+".join("-" * w for w in width) + "\n"
    body = "".join(line(row) for row in result.rows)
    return line(result.columns) + border + body + f"({count} row{'' if count == 1 else 's'})\n\n"


def _looks_numeric(value: str) -> bool:
    return value[0] not in "Ee" and value[-1].isdigit() and value[-1].isascii() and all(c in _NUMBER_CHARS for c in value)


def _pad(value: str, width: int, left: bool) -> str:
    fill = " " * max(width - len(value.encode()), 0)
    return value + fill if left else fill + value
