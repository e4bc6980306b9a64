"""Every interleaving of a scenario's sessions, each checked against its invariants.

A schedule is an order in which the sessions take their steps, each session keeping its own
order: the space isolationtester enumerates when it is given no permutation. With faults, a
schedule may also have one session give up (roll back or disconnect) instead of taking its
next step, at any point.

Which steps can go next is only known while running (a statement waiting on a lock holds its
session back), so the space is walked the way stateless model checkers walk it: run a
schedule to the end taking the first step that can go, note every other choice met on the
way as a prefix still to run, and later replay each prefix from a freshly reset database.
Every schedule is run exactly once, and prefixes can be handed to several runner threads.
"""

from __future__ import annotations

import queue
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import lru_cache

from ..engine.types import Result
from ..errors import StuckError, UsageError
from ..run import events as ev
from ..run.driver import Driver, RunOptions
from ..scenario.fault_kinds import BY_NAME, EXPLORE_FAULTS
from ..scenario.model import Fault, Invariant, Scenario, Statement, is_wait
from . import tool_record

OK, VIOLATED, DEADLOCK, ERROR, STUCK, DIVERGED = "ok", "violated", "deadlock", "error", "stuck", "diverged"
# An error the statement's `expect:` names: what the lesson says happens, told but no failure.
EXPECTED = "expected"
# A schedule's outcome is its worst finding, in this order: those that fail the verdict first.
SEVERITY = (STUCK, DIVERGED, VIOLATED, ERROR, DEADLOCK, EXPECTED)
# A 1213 on a Galera node that was no deadlock, as a finding says it (run/events.py's
# Completed.rollback); counted with the deadlocks, the class of the error they share.
ROLLED_BACK = {
    "certification failure": "failed certification",
    "brute-force abort": "aborted by a write set replicated from another node (brute-force abort)",
}
OUTCOMES = (OK, VIOLATED, DEADLOCK, ERROR, EXPECTED, STUCK, DIVERGED)
# What makes an exploration fail (exit 1).
FAILING = (ERROR, VIOLATED, STUCK)
# How long a wait must last to hold a session back (see RunOptions.confirm_s).
CONFIRM_WAIT_S = 0.005
# How often a prefix that met other open moves on replay is run again before it counts.
REPLAYS = 3
# How long a schedule that looks stuck is given before it is looked at again.
LOOK_AGAIN_S = 0.05
# Above this many schedules, running them all must be asked for with --max-schedules.
UNASKED_LIMIT = 100_000
# Random walks repeat schedules; give up after this many walks per schedule wanted.
WALKS_PER_SAMPLE = 20


@dataclass(frozen=True)
class ExploreOptions:
    faults: tuple[str, ...] = ()
    max_schedules: int | None = None
    sample: int | None = None
    seed: int = 0
    jobs: int = 1
    step_timeout: float = 10.0
    recreate: bool = False  # rebuild the database from setup for every schedule, whatever the steps
    settings: tuple[str, ...] = ()  # --matrix: SET SESSION assignments for every session


@dataclass(frozen=True)
class Move:
    """A session's step at `position` in its own order, or a fault injected instead of it."""

    rank: int  # the session's place in the scenario: moves are tried in this order
    session: str
    position: int
    fault: str = ""

    def __str__(self) -> str:
        return f"{self.session}{self.position + 1}" + (f"!{self.fault}" if self.fault else "")

    @property
    def key(self) -> tuple:
        return (self.fault != "", self.rank, EXPLORE_FAULTS.index(self.fault) if self.fault else -1)


@dataclass(frozen=True)
class InvariantCheck:
    invariant: Invariant
    got: Result

    @property
    def held(self) -> bool:
        return self.got.error is None and self.got.rows == self.invariant.expect


@dataclass(frozen=True)
class Execution:
    """One schedule as run: the moves taken, what happened, and the invariants at the end."""

    moves: tuple[Move, ...]
    events: tuple
    checks: tuple[InvariantCheck, ...] = ()
    stuck: str | None = None
    diverged: str | None = None
    index: int = 0  # the walk that produced it, when sampling
    lines: dict[int, int] = field(default_factory=dict, repr=False, compare=False)
    expected: dict = field(default_factory=dict, repr=False, compare=False)  # step index -> ErrorMatch

    def findings(self) -> list[tuple[str, str]]:
        """What went wrong, each as (kind, what), so equal problems group across schedules."""
        if self.diverged:
            return [(DIVERGED, self.diverged)]
        if self.stuck:
            return [(STUCK, self._stuck_key())]
        out = [(VIOLATED, c.invariant.name) for c in self.checks if not c.held]
        faults = {e.session: e for e in self.events if isinstance(e, ev.FaultApplied) and BY_NAME[e.action].ends}
        for event in self.events:
            if isinstance(event, ev.Completed) and event.result.error is not None:
                out.append(self._error_finding(event, faults.get(event.session)))
        return list(dict.fromkeys(out))

    def _error_finding(self, event: ev.Completed, fault: ev.FaultApplied | None) -> tuple[str, str]:
        """A deadlock; an error the statement's expect: names, or that a fault step done to
        its session causes (a killed session's statement loses its connection); else an
        error nobody expected."""
        error = event.result.error
        where = f"{event.session} at line {self.lines.get(event.index, '?')}"
        expected = self.expected.get(event.index)
        if error.error_class == "deadlock":
            return DEADLOCK, f"{where} {ROLLED_BACK.get(event.rollback, 'chosen as the victim')}"
        if expected is not None and expected.matches(error):
            return EXPECTED, f"ERROR {error.code} for {where}, as its expect: says ({expected.spelling})"
        if fault is not None and error.error_class in BY_NAME[fault.action].ends:
            return EXPECTED, f"ERROR {error.code} for {where}, by the {fault.action} at line {self.lines.get(fault.index, '?')}"
        return ERROR, f"ERROR {error.code} for {where}"

    def _stuck_key(self) -> str:
        """Who waits where: the same whether or not the lock holders were named."""
        pending: dict[str, int] = {}
        for event in self.events:
            if isinstance(event, ev.Waiting):
                pending[event.session] = event.index
            elif isinstance(event, (ev.Completed, ev.FaultApplied)):
                pending.pop(event.session, None)
        if not pending:
            return "a statement ran past the step timeout"
        return ", ".join(f"{s} waits at line {self.lines.get(i, '?')}" for s, i in sorted(pending.items()))

    @property
    def outcome(self) -> str:
        kinds = {kind for kind, _ in self.findings()}
        return next((k for k in SEVERITY if k in kinds), OK)

    def tally(self) -> Tally:
        return Tally(self.moves, self.index, self.outcome, tuple(self.findings()))


@dataclass(frozen=True)
class Tally:
    """What is kept of each schedule run: enough to count it and to replay it."""

    moves: tuple[Move, ...]
    index: int
    outcome: str
    findings: tuple[tuple[str, str], ...]

    @property
    def order(self) -> tuple:
        """Shorter first, then in the order a depth-first walk meets them."""
        return (len(self.moves), [m.key for m in self.moves])


class Cursor:
    """Where each session is in its own steps, during one schedule."""

    def __init__(self, names: tuple[str, ...]):
        self.positions = dict.fromkeys(names, 0)
        self.ended: set[str] = set()
        self.faulted = False

    def take(self, move: Move) -> None:
        if move.fault:
            self.ended.add(move.session)
            self.faulted = True
        else:
            self.positions[move.session] = move.position + 1  # past the `wait:` steps it skipped


class Space:
    """The scenario as each session's own sequence of steps; which moves are open when.

    A `wait: B` step lets B's statement end on its own. Explore never sends B a step while
    B's statement is in flight, so where B's statement has ended the wait is passed over,
    no move and no time. Where it has not, waiting is a move only when it ends soon: B's
    session sets a lock wait timeout shorter than the step timeout, or no other move can go
    (`forced_wait`); else a schedule would spend the step timeout on a wait that only a
    later step of another session ends, and be called stuck though it is not.
    """

    def __init__(self, scenario: Scenario, faults: tuple[str, ...], step_timeout: float = 10.0):
        self.scenario = scenario
        self.faults = faults
        self.names = scenario.session_names
        self.tracks = {
            name: tuple(
                (i, s) for i, s in enumerate(scenario.steps) if isinstance(s, (Statement, Fault)) and s.session == name
            )
            for name in self.names
        }
        self.times_out = {s.name for s in scenario.sessions if _own_timeout(s) < step_timeout}
        self.lines = {i: s.line for i, s in enumerate(scenario.steps)}
        self.expected = {i: s.expect.error for i, s in scenario.statements() if s.expect and s.expect.error}
        self._moves: dict[tuple, Move] = {}

    def _move(self, *fields) -> Move:
        """One object per distinct move: a long exploration keeps every schedule's moves."""
        return self._moves.setdefault(fields, Move(*fields))

    def bound(self) -> int:
        """How many schedules there are when nothing waits: waits only remove some."""
        lengths = tuple(sum(not is_wait(s) and not _glued(s) for _, s in self.tracks[n]) for n in self.names)
        per_point = len(self.faults)

        @lru_cache(maxsize=None)
        def count(remaining: tuple[int, ...], faulted: bool) -> int:
            if not any(remaining):
                return 1
            total = 0
            for k, left in enumerate(remaining):
                if left:
                    total += count(remaining[:k] + (left - 1,) + remaining[k + 1 :], faulted)
                    if not faulted:
                        total += per_point * count(remaining[:k] + (0,) + remaining[k + 1 :], True)
            return total

        return count(lengths, per_point == 0)

    def _next(self, name: str, position: int, waiting: bool) -> int:
        """The session's next step: past the `wait:` steps, unless its statement is in flight."""
        track = self.tracks[name]
        while not waiting and position < len(track) and is_wait(track[position][1]):
            position += 1
        return position

    def enabled(self, cursor: Cursor, blocked: frozenset[str]) -> list[Move]:
        steps, faults = [], []
        for rank, name in enumerate(self.names):
            waiting = name in blocked
            position = self._next(name, cursor.positions[name], waiting)
            if name in cursor.ended or position >= len(self.tracks[name]):
                continue
            step = self.tracks[name][position][1]
            if _glued(step):  # taken by the walk once the step before it has answered
                continue
            if is_wait(step):
                go = name in self.times_out
            else:
                # A fault step done from outside the session can go while its statement waits.
                go = not waiting or (isinstance(step, Fault) and BY_NAME[step.action].outside)
            if go:
                steps.append(self._move(rank, name, position))
            if not cursor.faulted:
                # A waiting session cannot send ROLLBACK, but its process can still die.
                faults += [self._move(rank, name, position, f) for f in self.faults if not waiting or BY_NAME[f].outside]
        return steps + faults

    def forced_wait(self, cursor: Cursor, blocked: frozenset[str]) -> Move | None:
        """Where no move can go: the `wait:` step of a session whose statement is in flight,
        which then ends on its own or within the step timeout proves the schedule stuck."""
        for rank, name in enumerate(self.names):
            position = cursor.positions[name]
            track = self.tracks[name]
            if name in blocked and name not in cursor.ended and position < len(track) and is_wait(track[position][1]):
                return self._move(rank, name, position)
        return None

    def glued_next(self, cursor: Cursor, blocked: frozenset[str]) -> Move | None:
        """A step the tool glued to the one before it, now due: its session's previous step has
        answered. Never a move of its own, so a replay that sees a wait end sooner or later
        takes the same moves."""
        for rank, name in enumerate(self.names):
            position = cursor.positions[name]
            track = self.tracks[name]
            if name not in blocked and name not in cursor.ended and position < len(track) and _glued(track[position][1]):
                return self._move(rank, name, position)
        return None

    def step_for(self, move: Move) -> tuple[int, Statement | Fault]:
        index, step = self.tracks[move.session][move.position]
        if not move.fault:
            return index, step
        kind = BY_NAME[move.fault]
        if kind.written:
            return index, Fault(kind.name, move.session, step.line)
        return index, Statement(move.session, kind.sql, step.line, comment=kind.told)


# -- choosing the next move ---------------------------------------------------------------


def _glued(step) -> bool:
    return isinstance(step, Statement) and step.glued


def _own_timeout(spec) -> float:
    """The shortest lock wait timeout the session sets itself (seconds); inf when none."""
    set_ = [t for t in (spec.innodb_lock_wait_timeout, spec.lock_wait_timeout) if t is not None]
    return min(set_, default=float("inf"))


class Diverged(Exception):
    """A replayed prefix met a different set of open moves than when it was noted."""


class FirstChoice:
    """Replays a prefix, then takes the first open move, noting the others as new prefixes."""

    def __init__(self, prefix: tuple[Move, ...]):
        self.prefix = prefix
        self.branches: list[tuple[Move, ...]] = []
        self.index = 0

    def choose(self, taken: list[Move], enabled: list[Move]) -> Move:
        depth = len(taken)
        if depth < len(self.prefix):
            move = self.prefix[depth]
            if move not in enabled:
                raise Diverged(f"{move} could not go after {' '.join(map(str, taken)) or 'the start'}")
            return move
        self.branches += [tuple(taken) + (m,) for m in enabled[1:]]
        return enabled[0]


class RandomChoice:
    def __init__(self, seed: int, index: int):
        self.rng = random.Random(f"{seed}:{index}")
        self.index = index

    def choose(self, taken: list[Move], enabled: list[Move]) -> Move:
        return self.rng.choice(enabled)


class DepthFirst:
    """Prefixes still to run, shared by the runner threads; the newest is taken first."""

    def __init__(self, limit: int | None):
        self.stack: list[tuple[Move, ...]] = [()]
        self.limit = limit
        self.taken = 0
        self.running = 0
        self.stopped = False
        self.cond = threading.Condition()

    def take(self) -> FirstChoice | None:
        with self.cond:
            while not self.stack and self.running and not self.stopped:
                self.cond.wait()
            if self.stopped or not self.stack or (self.limit is not None and self.taken >= self.limit):
                return None
            self.taken += 1
            self.running += 1
            return FirstChoice(self.stack.pop())

    def done(self, chooser: FirstChoice, execution: Execution) -> None:
        with self.cond:
            self.stack += reversed(chooser.branches)
            self.running -= 1
            self.cond.notify_all()

    def stop(self) -> None:
        with self.cond:
            self.stopped = True
            self.cond.notify_all()

    @property
    def complete(self) -> bool:
        """Every schedule was run: nothing was left when the runner threads stopped."""
        return not self.stack


class Sampler:
    """Random walks (uniform at each choice), until enough distinct schedules were run."""

    def __init__(self, count: int, seed: int):
        self.count = count
        self.seed = seed
        self.walks = 0
        self.seen: set[tuple[Move, ...]] = set()
        self.stopped = False
        self.lock = threading.Lock()

    def take(self) -> RandomChoice | None:
        with self.lock:
            if self.stopped or len(self.seen) >= self.count or self.walks >= self.count * WALKS_PER_SAMPLE:
                return None
            self.walks += 1
            return RandomChoice(self.seed, self.walks - 1)

    def done(self, chooser: RandomChoice, execution: Execution) -> None:
        with self.lock:
            self.seen.add(execution.moves)

    def stop(self) -> None:
        with self.lock:
            self.stopped = True

    complete = False


# -- running schedules --------------------------------------------------------------------


class Snapshot:
    """Resets by restoring the tables' rows as setup left them (engine/mysql/snapshot.py,
    engine/postgresql/snapshot.py), unless nothing the schedule sent may have written them
    (the engine's `may_write`)."""

    def __init__(self, driver: Driver, tables: tuple[str, ...], invariants: tuple[Invariant, ...] = ()):
        snapshot = driver.snapshot(tables)
        self.restore = snapshot.restore
        self.how = snapshot.how  # e.g. "DELETE + INSERT ... SELECT", as the engine restores
        self.may_write = lru_cache(maxsize=None)(snapshot.may_write)
        # Invariants run between schedules, as the run's user: one that may write means every time.
        self.always = any(self.may_write(i.sql) for i in invariants)

    def __call__(self, sent: tuple[str, ...] | None = None) -> None:
        """After a schedule that sent the statements `sent`; None: whatever they were."""
        if sent is None or self.always or any(self.may_write(sql) for sql in sent):
            self.restore()


class Rebuild:
    """Drops the scratch database and runs the setup again: right whatever the steps did."""

    def __init__(self, driver: Driver, reason: str):
        self.driver = driver
        self.reason = reason

    def __call__(self, sent: tuple[str, ...] | None = None) -> None:
        self.driver.recreate_database()


def choose_reset(driver: Driver, forced: bool, invariants: tuple[Invariant, ...] = ()) -> Snapshot | Rebuild:
    """A snapshot when the rows are all the steps can change; else rebuild every time."""
    if forced:
        return Rebuild(driver, "asked for")
    survey = driver.survey()
    if survey.obstacle:
        return Rebuild(driver, survey.obstacle)
    return Snapshot(driver, survey.tables, invariants)


class ScheduleRunner:
    """One driver on its own scratch database, running schedule after schedule."""

    def __init__(self, space: Space, server, options: ExploreOptions, name_blockers: bool = False):
        self.space = space
        run_options = RunOptions(options.step_timeout, name_blockers, CONFIRM_WAIT_S, session_settings=options.settings)
        self.driver = Driver(space.scenario, server, run_options)
        self.recreate = options.recreate
        self.reset: Snapshot | Rebuild | None = None

    def __enter__(self) -> ScheduleRunner:
        try:
            self.driver.open()
            self.reset = choose_reset(self.driver, self.recreate, self.space.scenario.invariants)
        except BaseException:
            self.driver.close(quiet=True)
            raise
        return self

    def __exit__(self, exc_type, *exc_info) -> None:
        self.driver.close(quiet=exc_type is not None)

    def run(self, chooser) -> Execution:
        self.driver.start_clock()
        moves: list[Move] = []
        events: list = []
        stuck = diverged = None
        try:
            self._walk(chooser, moves, events)
            stuck = self._stuck()
        except StuckError as e:
            stuck = str(e)
        except Diverged as e:
            diverged = str(e)
        self.driver.restart_sessions()
        checks = () if stuck or diverged else self._check(any(m.fault for m in moves), events)
        self.reset(self._sent(moves))
        self.driver.conns.catch_up()
        space = self.space
        return Execution(tuple(moves), tuple(events), checks, stuck, diverged, chooser.index, space.lines, space.expected)

    def _walk(self, chooser, moves: list[Move], events: list) -> None:
        """Takes the chosen moves until none is open."""
        cursor = Cursor(self.space.names)
        looked_again = False
        while True:
            while glued := self.space.glued_next(cursor, self.driver.blocked()):
                cursor.take(glued)
                events += self.driver.step(*self.space.step_for(glued))
            enabled = self.space.enabled(cursor, self.driver.blocked())
            if enabled:
                move = chooser.choose(moves, enabled)
                if move is None:  # a prefix run (minimise.py) ends here
                    return
            elif self.driver.blocked() and not looked_again:
                # A waiter freed a moment ago can still show its wait (a metadata lock
                # waiter updates its own state when it wakes): look again before "stuck".
                time.sleep(LOOK_AGAIN_S)
                events += self.driver.settle()
                looked_again = True
                continue
            else:
                move = self.space.forced_wait(cursor, self.driver.blocked())
                if move is None:
                    return
            looked_again = False
            # Taken before it runs: a step that ends the schedule stuck is part of its
            # schedule, so running the schedule again runs it too.
            cursor.take(move)
            moves.append(move)
            events += self.driver.step(*self.space.step_for(move))

    def _sent(self, moves: list[Move]) -> tuple[str, ...]:
        """The SQL of the statements the schedule sent, a rollback fault's too."""
        steps = (self.space.step_for(m)[1] for m in moves)
        return tuple(s.sql for s in steps if isinstance(s, Statement))

    def _stuck(self) -> str | None:
        return self.driver.stuck_message("every remaining step is blocked")

    def _check(self, faulted: bool, events: list) -> tuple[InvariantCheck, ...]:
        scenario = self.space.scenario
        wanted = [i for i in scenario.invariants if i.holds == "always" or not faulted]
        if not scenario.tool_record:
            return tuple(InvariantCheck(i, self.driver.check(i.sql)) for i in wanted)
        # The invariants read the tool's record: first, that it holds what the sessions committed.
        differs = tool_record.difference(events, self.driver.check, tool_record.writes_marks(scenario.steps))
        if differs:
            return (InvariantCheck(tool_record.INVARIANT, Result(columns=("difference",), rows=((differs,),))),)
        return tuple(InvariantCheck(i, self.driver.check(i.sql)) for i in wanted)


# -- the whole exploration ------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    kind: str
    what: str
    schedules: int  # how many schedules showed it
    shortest: Execution  # the schedule run again with lock holders named, for the transcript
    reproduced: bool  # the run again showed the same finding; if not, `shortest` is as first run
    left_out: int = 0  # moves at the end of the schedule found that change nothing (minimise.py)
    explanations: tuple = ()  # the anomalies its steps show (anomaly.py)


@dataclass(frozen=True)
class Report:
    scenario: Scenario
    server: str
    options: ExploreOptions
    bound: int
    explored: int
    complete: bool
    counts: dict[str, int]
    findings: tuple[Finding, ...]
    elapsed_s: float
    reset: str
    # The stop signal (a KeyboardInterrupt) that cut the exploration short: the counts are of
    # the schedules run before it, the findings not run again for their transcripts.
    stopped: BaseException | None = None

    @property
    def failed(self) -> bool:
        """An invariant violated, a schedule stuck, or an error no `expect:` names, in any schedule."""
        return any(f.kind in FAILING for f in self.findings)

    @property
    def per_second(self) -> float:
        return self.explored / self.elapsed_s if self.elapsed_s else 0.0


def planned(scenario: Scenario, options: ExploreOptions) -> int:
    """How many schedules an exploration will run at most; UsageError when it is not runnable."""
    unknown = [f for f in options.faults if f not in EXPLORE_FAULTS]
    if unknown:
        raise UsageError(f"unknown fault '{unknown[0]}' (use {', '.join(EXPLORE_FAULTS)})")
    bound = Space(scenario, options.faults).bound()
    options = _sampled_only_below(options, bound)
    if options.sample is not None:
        return options.sample
    if options.max_schedules is not None:
        return min(bound, options.max_schedules)
    if bound > UNASKED_LIMIT:
        raise UsageError(f"{scenario.path}: up to {bound:,} schedules; use --max-schedules N or --sample N")
    return bound


def explore(
    scenario: Scenario, server, options: ExploreOptions, on_schedule: Callable[[Execution], None] | None = None
) -> Report:
    total = planned(scenario, options)
    space = Space(scenario, options.faults, options.step_timeout)
    bound = space.bound()
    options = _sampled_only_below(options, bound)
    source = Sampler(options.sample, options.seed) if options.sample else DepthFirst(options.max_schedules)
    started = time.perf_counter()
    if options.sample and on_schedule is not None:
        on_schedule = _each_new(on_schedule, options.sample)
    first_runs = FirstRuns(on_schedule)
    tallies, reset, stopped = _run_all(space, server, options, source, first_runs, total)
    elapsed = time.perf_counter() - started
    if options.sample:
        tallies = _first_distinct(tallies, options.sample)
    counts = dict.fromkeys(OUTCOMES, 0)
    for tally in tallies:
        counts[tally.outcome] += 1
    findings = ()
    if stopped is None:
        try:
            findings = _replayed(space, server, options, tallies, first_runs.kept)
        except KeyboardInterrupt as stop:
            stopped = stop
    if stopped is not None:
        findings = _unreplayed(space, tallies)
    complete = source.complete and stopped is None
    return Report(scenario, server.label, options, bound, len(tallies), complete, counts, findings, elapsed, reset, stopped)


def _sampled_only_below(options: ExploreOptions, bound: int) -> ExploreOptions:
    """A sample as large as the space is the whole space, walked in order: random walks would
    keep drawing schedules already run until WALKS_PER_SAMPLE times the sample (46 s for
    --sample 1000 of 330 schedules, against 1.1 s for all of them)."""
    if options.sample is not None and options.sample >= bound:
        return replace(options, sample=None)
    return options


class FirstRuns:
    """The shortest schedule of each finding as first run: what a report shows when running
    it again does not show the finding (timing on a cluster)."""

    def __init__(self, then: Callable[[Execution], None] | None):
        self.then = then
        self.kept: dict[tuple[str, str], tuple[tuple, Execution]] = {}

    def __call__(self, execution: Execution) -> None:
        tally = execution.tally()
        for key in tally.findings:
            if key not in self.kept or tally.order < self.kept[key][0]:
                self.kept[key] = (tally.order, execution)
        if self.then is not None:
            self.then(execution)


def _each_new(then: Callable[[Execution], None], count: int) -> Callable[[Execution], None]:
    """`then` for each of the first `count` distinct schedules only: random walks repeat
    schedules, and the progress bar read 4000/200 where the report counts 110."""
    seen: set[tuple[Move, ...]] = set()

    def call(execution: Execution) -> None:
        if execution.moves not in seen and len(seen) < count:
            seen.add(execution.moves)
            then(execution)

    return call


def _first_distinct(tallies: list[Tally], count: int) -> list[Tally]:
    """Walks by index, repeats dropped: the same sample whatever order the runner threads finished in."""
    out: dict[tuple[Move, ...], Tally] = {}
    for tally in sorted(tallies, key=lambda t: t.index):
        out.setdefault(tally.moves, tally)
    return list(out.values())[:count]


def _run_all(
    space: Space, server, options: ExploreOptions, source, on_schedule, total: int
) -> tuple[list[Tally], str, BaseException | None]:
    """Runs schedules on up to `options.jobs` threads, each with its own ScheduleRunner; results
    are handled on the calling thread. A stop signal ends the runs, and is handed back with them.

    One runner starts at once, the others only once the schedules left would take the first
    one longer than twice its own opening took (Helpers): a runner's scratch database costs
    a CREATE DATABASE and a DROP DATABASE (a checkpoint, on PostgreSQL 15), 150-400 ms on
    a shared server, more than a small space's every schedule."""
    results: queue.Queue = queue.Queue()
    resets: list[str] = []
    threads: list[threading.Thread] = []

    def start() -> None:
        thread = threading.Thread(target=_run_schedules, args=(space, server, options, source, results, resets), daemon=True)
        threads.append(thread)
        thread.start()

    start()
    helpers = Helpers(options.jobs - 1, total)
    tallies: list[Tally] = []
    stopped = None
    try:
        finished = 0
        while finished < len(threads):
            item = handed_back(results)
            if item is None:
                finished += 1
            elif isinstance(item, Ready):
                helpers.ready(item.opened_s)
            elif isinstance(item, Execution):
                tallies.append(item.tally())
                if on_schedule is not None:
                    on_schedule(item)
            for _ in range(helpers.wanted(len(tallies))):
                start()
    except KeyboardInterrupt as stop:
        stopped = stop  # the schedules run so far still make a report
    finally:
        source.stop()
        for thread in threads:
            thread.join()
    return tallies, resets[0] if resets else "", stopped


def handed_back(results: queue.Queue):
    """What a runner thread handed back next (None: it has ended), or () after a quarter of a
    second, so that Ctrl-C reaches the calling thread; a runner's exception is raised here."""
    try:
        item = results.get(timeout=0.25)
    except queue.Empty:
        return ()
    if isinstance(item, BaseException):
        raise item
    return item


@dataclass(frozen=True)
class Ready:
    """A runner has opened its scratch database and connections, in `opened_s` seconds."""

    opened_s: float


class Helpers:
    """When the runners beyond the first are worth starting: once the first is ready, when
    the schedules left, at the pace of those it has run (or the time its first is taking),
    would take it more than twice as long as opening it took. Then a second runner, ready
    after about as long, still halves what is left; in a smaller space it would only add
    its opening and closing to the run."""

    def __init__(self, count: int, total: int):
        self.count = count
        self.total = total
        self.opened_s: float | None = None
        self.ready_at = 0.0

    def ready(self, opened_s: float) -> None:
        if self.opened_s is None:
            self.opened_s = opened_s
            self.ready_at = time.perf_counter()

    def wanted(self, done: int) -> int:
        if not self.count or self.opened_s is None:
            return 0
        running_s = time.perf_counter() - self.ready_at
        left_s = (self.total - done) * running_s / done if done else running_s
        if left_s <= 2 * self.opened_s:
            return 0
        count, self.count = self.count, 0
        return count


def _run_schedules(space: Space, server, options: ExploreOptions, source, results: queue.Queue, resets: list[str]) -> None:
    try:
        started = time.perf_counter()
        with ScheduleRunner(space, server, options) as runner:
            resets.append(_describe_reset(runner.reset))
            results.put(Ready(time.perf_counter() - started))
            while (chooser := source.take()) is not None:
                execution = runner.run(chooser)
                for _ in range(REPLAYS):
                    if not execution.diverged:
                        break
                    execution = runner.run(chooser)  # a momentary wait seen on the way: try again
                source.done(chooser, execution)
                results.put(execution)
    except BaseException as e:  # handed to the calling thread, which raises it
        source.stop()
        results.put(e)
    finally:
        results.put(None)


def _describe_reset(reset: Snapshot | Rebuild) -> str:
    if isinstance(reset, Rebuild):
        return f"database rebuilt from setup for every schedule ({reset.reason})"
    return f"tables restored from a snapshot ({reset.how})"


def _replayed(space: Space, server, options: ExploreOptions, tallies: list[Tally], first_runs: dict) -> tuple[Finding, ...]:
    """The shortest schedule of each distinct finding, run again with lock holders named; as
    first run where the run again did not show it."""
    shortest, seen = _distinct(tallies)
    if not shortest:
        return ()
    out = []
    with ScheduleRunner(space, server, options, name_blockers=True) as runner:
        for key in sorted(shortest, key=_severity(space)):
            moves = shortest[key].moves
            replay = runner.run(FirstChoice(moves))
            reproduced = key in replay.findings()
            first = first_runs.get(key, (None, None))[1]
            if not reproduced and first is not None and first.moves == moves:
                replay = first
            out.append(_explained(space, runner, Finding(key[0], key[1], seen[key], replay, reproduced)))
    return tuple(out)


def _severity(space: Space) -> Callable[[tuple[str, str]], tuple]:
    """The order findings are told in: the worst kind first, violations as the scenario lists its invariants."""
    # The tool's record altered (tool_record.py) is told before any invariant read from it.
    names = [tool_record.NAME] + [i.name for i in space.scenario.invariants]
    return lambda k: (SEVERITY.index(k[0]), names.index(k[1]) if k[0] == VIOLATED else 0, k[1])


def _distinct(tallies: list[Tally]) -> tuple[dict[tuple[str, str], Tally], dict[tuple[str, str], int]]:
    """Each distinct finding's shortest schedule, and how many schedules showed it."""
    shortest: dict[tuple[str, str], Tally] = {}
    seen: dict[tuple[str, str], int] = {}
    for tally in tallies:
        for key in tally.findings:
            seen[key] = seen.get(key, 0) + 1
            if key not in shortest or tally.order < shortest[key].order:
                shortest[key] = tally
    return shortest, seen


def _unreplayed(space: Space, tallies: list[Tally]) -> tuple[Finding, ...]:
    """Each distinct finding of the schedules run before a stop signal, with its shortest
    schedule's moves but no transcript: the server is not asked for anything more."""
    shortest, seen = _distinct(tallies)
    ordered = sorted(shortest, key=_severity(space))
    return tuple(Finding(k[0], k[1], seen[k], Execution(shortest[k].moves, ()), False) for k in ordered)


def _explained(space: Space, runner: ScheduleRunner, finding: Finding) -> Finding:
    """A violation with its schedule cut to the shortest prefix showing it, and named."""
    from dataclasses import replace

    from .anomaly import explain
    from .minimise import shortest_prefix

    if finding.kind != VIOLATED or not finding.reproduced:
        return finding
    shown = shortest_prefix(space, runner, finding.shortest)
    left_out = len(finding.shortest.moves) - len(shown.moves)
    named = tuple(explain(space.scenario, shown.moves, shown.events))
    return replace(finding, shortest=shown, left_out=left_out, explanations=named)
