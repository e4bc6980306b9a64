"""What the commands do, as library calls: no terminal, no exit codes, no CLI imports."""

from __future__ import annotations

import datetime
import os
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

from .errors import UsageError
from .loader import load_scenario
from .scenario import Scenario


@dataclass
class RunReport:
    events: list
    mismatches: list
    checked: int


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
    for event in Run(scenario, server, RunOptions(step_timeout=step_timeout)).events():
        events.append(event)
        if on_event is not None:
            on_event(event)
    checked = sum(1 for _, s in scenario.statements() if s.expect is not None)
    return RunReport(events, check(scenario, events), checked)


def verified_line(server) -> str:
    return f"{server.label} on {datetime.date.today().isoformat()}"


def record(scenario: Scenario, server, step_timeout: float) -> int:
    """Rewrite the scenario file with observed results; returns how many statements."""
    from .record import rewrite
    from .verify import outcomes

    report = run(scenario, server, step_timeout)
    seen = outcomes(report.events)
    text = rewrite(scenario, seen, verified_line(server))
    if not os.access(scenario.path, os.W_OK):
        raise UsageError(f"{scenario.path}: not writable")
    tmp = scenario.path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, scenario.path)
    return len(seen)
