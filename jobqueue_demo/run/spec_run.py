"""Runs a PostgreSQL isolation spec the way PostgreSQL's isolationtester does, and yields events.

The order of everything a spec's output shows is isolationtester's (src/test/isolation/
isolationtester.c, PostgreSQL 14 and later), kept here step for step so that
render/isolationtester.py prints what it prints: each permutation runs the setup blocks on a
connection of its own, then each session's setup, then its steps; a step is sent and waited
for until it answers or is seen blocked (pg_isolation_test_session_is_blocked, which
isolationtester asks every 10 ms; we ask sooner where the answer cannot differ, _look), then
every step still waiting is looked at again, in the order they began waiting; a
step of a session whose earlier step still runs waits for that one first; at the end every
waiting step is waited for, then the sessions' teardowns and the teardown run. Blocker
annotations change only when a step is reported: `(*)` reports it waiting at once, `(s2a)`
holds its completion while s2a runs, `(s2a notices 1)` until s2a's session has sent a notice.

What runs where is the tool's own: the scratch database, the per-run role every block and
step runs as (the setup blocks on its connection for setups and invariants), the sessions'
connections (run/connections.py), as for a YAML scenario. The step timeout is isolationtester's
max_step_wait: a step still running after it is cancelled, and after twice it the run ends
(on another engine, for `compare`, the run ends after it).
"""

from __future__ import annotations

import os
import select
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import replace

from ..engine.types import ConnectionGone, Result
from ..errors import ServerError, SpecAbandoned, SpecSetupFailed, StuckError
from ..scenario.fault_kinds import BY_NAME
from ..scenario.model import Scenario
from . import events as ev
from .connections import Connections
from .driver import RunOptions

NONBLOCK = 1  # return as soon as the step is seen waiting for a lock
RETRY = 2  # a later look at a step already sent (reported waiting, or held by a blocker)
LOOK_EVERY_S = 0.01  # isolationtester asks whether a step is blocked every 10 ms
# A step just sent is first looked at sooner: isolationtester's first question (10 ms after
# sending, a prepared statement in C) comes before a 10 ms deadlock_timeout ends the wait it
# sees; ours, slower to ask, would lose that race under load and miss the `<waiting ...>`.
FIRST_LOOK_S = 0.002
INSUFFICIENT_PRIVILEGE = "42501"


class RunnerStopped(Exception):
    """Explore stopped this runner while one of its steps waited (SpecRun's `stop`)."""


class Trial:
    """One permutation as it is run: the spec's steps (with each one's session), and for explore
    at most one fault done in place of one of them (`fault`: its place and kind), after which
    that session takes no step."""

    __slots__ = ("steps", "sessions", "fault")

    def __init__(self, steps: tuple, sessions: tuple[str, ...], fault: tuple[int, str] | None = None):
        self.steps = steps
        self.sessions = sessions
        self.fault = fault

    @property
    def names(self) -> tuple[str, ...]:
        """As `starting permutation:` lists them: a fault's step as `NAME!KIND`, and none of
        the steps it spared."""
        at, kind = self.fault if self.fault is not None else (-1, "")
        return tuple(p.name + (f"!{kind}" if i == at else "") for i, p in self.taken())

    def taken(self) -> list:
        """(place, step) of the steps that run: after a fault, none of its session's."""
        if self.fault is None:
            return list(enumerate(self.steps))
        at = self.fault[0]
        ended = self.sessions[at]
        return [(i, p) for i, p in enumerate(self.steps) if i <= at or self.sessions[i] != ended]


def spec_trials(spec) -> list[Trial]:
    """The spec's permutations: those written, or every interleaving in isolationtester's order."""
    steps = spec.steps()
    return [Trial(tuple(s), tuple(steps[p.name].session for p in s)) for s in spec.schedules()]


class SpecRun:
    """One run of every permutation of a spec (or of `trials`, explore's); iterate `events()` once."""

    def __init__(self, scenario: Scenario, server, options: RunOptions = RunOptions(), trials: Iterable[Trial] | None = None,
                 stop: threading.Event | None = None):
        self.scenario = scenario
        self.trials = trials  # explore's; None: the spec's own permutations, as isolationtester's
        self.stop = stop  # explore's other runners: set, a step still waiting ends the run (RunnerStopped)
        self.spec = scenario.spec
        self.server = server
        self.timeout = options.step_timeout
        self.application = options.application if options.application is not None else os.environ.get("PGAPPNAME", "")
        # The setup blocks run before every permutation (below), not once when the run opens.
        # On PostgreSQL a step is watched as isolationtester watches it; a spec's MySQL
        # variant (`#@mysql` bodies, for `compare`) through the engine's wait monitor.
        self.pg = self.spec.isolationtester
        self.conns = Connections(replace(scenario, setup=""), server, options.step_timeout, (), watch=not self.pg,
                                 scratch=options.scratch)
        self.database = self.conns.database
        self.steps = self.spec.steps()
        # A spec's step may be named "": the name is the comment, and empty is a name too.
        self.index = {s.comment: i for i, s in enumerate(scenario.steps) if s.comment is not None}
        self.started = 0.0
        self.active: dict[str, object] = {}  # session -> its PermutationStep in flight
        self.total_notices: dict[str, int] = {}
        self.targets: dict[int, int] = {}  # id(Blocker) -> the notice count it waits for
        self.any_new_notice = False
        self.substitute: dict[str, tuple[str, str]] = {}  # step name -> (name shown, SQL sent) of a fault
        self.ended: set[str] = set()  # sessions a fault or a stuck permutation ended; reconnected after it if closed
        # A retry's look decides early (_look) unless a timeout of the spec's own (deadlock_timeout,
        # lock_timeout, statement_timeout, ...) could end a wait between our look and isolationtester's.
        self.early_retry = "timeout" not in spec_sql(self.spec).lower()

    def now(self) -> float:
        return (time.perf_counter() - self.started) * 1000.0

    def events(self) -> Iterator[ev.Event]:
        self.started = time.perf_counter()
        try:
            self.conns.open()
            self.conns.scratch.let_role_set(self.spec.settings)
            for session in self.conns.sessions.values():
                self._watch(session)
            yield ev.RunStarted(self.scenario.title, self.server.label, self.database)
            for trial in self.trials if self.trials is not None else spec_trials(self.spec):
                yield from self._permutation(trial)
            yield ev.RunFinished(self.now())
        except BaseException:
            self.conns.close(quiet=True)
            raise
        self.conns.close()

    def _watch(self, session) -> None:
        if not self.pg:
            return
        session.notices.show = libpq_notice
        session.notices.most = None
        # A step that has sent rows and then waits for a lock is waiting, as libpq's
        # PQisBusy tells isolationtester; and every row, value and notice is printed.
        session.whole = True
        # Named as isolationtester names its sessions (what $PGAPPNAME says, then /SESSION),
        # for a spec that looks itself up in pg_stat_activity.
        named = f"{self.application}/{session.name}".replace("'", "''")
        answer = self.server.seam.answer(session.conn, f"SET application_name = '{named}'")
        if answer.error:
            raise ServerError(f"{session.name}'s application_name was refused: {answer.error}")

    # -- one permutation ----------------------------------------------------------

    def _permutation(self, trial: Trial) -> Iterator[ev.Event]:
        yield ev.PermutationStarting(trial.names)
        for sql in self.spec.setups:
            yield from self._script("setup", None, sql, fatal=True)
        # A block written empty (`setup {}`) is sent too: isolationtester's PQexec then fails it.
        for session in self.spec.sessions:
            if session.setup is not None:
                yield from self._script("setup", session.name, session.setup, fatal=True)
        self.active.clear()
        self.substitute.clear()
        completed = True
        try:
            yield from self._steps(trial)
        except StuckError as stuck:
            if self.trials is None:
                raise
            yield ev.PermutationStuck(str(stuck))
            self._end_running()
            completed = False  # what the ended sessions left is a race's, not the permutation's
        if completed and self.trials is not None and self.scenario.invariants:
            answer = self.server.seam.answer
            yield ev.Checked(tuple((i, answer(self.conns.user_conn, i.sql)) for i in self.scenario.invariants))
        for session in self.spec.sessions:
            if session.teardown is not None and session.name not in self.ended:
                yield from self._script("teardown", session.name, session.teardown, fatal=False)
        if self.spec.teardown is not None:
            yield from self._script("teardown", None, self.spec.teardown, fatal=False)
        for name in sorted(self.ended):
            if self.conns.sessions[name].closed:
                self.conns.reconnect(name)
                self._watch(self.conns.sessions[name])
        self.ended.clear()

    def _steps(self, trial: Trial) -> Iterator[ev.Event]:
        waiting: list = []
        for at, pstep in trial.taken():
            if trial.fault is not None and at == trial.fault[0]:
                waiting = yield from self._fault(pstep, trial.fault[1], waiting)
            else:
                waiting = yield from self._next(pstep, waiting)
        waiting = yield from self._complete_all(waiting, RETRY)
        if waiting:
            told = "failed to complete permutation due to mutually-blocking steps"
            raise SpecAbandoned(f"{told}: " + " ".join(p.name for p in waiting), told + "\n")

    def _fault(self, pstep, kind: str, waiting: list) -> Iterator[ev.Event]:
        """Explore's fault in the step's place: the statement it sends instead (ROLLBACK), sent as
        the step would be; or the session's connection dropped as a crashed client's is, also
        while its statement waits. The session takes no further step."""
        fault = BY_NAME[kind]
        step = self.steps[pstep.name]
        self.ended.add(step.session)
        if fault.sql:
            self.substitute[pstep.name] = (f"{pstep.name}!{kind}", fault.sql)
            return (yield from self._next(pstep, waiting))
        self.conns.sessions[step.session].drop_socket()
        running = self.active.pop(step.session, None)
        yield ev.FaultApplied(self.index[pstep.name], kind, step.session, self.now(), fault.told)
        return [p for p in waiting if p is not running]

    def _end_running(self) -> None:
        """A stuck permutation's sessions, every one: ended from the control connection, to be
        connected anew after it. Not only those whose statement still runs: one that holds the
        lock they wait for in an open transaction would hold the teardown's DROP as long."""
        for name, session in self.conns.sessions.items():
            if not session.closed:
                self.conns.kill_quietly(session.thread_id)
                session.close()
            self.ended.add(name)
        self.active.clear()

    def _shown(self, pstep) -> tuple[str, str]:
        """The step's name and SQL as sent and told: a fault's in its place."""
        return self.substitute.get(pstep.name) or (pstep.name, self.steps[pstep.name].sql)

    def _next(self, pstep, waiting: list) -> Iterator[ev.Event]:
        step = self.steps[pstep.name]
        started = time.perf_counter()
        while step.session in self.active:  # its session's earlier step is still running
            old = self.active[step.session]
            if not (yield from self._complete(old, RETRY)):
                waiting.remove(old)
            waiting = yield from self._complete_all(waiting, NONBLOCK | RETRY)
            took = time.perf_counter() - started
            if step.session in self.active and took > 2 * self.timeout:
                # isolationtester's words: held by annotations that nothing will release.
                told = f"step {self.active[step.session].name} timed out after {int(took)} seconds"
                # isolationtester lists them by session, in the spec's order.
                active = " ".join(self.active[s.name].name for s in self.spec.sessions if s.name in self.active)
                raise SpecAbandoned(f"{told} (active steps: {active})", f"{told}\nactive steps are: {active}\n")
        session = self.conns.sessions[step.session]
        index = self.index[pstep.name]
        yield ev.StepStarting(index, self.scenario.steps[index])
        refused = session.send(self._shown(pstep)[1])
        if refused is not None:  # its connection is gone (a step of the spec's ended it): isolationtester ends here
            why = getattr(refused.error, "libpq_text", "") or f"{refused.error.message}\n"
            raise SpecAbandoned(f"failed to send step {pstep.name}: {step.session}'s connection is gone",
                                f"failed to send query for step {pstep.name}: {why}\n")
        self.active[step.session] = pstep
        for blocker in pstep.blockers:
            if blocker.notices is not None:
                other = self.steps[blocker.step].session
                self.targets[id(blocker)] = blocker.notices + self.total_notices.get(other, 0)
        must_wait = yield from self._complete(pstep, NONBLOCK)
        waiting = yield from self._complete_all(waiting, NONBLOCK | RETRY)
        if must_wait:
            waiting.append(pstep)
        return waiting

    def _complete_all(self, waiting: list, flags: int) -> Iterator[ev.Event]:
        """Look at each waiting step in turn; again while a held one may have been freed."""
        while True:
            self.any_new_notice = False
            before, held, still = len(waiting), False, []
            for pstep in waiting:
                if (yield from self._complete(pstep, flags)):
                    held = held or bool(pstep.blockers)
                    still.append(pstep)
            waiting = still
            if not (held and (len(waiting) < before or self.any_new_notice)):
                return waiting

    def _complete(self, pstep, flags: int) -> Iterator[ev.Event]:
        """True while the step is not complete: seen waiting (with NONBLOCK), or held by a
        blocker; else its answer has been read and told."""
        step = self.steps[pstep.name]
        session = self.conns.sessions[step.session]
        if not flags & RETRY and any(b.step is None for b in pstep.blockers):
            yield self._waiting(pstep, session, ev.ANNOTATED)
            return True
        if not self.pg:
            return (yield from self._complete_elsewhere(pstep, session, flags))
        pgconn = session.conn.pgconn
        started = time.perf_counter()
        canceled = False
        look = FIRST_LOOK_S if flags & RETRY == 0 or self.early_retry else LOOK_EVERY_S
        try:
            while pgconn.is_busy():
                yield from self._notices(session)
                if select.select([session], [], [], look)[0]:
                    session.take_input()
                    continue
                blocked, look = self._look(session, flags, started)
                if blocked:
                    session.take_input()
                    if not pgconn.is_busy():
                        break
                    yield from self._notices(session)
                    return (yield from self._seen_waiting(pstep, session, flags))
                canceled = yield from self._overdue(pstep, session, started, canceled)
                self._go_on()
        except ConnectionGone:
            pass  # the connection is gone: reading the answer tells how
        yield from self._notices(session)
        return (yield from self._answered(pstep, session, flags))

    def _complete_elsewhere(self, pstep, session, flags: int) -> Iterator[ev.Event]:
        """_complete on an engine without isolationtester's question: its answer is there once
        its socket is readable; a wait is what the engine's wait monitor sees."""
        deadline = time.perf_counter() + self.timeout
        while not select.select([session], [], [], LOOK_EVERY_S)[0]:
            self._go_on()
            if flags & NONBLOCK and session.thread_id in self.conns.monitor.blocked([session.thread_id]):
                return (yield from self._seen_waiting(pstep, session, flags))
            self._within(deadline, pstep)
        return (yield from self._answered(pstep, session, flags))

    def _seen_waiting(self, pstep, session, flags: int) -> Iterator[ev.Event]:
        """The step waits for a lock: told on the first look at it only."""
        if not flags & RETRY:
            yield self._waiting(pstep, session, "lock")
        return True

    def _overdue(self, pstep, session, started: float, canceled: bool) -> Iterator[ev.Event]:
        """isolationtester's limits on one wait for a step: past the step timeout the step is
        cancelled, once (its answer is then the cancel's error); past twice that the run ends.
        Whether it has been cancelled is returned. Explore's permutation is stuck at the step
        timeout instead: a finding, its sessions ended."""
        took = time.perf_counter() - started
        if self.trials is not None:
            self._within(started + self.timeout, pstep)
            return canceled
        if took > self.timeout and not canceled:
            session.conn.pgconn.cancel()
            yield ev.StepCanceled(session.name, pstep.name, int(took))
            canceled = True
        if took > 2 * self.timeout:
            told = f"step {pstep.name} timed out after {int(took)} seconds"
            raise SpecAbandoned(told, told + "\n")
        return canceled

    def _go_on(self) -> None:
        """Explore's run told to stop (Ctrl-C, another runner's error) does not wait out a
        step that waits for a lock: it ends here, its sessions closed as any run's are."""
        if self.stop is not None and self.stop.is_set():
            raise RunnerStopped()

    def _within(self, deadline: float, pstep) -> None:
        if time.perf_counter() > deadline:
            raise StuckError(f"step timeout: step {pstep.name} still running after {self.timeout:g} s "
                             "(raise --step-timeout for slow statements)")

    def _answered(self, pstep, session, flags: int) -> Iterator[ev.Event]:
        """The step's answer is in: told, unless an annotation still holds it back."""
        if self._held(pstep):
            if not flags & RETRY:
                yield self._waiting(pstep, session, ev.ANNOTATED)
            return True
        step = self.steps[pstep.name]
        waited = (time.perf_counter() - session.sent_at) * 1000.0 if flags & RETRY else None
        result = session.read(self.timeout)
        self._count(step.session, sum(len(getattr(r, "notices", ())) for r in _each(result)))
        index = self.index[pstep.name]
        name, sql = self._shown(pstep)
        yield ev.Completed(index, step.session, sql, name, result, self.now(), waited)
        if self.pg:
            yield from self._notifies(session)
        del self.active[step.session]
        return False

    def _notifies(self, session) -> Iterator[ev.Event]:
        """The NOTIFYs the session's connection has received, as isolationtester reports
        them after a step: the sender named by its session, else by its pid."""
        pgconn = session.conn.pgconn
        names = {s.thread_id: s.name for s in self.conns.sessions.values()}
        try:
            session.take_input()
            while (notify := pgconn.notifies()) is not None:
                sender = names.get(notify.be_pid, f"PID {notify.be_pid}")
                yield ev.Notified(session.name, _text(notify.relname), _text(notify.extra), sender)
                session.take_input()
        except ConnectionGone:
            return  # the connection is gone; its step's answer has said so

    def _waiting(self, pstep, session, kind: str) -> ev.Waiting:
        session.waiting = True
        name, sql = self._shown(pstep)
        return ev.Waiting(self.index[pstep.name], session.name, sql, name, self.now(), kind, ())

    def _look(self, session, flags: int, started: float) -> tuple[bool, float]:
        """Whether a step in flight is seen waiting for a lock (only with NONBLOCK), and how long
        until the next look. isolationtester decides LOOK_EVERY_S into a look at a waiting step;
        our retry decides at its first look, sooner, only where nothing can change before
        isolationtester's: every other statement in flight waits for a lock too, so none can
        free this one's (a running one could). Else it waits for isolationtester's moment."""
        if not flags & NONBLOCK:
            return False, LOOK_EVERY_S
        waited = time.perf_counter() - started
        if flags & RETRY and waited < LOOK_EVERY_S:
            if self._all_blocked(session):
                return True, LOOK_EVERY_S
            return False, LOOK_EVERY_S - waited
        return self._blocked(session), LOOK_EVERY_S

    def _all_blocked(self, session) -> bool:
        """Whether the session and every other one whose statement still runs wait for a lock:
        one question for them all."""
        running = [session.thread_id]
        for name in self.active:
            other = self.conns.sessions[name]
            if other is not session and not other.closed:
                other.take_input()
                if other.conn.pgconn.is_busy():
                    running.append(other.thread_id)
        return self._ask(running)

    def _blocked(self, session) -> bool:
        return self._ask([session.thread_id])

    def _ask(self, pids_asked: list[int]) -> bool:
        """isolationtester's question, pg_isolation_test_session_is_blocked, of each backend:
        true when every one waits for another session (or a safe snapshot)."""
        pids = ",".join(str(s.thread_id) for s in self.conns.sessions.values())
        asked = ",".join(str(int(p)) for p in pids_asked)
        sql = (f"SELECT pg_catalog.bool_and(pg_catalog.pg_isolation_test_session_is_blocked(p, '{{{pids}}}')) "
               f"FROM pg_catalog.unnest('{{{asked}}}'::pg_catalog.int4[]) p")
        answer = self.server.seam.answer(self.conns.control, sql)
        if answer.error or not answer.rows:
            raise ServerError(f"lock wait query failed: {answer.error}")
        return answer.rows[0][0] == "t"

    def _held(self, pstep) -> bool:
        """Whether a blocker annotation still holds the step's report back."""
        for blocker in pstep.blockers:
            if blocker.step is None:
                continue
            other = self.steps[blocker.step].session
            if blocker.notices is None:
                running = self.active.get(other)
                if running is not None and running.name == blocker.step:
                    return True
            elif self.total_notices.get(other, 0) < self.targets.get(id(blocker), 0):
                return True
        return False

    def _notices(self, session) -> Iterator[ev.Event]:
        if not self.pg:
            return
        lines, count = session.notices.take()
        if count:
            self._count(session.name, count)
            yield ev.Noticed(session.name, lines)

    def _count(self, session: str, count: int) -> None:
        if count:
            self.total_notices[session] = self.total_notices.get(session, 0) + count
            self.any_new_notice = True

    # -- setup and teardown blocks ----------------------------------------------------

    def _script(self, what: str, name: str | None, sql: str, fatal: bool) -> Iterator[ev.Event]:
        """A setup or teardown block, on the setup connection or its session's. A failed
        setup ends the run, as isolationtester's does; a failed teardown is told and the run
        goes on."""
        if name is None:
            result = self.server.seam.answer(self.conns.user_conn, sql)
        else:
            session = self.conns.sessions[name]
            early = session.send(sql)
            result = early if early is not None else session.read(self.timeout)
            lines = tuple(line for r in _each(result) for line in getattr(r, "notices", ()))
            if lines:
                self._count(name, len(lines))
                yield ev.Noticed(name, lines)
        yield ev.ScriptAnswered(what, name, result)
        if (result.error or result.empty) and fatal:
            where = f"setup of session {name}" if name else "setup"
            why = f"{result.error}{self._refused_why(result.error)}" if result.error else "the block holds no statement"
            raise SpecSetupFailed(self.scenario.path, f"{where} failed: {why}")

    def _refused_why(self, error) -> str:
        """Where a setup was refused a right (a role, a superuser's setting), that it ran as the
        per-run role, not as isolationtester runs it: a user reading PostgreSQL's words alone
        looks for the fault in the spec. Told on the tool's error line, never in the output."""
        if error.sqlstate != INSUFFICIENT_PRIVILEGE or not self.server.seam.confines(self.server):
            return ""
        return " (a spec runs as a per-run role without superuser rights; with --dsn, --allow-shared-user runs it as the DSN's own account, as isolationtester does)"


def spec_sql(spec) -> str:
    """Every block and step of the spec, one text."""
    blocks = [*spec.setups, spec.teardown or ""]
    for session in spec.sessions:
        blocks += [session.setup or "", session.teardown or "", *(step.sql for step in session.steps)]
    return "\n".join(blocks)


def libpq_notice(diagnostic) -> str:
    """A notice as libpq words it (PQERRORS_DEFAULT: no context for a notice), which
    isolationtester prints after the session's name: its DETAIL and HINT lines included."""
    text = f"{diagnostic.severity or 'NOTICE'}:  {diagnostic.message_primary or ''}"
    for label, part in (("DETAIL", diagnostic.message_detail), ("HINT", diagnostic.message_hint)):
        if part:
            text += f"\n{label}:  {part}"
    return text


def _text(value: bytes) -> str:
    return value.decode("utf-8", "replace")


def _each(result: Result) -> tuple[Result, ...]:
    """A step's results in the order they came: the earlier statements', then its last."""
    return tuple(getattr(result, "earlier", ())) + (result,)
