"""What the commands do, as library calls: no terminal, no exit codes, no CLI imports."""

from __future__ import annotations

import datetime
import os
from collections.abc import Callable
from contextlib import closing, contextmanager
from dataclasses import dataclass

from .errors import StuckError, StuckRun, UsageError
from .loader import load_scenario
from .scenario import Scenario


@dataclass
class RunReport:
    events: list
    mismatches: list
    checked: int
    ran_on: datetime.date  # the day the run started: the date a page says it was verified


def load(name: str) -> Scenario:
    from .lessons import resolve

    return load_scenario(resolve(name))


@contextmanager
def server(dsn: str | None):
    from .server import open_server

    with open_server(dsn) as info:
        yield info


def run(scenario: Scenario, server, step_timeout: float, on_event: Callable | None = None) -> RunReport:
    from .runner import Run, RunOptions
    from .verify import check

    events = []
    ran_on = datetime.date.today()
    # Closed here, not when garbage collected: an exception from on_event (a viewer quitting,
    # Ctrl-C) must roll back and drop the scratch database while the server is still up.
    try:
        with closing(Run(scenario, server, RunOptions(step_timeout=step_timeout)).events()) as stream:
            for event in stream:
                events.append(event)
                if on_event is not None:
                    on_event(event)
    except StuckError as e:
        raise _stuck_after(scenario, events, e) from None
    checked = sum(1 for _, s in scenario.statements() if s.expect is not None)
    return RunReport(events, check(scenario, events), checked, ran_on)


def _stuck_after(scenario: Scenario, events: list, stuck: StuckError) -> StuckRun:
    """The stuck message with the differences before it, and the failed statements named:
    a typo that left a lock unreleased is where the mistake was made, not the wait."""
    from . import events as ev
    from .verify import check, failed_unexpectedly

    started = [e.index for e in events if isinstance(e, ev.StepStarting)]
    message = str(stuck)
    failed = failed_unexpectedly(scenario, events)
    if failed:
        message += "; before that, " + "; ".join(failed)
    return StuckRun(message, check(scenario, events, started[-1] if started else 0))


def verified_line(server, on: datetime.date | None = None) -> str:
    return f"{server.label} on {(on or datetime.date.today()).isoformat()}"


def record(scenario: Scenario, server, step_timeout: float) -> int:
    """Rewrite the scenario file with observed results; returns how many statements."""
    from .record import rewrite
    from .verify import outcomes

    report = run(scenario, server, step_timeout)
    seen = outcomes(report.events)
    text = rewrite(scenario, seen, verified_line(server, report.ran_on))
    if not os.access(scenario.path, os.W_OK):
        raise UsageError(f"{scenario.path}: not writable")
    tmp = scenario.path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, scenario.path)
    return len(seen)


def lesson_name(scenario: Scenario) -> str:
    """How a reader names this lesson to `run`: the shipped lesson's name, else its path."""
    from pathlib import Path

    from .lessons import lesson_dirs

    path = Path(scenario.path).resolve()
    if any(path.parent == folder.resolve() for folder in lesson_dirs()):
        return path.stem
    return scenario.path


def lesson_page(scenario: Scenario, server, step_timeout: float, fmt: str) -> str:
    """Run and verify the scenario, then render its lesson page; a page is only ever made
    from a run that met every expectation."""
    from .errors import ExpectationsNotMet
    from .render.export import LessonFacts, render_page

    report = run(scenario, server, step_timeout)
    if report.mismatches:
        raise ExpectationsNotMet(
            f"{scenario.path}: {len(report.mismatches)} expectation(s) not met on {server.label}; no page written",
            report.mismatches,
        )
    facts = LessonFacts(scenario, tuple(report.events), verified_line(server, report.ran_on), lesson_name(scenario))
    return render_page(facts, fmt)


def write_file(path: str, text: str) -> None:
    """Write `text` whole or not at all: a reader never sees half a page."""
    tmp = f"{path}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise UsageError(f"{path}: cannot write: {e.strerror}") from None


def check_writable(path: str) -> None:
    """Fail before a run, not after it, when the page could not be written."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise UsageError(f"{path}: is a directory")
    if not os.path.isdir(folder):
        raise UsageError(f"{path}: no such directory {folder}")
    if not os.access(folder, os.W_OK):
        raise UsageError(f"{path}: cannot write to {folder}")
