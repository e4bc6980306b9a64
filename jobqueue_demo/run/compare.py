"""One lesson run on two engines, step against step: where the outcomes differ.

A lesson's steps are the same on every engine (scenario/loader.py), so step i of one run is
step i of the other; an outcome differs when one waited and the other did not, one failed
and the other returned rows, the errors are of different classes, or the results differ.
Errors of the same portable class (1205 and 55P03: lock-not-available) are the same outcome.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..engine.types import Result
from ..scenario.model import Scenario
from .verify import Outcome, describe_result, outcomes


@dataclass(frozen=True)
class EngineRun:
    """One engine's run of the lesson: its variant, what happened, where it ran."""

    scenario: Scenario
    events: tuple
    verified: str  # "MariaDB 10.11.19 on 2026-12-04": the server, and the day it ran
    mismatches: tuple = ()  # expectations this run did not meet

    @property
    def server(self) -> str:
        return self.verified.rsplit(" on ", 1)[0]


@dataclass(frozen=True)
class StepDifference:
    step: int  # 1-based, as a reader counts
    line: int
    session: str
    what: str  # "waited vs not", "error vs rows", "different rows", "different errors", ...
    left: str
    right: str
    permutation: int = 0  # an isolation spec's, from 1; 0 for a scenario


@dataclass
class Comparison:
    """The lesson run on two engines (or two servers), and the statements whose outcome differs."""

    left: EngineRun
    right: EngineRun
    differences: list[StepDifference]  # in step order


def differences(left: EngineRun, right: EngineRun) -> list[StepDifference]:
    """Every statement whose outcome differs between the two runs, in step order; for an
    isolation spec, permutation by permutation (a step runs once in each)."""
    if left.scenario.spec is None:
        return _differences(left.scenario, list(left.events), list(right.events))
    found = []
    pairs = zip(_permutations(left.events), _permutations(right.events))
    for number, (events_left, events_right) in enumerate(pairs, 1):
        for d in _differences(left.scenario, events_left, events_right):
            found.append(StepDifference(d.step, d.line, d.session, f"permutation {number}: {d.what}", d.left, d.right, number))
    return found


def _permutations(events) -> list[list]:
    """A spec run's events, cut where each permutation starts."""
    from .events import PermutationStarting

    cut: list[list] = []
    for event in events:
        if isinstance(event, PermutationStarting):
            cut.append([])
        elif cut:
            cut[-1].append(event)
    return cut


def _differences(scenario: Scenario, events_left: list, events_right: list) -> list[StepDifference]:
    seen_left, seen_right = outcomes(events_left), outcomes(events_right)
    found = []
    for index, step in scenario.statements():
        if index not in seen_left and index not in seen_right:
            continue  # a spec's step that this permutation does not run
        a, b = seen_left.get(index, Outcome(None, False)), seen_right.get(index, Outcome(None, False))
        what = _what_differs(a, b) or _commit_differs(step.sql, a, b)
        if what:
            found.append(StepDifference(index + 1, step.line, step.session, what, describe(a), describe(b)))
    return found


def describe(outcome: Outcome) -> str:
    waited = "waited, then " if outcome.waited else ""
    if outcome.result is None:
        return waited + "no result"
    return waited + describe_result(outcome.result)


def _what_differs(a: Outcome, b: Outcome) -> str | None:
    if a.waited != b.waited:
        return "waited vs not" if a.waited else "not vs waited"
    kind_a, kind_b = _kind(a.result), _kind(b.result)
    if kind_a != kind_b:
        return f"{kind_a} vs {kind_b}"
    if kind_a == "error":
        same = a.result.error.error_class or a.result.error.code
        return None if same == (b.result.error.error_class or b.result.error.code) else "different errors"
    if kind_a == "rows" and (a.result.columns, a.result.rows) != (b.result.columns, b.result.rows):
        return "different rows"
    if kind_a == "ok" and (a.result.affected or 0) != (b.result.affected or 0):
        return "different row counts"
    return None


COMMITS = re.compile(r"^\s*(COMMIT|END)\b", re.IGNORECASE)


def _commit_differs(sql: str, a: Outcome, b: Outcome) -> str | None:
    """A COMMIT that PostgreSQL answered ROLLBACK (its transaction had failed) did not commit,
    though both engines answered without an error."""
    if not COMMITS.match(sql):
        return None
    rolled = [o.result is not None and o.result.tag == "ROLLBACK" for o in (a, b)]
    if rolled[0] == rolled[1]:
        return None
    return "rolled back vs committed" if rolled[0] else "committed vs rolled back"


def _kind(result: Result | None) -> str:
    if result is None:
        return "no result"
    if result.error is not None:
        return "error"
    return "rows" if result.is_rows else "ok"
