"""What explore tells a reader so that other orders of a lesson do not teach something false.

A lesson's `comment` describes what happens in the lesson's own order; in another order it
may be untrue, so a transcript shows it only while the schedule is still that order. A
lesson that hard-codes job ids or checks no invariants was written for one order: exploring
it shows schedules it was never meant to survive.
"""

from __future__ import annotations

import dataclasses
import re

from ..run import events as ev
from ..scenario.model import Fault, Scenario, Statement, is_wait
from ..run.verify import Outcome, met

# `WHERE id = 1` or `id IN (1, 2)`: the statement acts on a job chosen when the lesson was
# written, not on the one its session claimed in this schedule.
HARD_CODED_ID = re.compile(r"\bid\s*(=|IN\s*\()\s*\d", re.IGNORECASE)


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

    A comment tells the lesson's story at its step, which holds only where everything before
    happened as in the lesson: the steps sent so far are the lesson's first steps in its own
    order, none replaced by a fault. There it stays if the step met its expectation (or has
    none); past the first step taken out of order it is dropped.
    """
    in_order = _in_lesson_order(scenario, events)
    waited = {e.index for e in events if isinstance(e, ev.Waiting)}
    return [_honest(scenario, e, waited, in_order) for e in events]


def _in_lesson_order(scenario: Scenario, events) -> set[int]:
    """The steps sent while the schedule was still the lesson's own order. A statement's
    first event (answer or wait) comes before the next step is sent, so first events are in
    sending order; a `wait:` step sends nothing and sees no event of its own."""
    order = [i for i, s in enumerate(scenario.steps) if isinstance(s, (Statement, Fault)) and not is_wait(s)]
    sent: list[int] = []
    for event in events:
        if isinstance(event, (ev.Completed, ev.Waiting, ev.FaultApplied)) and event.index not in sent:
            if len(sent) >= len(order) or event.index != order[len(sent)] or not _as_written(scenario, event):
                break
            sent.append(event.index)
    return set(sent)


def _as_written(scenario: Scenario, event) -> bool:
    """The event is of the step the lesson wrote there, not of a fault explore put in its place."""
    step = scenario.steps[event.index]
    if isinstance(event, ev.FaultApplied):
        return isinstance(step, Fault) and step.action == event.action
    return isinstance(step, Statement) and step.comment == event.comment


def _honest(scenario: Scenario, event, waited: set[int], in_order: set[int]):
    if not isinstance(event, (ev.Completed, ev.Waiting)) or not event.comment:
        return event
    step = scenario.steps[event.index]
    if not isinstance(step, Statement) or step.comment != event.comment:
        return event  # a fault put in the step's place (explore's rollback) carries its own comment
    if event.index not in in_order:
        return dataclasses.replace(event, comment=None)
    if step.expect is None:
        return event
    if isinstance(event, ev.Waiting):
        return event if step.expect.waits else dataclasses.replace(event, comment=None)
    outcome = Outcome(event.result, event.index in waited)
    return event if met(step.expect, outcome) else dataclasses.replace(event, comment=None)
