"""`explore FILE.spec`: an isolation spec's permutations, with faults and its invariants.

The permutations are the spec's (those written, or every interleaving of its steps in
isolationtester's order), each run by run/spec_run.py exactly as `run` runs it (the setup and
teardown blocks around it, a step of a busy session waiting for that session's earlier one),
so with no fault each one's output is isolationtester's. `--faults` adds, for every place of
every permutation, the permutation with that step's session giving up there: a fault kind of
scenario/fault_kinds.py done in the step's place, that session taking no step after it;
permutations a fault makes the same are run once. After each permutation's steps, every
`#@invariant` must return no row. A step's error is the spec's output, not a finding: what
explore reports is an invariant that failed and a permutation that could not complete.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass, field

from ..errors import UsageError
from ..run import events as ev
from ..run.driver import RunOptions
from ..run.spec_run import SpecRun, Trial, spec_trials
from ..scenario.fault_kinds import EXPLORE_FAULTS
from ..scenario.model import Scenario

OK, VIOLATED, STUCK = "ok", "invariant violated", "stuck"
OUTCOMES = (OK, VIOLATED, STUCK)


@dataclass(eq=False)
class Permutation:
    """One permutation as explore ran it: its events, the invariants' answers, and whether it
    could not complete (why)."""

    trial: Trial
    events: list = field(default_factory=list)
    checks: tuple = ()  # (Invariant, Result), the spec's `#@invariant`s after its steps
    stuck: str | None = None

    @property
    def violated(self) -> list[str]:
        return [inv.name for inv, got in self.checks if got.error is not None or got.rows]

    @property
    def outcome(self) -> str:
        return STUCK if self.stuck else VIOLATED if self.violated else OK

    @property
    def deadlocks(self) -> int:
        return sum(1 for e in self.events if isinstance(e, ev.Completed) and e.result.error is not None
                   and e.result.error.error_class == "deadlock")

    def findings(self) -> list[tuple[str, str]]:
        if self.stuck:
            return [(STUCK, self.stuck)]
        return [(VIOLATED, name) for name in self.violated]


@dataclass(eq=False)
class SpecReport:
    """What `explore FILE.spec` found: counts by outcome, and the first permutation of each finding."""

    title: str
    faults: tuple[str, ...]
    invariants: tuple[str, ...]
    planned: int  # the permutations there are, faults included
    explored: int = 0
    outcomes: Counter = field(default_factory=Counter)
    deadlocks: int = 0  # permutations where a step got 40P01 (the spec's output, not a finding)
    findings: dict = field(default_factory=dict)  # (kind, what) -> the first Permutation showing it
    elapsed_s: float = 0.0
    seed: int | None = None  # --sample's, when the permutations run were drawn at random

    @property
    def failed(self) -> bool:
        return bool(self.findings)


def trials(scenario: Scenario, faults: tuple[str, ...]) -> list[Trial]:
    """Every permutation of the spec, then each with a fault in place of each of its steps;
    UsageError for a fault explore does not know."""
    unknown = [f for f in faults if f not in EXPLORE_FAULTS]
    if unknown:
        raise UsageError(f"unknown fault '{unknown[0]}' (use {', '.join(EXPLORE_FAULTS)})")
    base = spec_trials(scenario.spec)
    found: list[Trial] = list(base)
    seen: set[tuple[str, ...]] = set()
    for trial in base:
        for at in range(len(trial.steps)):
            for kind in faults:
                faulted = Trial(trial.steps, trial.sessions, (at, kind))
                if faulted.names not in seen:  # the same steps run: the same permutation
                    seen.add(faulted.names)
                    found.append(faulted)
    return found


def chosen(every: list[Trial], limit: int | None, sample: int | None, seed: int) -> list[Trial]:
    """All of them, the first `limit`, or `sample` of them at random (in their order)."""
    if sample is not None and sample < len(every):
        picked = sorted(random.Random(seed).sample(range(len(every)), sample))
        return [every[i] for i in picked]
    return every[:limit] if limit is not None else every


def explore_spec(scenario: Scenario, server, options, on_permutation: Callable | None = None) -> SpecReport:
    """Run the permutations `options` asks for (ExploreOptions: faults, max_schedules, sample,
    seed, step_timeout); each one, once run, goes to `on_permutation` and into the report."""
    every = trials(scenario, options.faults)
    picked = chosen(every, options.max_schedules, options.sample, options.seed)
    report = SpecReport(scenario.title, options.faults, tuple(i.name for i in scenario.invariants), len(every))
    if options.sample is not None and len(picked) < len(every):
        report.seed = options.seed
    run = SpecRun(scenario, server, RunOptions(step_timeout=options.step_timeout), trials=picked)
    current: Permutation | None = None
    started = time.perf_counter()
    with closing(run.events()) as stream:
        for event in stream:
            if isinstance(event, ev.PermutationStarting) or isinstance(event, ev.RunFinished):
                if current is not None:
                    _told(report, current, on_permutation)
                current = Permutation(picked[report.explored]) if isinstance(event, ev.PermutationStarting) else None
            if current is None:
                continue
            current.events.append(event)
            if isinstance(event, ev.Checked):
                current.checks = event.results
            elif isinstance(event, ev.PermutationStuck):
                current.stuck = event.message
    report.elapsed_s = time.perf_counter() - started
    return report


def _told(report: SpecReport, done: Permutation, on_permutation: Callable | None) -> None:
    report.explored += 1
    report.outcomes[done.outcome] += 1
    report.deadlocks += bool(done.deadlocks)
    for finding in done.findings():
        report.findings.setdefault(finding, done)
    if on_permutation is not None:
        on_permutation(done)
