"""What the commands do, as library calls: no terminal, no exit codes, no CLI imports."""

from __future__ import annotations

import datetime
import os
from collections.abc import Callable
from contextlib import closing, contextmanager
from dataclasses import dataclass

from .errors import RecordError, ScenarioError, StuckError, StuckRun
from .scenario.loader import load_scenario, scenario_from_text
from .scenario.model import Scenario


@dataclass
class RunReport:
    events: list
    mismatches: list
    checked: int
    ran_on: datetime.date  # the day the run started: the date a page says it was verified


def load(name: str) -> Scenario:
    from .scenario.lessons import resolve

    return load_scenario(resolve(name))


@contextmanager
def server(dsn: str | None, allow_shared_user: bool = False):
    """The server to run on, after sweeping what runs killed earlier left there and here."""
    from dataclasses import replace

    from .engine.leftovers import sweep_dirs, sweep_server
    from .engine.server import open_server

    sweep_dirs()
    with open_server(dsn) as info:
        if not info.embedded:
            with closing(info.params.connect(database=None)) as conn:
                sweep_server(conn)
        yield replace(info, shared_user=allow_shared_user)


@dataclass
class Cleanup:
    found: list
    problems: list[str]


def cleanup(dsn: str | None, dry_run: bool, cache: bool) -> Cleanup:
    """List, and unless `dry_run` remove, what killed runs left on the server and this machine."""
    from .engine.leftovers import sweep_cache, sweep_dirs, sweep_server
    from .engine.server import DSN_ENV, cache_root, parse_dsn

    sweeps = [sweep_dirs(dry_run)]
    dsn = dsn or os.environ.get(DSN_ENV) or None
    if dsn is not None:
        with closing(parse_dsn(dsn).connect(database=None)) as conn:
            sweeps.append(sweep_server(conn, dry_run))
    if cache:
        sweeps.append(sweep_cache(cache_root(), dry_run))
    return Cleanup([f for s in sweeps for f in s.found], [p for s in sweeps for p in s.problems])


def run(
    scenario: Scenario, server, step_timeout: float, on_event: Callable | None = None, show_locks: bool = False,
    settings: tuple[str, ...] = (),
) -> RunReport:
    from .run.driver import Run, RunOptions
    from .run.verify import check

    events = []
    ran_on = datetime.date.today()
    # Closed here, not when garbage collected: an exception from on_event (a viewer quitting,
    # Ctrl-C) must roll back and drop the scratch database while the server is still up.
    try:
        options = RunOptions(step_timeout=step_timeout, show_locks=show_locks, session_settings=settings)
        with closing(Run(scenario, server, options).events()) as stream:
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
    from .run import events as ev
    from .run.verify import check, failed_unexpectedly

    started = [e.index for e in events if isinstance(e, ev.StepStarting)]
    message = str(stuck)
    failed = failed_unexpectedly(scenario, events)
    if failed:
        message += "; before that, " + "; ".join(failed)
    return StuckRun(message, check(scenario, events, started[-1] if started else 0))


def verified_line(server, on: datetime.date | None = None) -> str:
    return f"{server.label} on {(on or datetime.date.today()).isoformat()}"


def record(scenario: Scenario, server, step_timeout: float) -> int:
    """Rewrite the scenario file with observed results; returns how many statements.

    The new text must load and its expectations must hold for the run just made, or the
    file is left as it was.
    """
    from .run.record import rewrite
    from .safe_write import check_writable, write_file
    from .run.verify import check, outcomes

    check_writable(scenario.path)
    report = run(scenario, server, step_timeout)
    seen = outcomes(report.events)
    text = rewrite(scenario, seen, verified_line(server, report.ran_on))
    try:
        mismatches = check(scenario_from_text(scenario.path, text), report.events)
    except ScenarioError as e:
        raise RecordError(f"{e}: the recorded text would not load; {scenario.path} left unchanged") from None
    if mismatches:
        raise RecordError(
            f"{scenario.path}: the recorded expectations would not hold ({mismatches[0]}); file left unchanged"
        )
    write_file(scenario.path, text)
    return len(seen)


def lesson_name(scenario: Scenario) -> str:
    """How a reader names this lesson to `run`: the shipped lesson's name, else its path."""
    from pathlib import Path

    from .scenario.lessons import lesson_dirs

    path = Path(scenario.path).resolve()
    if any(path.parent == folder.resolve() for folder in lesson_dirs()):
        return path.stem
    return scenario.path


def lesson_page(scenario: Scenario, server, step_timeout: float, fmt: str, show_locks: bool = False) -> str:
    """Run and verify the scenario, then render its lesson page; a page is only ever made
    from a run that met every expectation."""
    from .errors import ExpectationsNotMet
    from .render.export import LessonFacts, render_page

    report = run(scenario, server, step_timeout, show_locks=show_locks)
    if report.mismatches:
        raise ExpectationsNotMet(
            f"{scenario.path}: {len(report.mismatches)} expectation(s) not met on {server.label}; no page written",
            report.mismatches,
        )
    facts = LessonFacts(scenario, tuple(report.events), verified_line(server, report.ran_on), lesson_name(scenario))
    return render_page(facts, fmt)
