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

Permutations run on up to `--jobs` runners at once, each with its own scratch database and
connections, as explore runs a scenario's schedules; each is told in the spec's order, so
the report and `--show-all` are the same whatever ran where. A spec whose SQL reaches what
the databases share (roles, other sessions' locks and activity, prepared transactions,
slots, timeouts a busier machine could cross) runs on one (ONE_RUNNER), as does a spec's
MySQL variant.
"""

from __future__ import annotations

import queue
import random
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass, field

from ..errors import UsageError
from ..run import events as ev
from ..run.driver import RunOptions
from ..run.spec_run import RunnerStopped, SpecRun, Trial, spec_sql, spec_trials
from ..scenario.fault_kinds import EXPLORE_FAULTS
from ..scenario.model import Scenario
from .search import Helpers, Ready, handed_back

OK, VIOLATED, STUCK = "ok", "invariant violated", "stuck"
OUTCOMES = (OK, VIOLATED, STUCK)
# What one scratch database does not keep from another run's: roles and the rights of the
# role the runners share, the server-wide views of locks and sessions (and the sessions
# themselves), prepared transactions, replication slots, tablespaces, VACUUM's horizon, the
# server's own settings; and timeouts, whose race a busier machine could tip.
ONE_RUNNER = re.compile(
    r"\b(role|user|authorization|grant|revoke|pg_locks|pg_stat\w*|pg_blocking_pids|pg_safe_snapshot_blocking_pids"
    r"|pg_terminate_backend|pg_cancel_backend|application_name|prepared?|slot\w*|tablespace|subscription"
    r"|vacuum|checkpoint|system|\w*timeout)\b",
    re.IGNORECASE,
)


@dataclass(eq=False)
class Permutation:
    """One permutation as explore ran it: its events, the invariants' answers, and whether it
    could not complete (why)."""

    trial: Trial
    place: int = 0  # among the permutations run, in the spec's order
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
    runners: int = 1  # how many ran permutations at once, each on a scratch database of its own

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
    seed, step_timeout, jobs); each one, once run, goes to `on_permutation` and into the
    report, in the spec's order."""
    every = trials(scenario, options.faults)
    picked = chosen(every, options.max_schedules, options.sample, options.seed)
    report = SpecReport(scenario.title, options.faults, tuple(i.name for i in scenario.invariants), len(every))
    if options.sample is not None and len(picked) < len(every):
        report.seed = options.seed
    started = time.perf_counter()
    jobs = options.jobs if _apart(scenario.spec) else 1
    runners = Runners(scenario, server, options, picked)
    for done in runners.in_order(jobs):
        _told(report, done, on_permutation)
    report.runners = runners.started
    report.elapsed_s = time.perf_counter() - started
    return report


def _apart(spec) -> bool:
    """Whether the spec's permutations may run in separate scratch databases at once: on
    PostgreSQL, unless its SQL reaches what they share (ONE_RUNNER). Its MySQL variant runs on
    one: named locks (GET_LOCK) and metadata locks' views there span every database."""
    return spec.isolationtester and ONE_RUNNER.search(spec_sql(spec)) is None


@dataclass(frozen=True)
class Failed:
    """A runner's error, to be raised once the permutations before `before` are told."""

    before: int
    error: BaseException


class Runners:
    """The permutations run on runners of their own (threads, each a SpecRun on its own
    scratch database): one at once, more once the permutations left outweigh opening one
    (search.Helpers); each permutation handed back in the order `picked` has them."""

    def __init__(self, scenario: Scenario, server, options, picked: list[Trial]):
        self.scenario = scenario
        self.server = server
        self.options = options
        self.picked = picked
        self.lock = threading.Lock()
        self.next = 0  # the next permutation a runner takes
        self.closing = False  # no runner takes another (a runner failed: the others end theirs)
        self.stop = threading.Event()  # nor goes on: a waiting step ends its run
        self.results: queue.Queue = queue.Queue()
        self.threads: list[threading.Thread] = []

    @property
    def started(self) -> int:
        return len(self.threads)

    def in_order(self, jobs: int) -> Iterator[Permutation]:
        self._start()
        helpers = Helpers(jobs - 1, len(self.picked))
        ran: dict[int, Permutation] = {}
        failed: dict[int, BaseException] = {}  # raised where one runner would have raised it
        told = finished = 0
        try:
            while finished < len(self.threads):
                item = handed_back(self.results)
                if item is None:
                    finished += 1
                elif isinstance(item, Ready):
                    helpers.ready(item.opened_s)
                elif isinstance(item, Failed):
                    failed[max(item.before, told)] = item.error
                elif item:
                    ran[item[0]] = item[1]
                while told in ran and told not in failed:
                    yield ran.pop(told)
                    told += 1
                if told in failed:
                    raise failed[told]
                for _ in range(helpers.wanted(told + len(ran))):
                    self._start()
            if failed:
                raise failed[min(failed)]  # after the last permutation (a database not dropped)
        finally:
            self._stop()
            for thread in self.threads:
                thread.join()

    def _start(self) -> None:
        thread = threading.Thread(target=self._run, daemon=True)
        self.threads.append(thread)
        thread.start()

    def _stop(self) -> None:
        self.stop.set()

    def _take(self, place: list[int]) -> Iterator[Trial]:
        """The permutations one runner runs, each taken as it is about to start; `place[0]`
        is where the one it runs stands among them all."""
        while True:
            with self.lock:
                if self.closing or self.stop.is_set() or self.next >= len(self.picked):
                    return
                place[0], self.next = self.next, self.next + 1
            yield self.picked[place[0]]

    def _run(self) -> None:
        place = [-1]
        current: Permutation | None = None
        try:
            opening = time.perf_counter()
            run = SpecRun(self.scenario, self.server, RunOptions(step_timeout=self.options.step_timeout), trials=self._take(place),
                          stop=self.stop)
            with closing(run.events()) as stream:
                for event in stream:
                    if isinstance(event, ev.RunStarted):
                        self.results.put(Ready(time.perf_counter() - opening))
                    current = self._event(event, current, place[0])
        except RunnerStopped:
            pass  # told to stop: what it ran is handed back already, the rest is not wanted
        except BaseException as e:
            with self.lock:
                self.closing = True
            # In the place of the permutation it broke off; else after the last one it ran.
            self.results.put(Failed(place[0] if current is not None else place[0] + 1, e))
        finally:
            self.results.put(None)

    def _event(self, event, current: Permutation | None, place: int) -> Permutation | None:
        """The permutation in progress after `event`; a finished one is handed back."""
        if isinstance(event, ev.PermutationStarting | ev.RunFinished):
            if current is not None:
                self.results.put((current.place, current))
            if isinstance(event, ev.RunFinished):
                return None
            current = Permutation(self.picked[place], place=place)
        if current is not None:
            current.events.append(event)
            if isinstance(event, ev.Checked):
                current.checks = event.results
            elif isinstance(event, ev.PermutationStuck):
                current.stuck = event.message
        return current


def _told(report: SpecReport, done: Permutation, on_permutation: Callable | None) -> None:
    report.explored += 1
    report.outcomes[done.outcome] += 1
    report.deadlocks += bool(done.deadlocks)
    for finding in done.findings():
        report.findings.setdefault(finding, done)
    if on_permutation is not None:
        on_permutation(done)
