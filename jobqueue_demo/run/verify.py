"""Expectations against what a run produced: every difference, named by step and session."""

from __future__ import annotations

from dataclasses import dataclass

from ..engine.types import Result, shown
from ..scenario.model import Expectation, Scenario, one_line
from . import events as ev


@dataclass(eq=False)
class Mismatch:
    """A statement whose outcome differs from its `expect:`, in both words."""

    step: int  # 1-based, as a reader counts
    line: int
    session: str
    sql: str
    expected: str
    got: str

    def __str__(self) -> str:
        first = one_line(self.sql, 70)
        return (
            f"step {self.step} (line {self.line}), session {self.session}: {first}\n"
            f"  expected: {self.expected}\n"
            f"  got:      {self.got}"
        )


@dataclass(eq=False)
class Outcome:
    """What one statement did: its final result and whether it waited on a lock first."""

    result: Result | None
    waited: bool


def outcomes(events: list) -> dict[int, Outcome]:
    waited = {e.index for e in events if isinstance(e, ev.Waiting)}
    done = {e.index: e.result for e in events if isinstance(e, ev.Completed)}
    return {i: Outcome(done.get(i), i in waited) for i in waited | done.keys()}


def check(scenario: Scenario, events: list, reached: int | None = None) -> list[Mismatch]:
    """Every difference, those seen when a statement answered first: an error where none was
    expected comes before the statements left without an answer because of it.

    `reached`: the run stopped before this step index; later steps are not compared.
    """
    seen = outcomes(events)
    found = []
    for index, step in scenario.statements():
        if reached is not None and index >= reached:
            break
        outcome = seen.get(index, Outcome(None, False))
        problem = _compare(step.expect, outcome) if step.expect is not None else _unexpected_error(outcome)
        if problem:
            expected, got = problem
            found.append((outcome.result is None, Mismatch(index + 1, step.line, step.session, step.sql, expected, got)))
    return [m for _, m in sorted(found, key=lambda pair: (pair[0], pair[1].step))]


def _unexpected_error(outcome: Outcome) -> tuple[str, str] | None:
    """A statement without an expectation is still expected not to fail."""
    if outcome.result is not None and outcome.result.error is not None:
        return ("no error (no expectation written)", describe_result(outcome.result))
    return None


def failed_unexpectedly(scenario: Scenario, events: list) -> list[str]:
    """"B's statement at step 3 failed with ERROR 1064" for each error no expectation allowed."""
    out = []
    for event in events:
        if isinstance(event, ev.Completed) and event.result.error is not None:
            step = scenario.steps[event.index]
            expect = getattr(step, "expect", None)
            if expect is None or expect.error is None or not expect.error.matches(event.result.error):
                out.append(
                    f"{event.session}'s statement at step {event.index + 1} (line {step.line}) "
                    f"failed with ERROR {event.result.error.code}"
                )
    return out


def met(expect: Expectation, outcome: Outcome) -> bool:
    return _compare(expect, outcome) is None


def _compare(expect: Expectation, outcome: Outcome) -> tuple[str, str] | None:
    result = outcome.result
    if expect.waits is not None and expect.waits != outcome.waited:
        return (_waits(expect.waits), _waits(outcome.waited))
    if result is None:
        if expect.waits and not (expect.ok or expect.rows or expect.columns or expect.error or expect.affected is not None):
            return None
        return (describe_expectation(expect), "no result (the run ended before this statement finished)")
    if expect.error is not None:
        if result.error is None or not expect.error.matches(result.error):
            return (describe_expectation(expect), describe_result(result))
        return None
    if result.error is not None:
        return (describe_expectation(expect), describe_result(result))
    wants_rows = expect.rows is not None or expect.columns is not None
    if wants_rows != result.is_rows and (wants_rows or expect.ok or expect.affected is not None):
        return (describe_expectation(expect), describe_result(result))
    if expect.columns is not None and tuple(expect.columns) != result.columns:
        return (f"columns {flow(expect.columns)}", f"columns {flow(result.columns)}")
    if expect.rows is not None and (tuple(expect.rows) != result.rows or not result.whole):
        return (describe_expectation(expect), describe_result(result))
    if expect.affected is not None and expect.affected != result.affected:
        return (describe_expectation(expect), describe_result(result))
    return None


def _waits(flag: bool) -> str:
    return "waits for a lock" if flag else "does not wait"


def flow(values) -> str:
    """A row or a list of names as the reports print it: [1, NULL, x], control characters
    written out as the transcript writes them."""
    return "[" + ", ".join("NULL" if v is None else shown(str(v)) for v in values) + "]"


def describe_expectation(expect: Expectation) -> str:
    if expect.error is not None:
        return f"error {expect.error.spelling}"
    parts = []
    if expect.columns is not None:
        parts.append(f"columns {flow(expect.columns)}")
    if expect.rows is not None:
        parts.append(_rows(expect.rows))
    if expect.affected is not None:
        parts.append(f"{expect.affected} row(s) affected")
    if expect.ok and not parts:
        parts.append("Query OK")
    return ", ".join(parts) or "any result"


def describe_result(result: Result) -> str:
    if result.error is not None:
        name = result.error.name
        return f"error {result.error.code}" + (f" ({name})" if name else "") + f": {shown(result.error.message)}"
    if result.is_rows:
        if result.omitted:
            total = len(result.rows) + result.omitted
            return f"columns {flow(result.columns)}, {total} rows (too many to keep and compare)"
        if result.cut:
            return f"columns {flow(result.columns)}, {len(result.rows)} rows (values too long to keep and compare)"
        return f"columns {flow(result.columns)}, {_rows(result.rows)}"
    if result.tag == "ROLLBACK":  # PostgreSQL's answer to the COMMIT of a failed transaction
        return "ROLLBACK (the transaction had failed: nothing was committed)"
    return f"Query OK, {result.affected} row(s) affected"


def _rows(rows) -> str:
    text = "rows [" + ", ".join(flow(r) for r in rows) + "]"
    return text if len(rows) else "no rows"
