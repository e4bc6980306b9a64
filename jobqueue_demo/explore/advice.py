"""What explore tells a reader so that other orders of a lesson do not teach something false.

A lesson's `comment` describes what happens in the lesson's own order; in another order it
may be untrue. A lesson that hard-codes job ids or checks no invariants was written for one
order: exploring it shows schedules it was never meant to survive.
"""

from __future__ import annotations

import dataclasses
import re

from ..run import events as ev
from ..scenario.model import Scenario, Statement
from ..run.verify import Outcome, met

# `WHERE id = 1` or `id IN (1, 2)`: the statement acts on a job chosen when the lesson was
# written, not on the one its session claimed in this schedule.
HARD_CODED_ID = re.compile(r"\bid\s*(=|IN\s*\()\s*\d", re.IGNORECASE)
LESSON_ORDER = "in the lesson's order: "


def advice(scenario: Scenario, name: str) -> str | None:
    """One line to print before exploring, or None when the scenario was written for it."""
    reasons = []
    if any(HARD_CODED_ID.search(s.sql) for _, s in scenario.statements()):
        reasons.append("hard-codes job ids")
    if not scenario.invariants:
        reasons.append("has no invariants")
    if not reasons:
        return None
    head = f"note: {name} {' and '.join(reasons)}, so other orders show what the lesson never claimed"
    if scenario.explore:
        return f"{head}; its explore variant is {scenario.explore} (jobqueue-demo explore {scenario.explore})"
    return f"{head}; write captures and invariants for explore (docs/scenario-format.md)"


def honest_events(scenario: Scenario, events) -> list:
    """The events with each step's comment kept only where it is true in this schedule.

    A comment stays where the step's observed result met the lesson's expectation; without
    an expectation to check it against, it is marked as the lesson's order; else it is dropped.
    """
    waited = {e.index for e in events if isinstance(e, ev.Waiting)}
    return [_honest(scenario, e, waited) for e in events]


def _honest(scenario: Scenario, event, waited: set[int]):
    if not isinstance(event, (ev.Completed, ev.Waiting)) or not event.comment:
        return event
    step = scenario.steps[event.index]
    if not isinstance(step, Statement) or step.comment != event.comment:
        return event  # a fault put in the step's place (explore's rollback) carries its own comment
    if step.expect is None:
        return dataclasses.replace(event, comment=LESSON_ORDER + event.comment)
    if isinstance(event, ev.Waiting):
        return event if step.expect.waits else dataclasses.replace(event, comment=None)
    outcome = Outcome(event.result, event.index in waited)
    return event if met(step.expect, outcome) else dataclasses.replace(event, comment=None)
