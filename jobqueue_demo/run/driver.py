"""Runs a scenario's schedule on a server and yields what happened, in order.

Like PostgreSQL's isolationtester: one connection per session plus a control connection
that sets up the scratch database and watches for lock waits. After every step the driver
"settles": each session with a statement in flight either answers or is seen waiting on a
lock, so the transcript is in the order things happened and a wait never hangs the run.
`Run` takes the steps in file order; `explore` drives the same `Driver` one chosen step at
a time, asking it which sessions are blocked.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..engine.seam import Session
from ..engine.types import BY_DEADLOCK, QUEUED, Result, ServerInfo, shown
from ..errors import StuckError
from ..scenario.model import Fault, Locks, Narration, Scenario, Statement
from . import events as ev
from . import faults
from .captures import Captures
from .connections import Connections
from .settle import Answered, settle

if TYPE_CHECKING:  # imported where a deadlock, a stuck run or explore needs them, off run's start-up
    from ..engine.seam import TableSnapshot
    from ..engine.types import DeadlockCycle, Survey
    from .chain import WaitChain

# A statement's first word says what it is, or its first two when the first is a verb of DDL
# or LOCK: "SELECT", "LOCK TABLES", "ALTER TABLE".
TWO_WORD_STATEMENTS = {"LOCK", "ALTER", "CREATE", "DROP", "TRUNCATE", "RENAME"}


def statement_head(sql: str) -> str:
    words = sql.split()[:2]
    head = words if words and words[0].upper() in TWO_WORD_STATEMENTS else words[:1]
    return " ".join(w.upper().rstrip(";") for w in head)


@dataclass(eq=False)
class RunOptions:
    """How a run waits and what it adds to its events, beyond the scenario itself."""

    step_timeout: float = 10.0
    # Naming a row lock's holder reads InnoDB's cached lock tables, at most once per 0.1 s;
    # explore turns it off for the many schedules it only classifies.
    name_blockers: bool = True
    # How long a wait must be seen before it counts. MariaDB's SKIP LOCKED enqueues a
    # waiting lock for a moment before skipping (seen in SHOW ENGINE INNODB STATUS about
    # once in 1000 claims on a loaded machine); explore, which must not mistake it for a
    # wait, asks for a few milliseconds, `run` keeps its detection latency.
    confirm_s: float = 0.0
    # --show-locks: after each statement, the record locks it added (footprint.py).
    show_locks: bool = False
    # --matrix: SET SESSION assignments for every session, after its own (matrix.py).
    session_settings: tuple[str, ...] = ()
    # A scratch database the caller opened and closes, shared by several runs in turn (verify's
    # isolation specs, as pg_isolation_regress runs PostgreSQL's in one database); each run
    # leaves it emptied (Connections.close).
    scratch: object = None
    # What an isolation spec's sessions' application_name starts with (isolationtester's
    # $PGAPPNAME, which pg_isolation_regress sets to isolation/NAME); None: $PGAPPNAME.
    application: str | None = None


class Run:
    """One run of one scenario; iterate `events()` once."""

    def __init__(self, scenario: Scenario, server: ServerInfo, options: RunOptions = RunOptions()):
        self.scenario = scenario
        self.driver = Driver(scenario, server, options)
        self.database = self.driver.database

    @property
    def sessions(self) -> dict[str, Session]:
        return self.driver.conns.sessions

    def events(self) -> Iterator[ev.Event]:
        driver = self.driver
        driver.start_clock()
        try:
            driver.open()
            yield ev.RunStarted(self.scenario.title, driver.server.label, self.database)
            for index, step in enumerate(self.scenario.steps):
                yield ev.StepStarting(index, step)
                yield from driver.step(index, step)
            still = driver.still_running()
            if still:
                yield from driver.stuck(len(self.scenario.steps), "the scenario ended", still)
            yield ev.RunFinished(driver.now())
        except BaseException:
            driver.close(quiet=True)
            raise
        driver.close()


class Driver:
    """A scenario's sessions on a scratch database, taking one step at a time.

    It composes the pieces of a run: `Connections` (what is open on the server), `Captures`
    (values substituted into later statements), the settle policy (settle.py), fault steps
    (faults.py) and the stuck diagnosis (stuck.py); it keeps the statements in flight and
    turns what happens to them into events.
    """

    def __init__(self, scenario: Scenario, server: ServerInfo, options: RunOptions = RunOptions()):
        self.scenario = scenario
        self.server = server
        self.options = options
        self.conns = Connections(scenario, server, options.step_timeout, options.session_settings)
        self.database = self.conns.database
        self.footprint = None
        self.captures = Captures(scenario.session_names, server.dialect.literal)
        self.started = 0.0
        self._inflight: dict[str, tuple[int, Statement, str]] = {}
        self._waits: dict[str, ev.Waiting] = {}

    # -- lifecycle -------------------------------------------------------------

    def open(self) -> None:
        self.conns.open()
        if self.options.show_locks:
            from .footprint import Footprint

            self.footprint = Footprint(self.conns.monitor, self.conns.sessions)

    def start_clock(self) -> None:
        """Event times count from here."""
        self.started = time.perf_counter()

    def now(self) -> float:
        return (time.perf_counter() - self.started) * 1000.0

    def recreate_database(self) -> None:
        """Drop the scratch database and build it again from the setup; sessions must be idle."""
        self.conns.recreate_database()

    def survey(self) -> Survey:
        """The scratch tables, or why restoring their rows would not reset the database."""
        return self.conns.survey()

    def snapshot(self, tables: tuple[str, ...]) -> TableSnapshot:
        return self.conns.snapshot(tables)

    def restart_sessions(self) -> None:
        """Give every session a clean slate, as if newly connected, and forget captures."""
        self.conns.restart_sessions()
        self.captures.forget()
        self._inflight.clear()
        self._waits.clear()

    def check(self, sql: str) -> Result:
        """An invariant's answer, as the sessions' user, errors included."""
        return self.server.seam.answer(self.conns.user_conn, sql)

    def close(self, quiet: bool = False) -> None:
        """Leave nothing behind (Connections.close); `quiet` when already failing."""
        self.conns.close(quiet)

    # -- steps -----------------------------------------------------------------

    def blocked(self) -> frozenset[str]:
        """Sessions whose statement has not answered yet; after a step, each waits on a lock."""
        return frozenset(s.name for s in self.conns.sessions.values() if s.busy)

    def still_running(self) -> list[Session]:
        return [s for s in self.conns.sessions.values() if s.busy]

    def step(self, index: int, step) -> Iterator[ev.Event]:
        if self.footprint is not None:
            return self.footprint.follow(self._step(index, step))
        return self._step(index, step)

    def _step(self, index: int, step) -> Iterator[ev.Event]:
        if isinstance(step, Narration):
            yield ev.Narrated(index, step.text)
        elif isinstance(step, Statement):
            yield from self._statement(index, step)
        elif isinstance(step, Fault):
            yield from faults.apply(self, index, step)
        elif isinstance(step, Locks):
            sessions = {s.thread_id: s.name for s in self.conns.sessions.values() if not s.closed}
            columns, rows, note = self.server.seam.lock_table(self.conns.monitor, self.database, sessions)
            yield ev.LocksShown(index, columns, rows, note)

    def _statement(self, index: int, step: Statement) -> Iterator[ev.Event]:
        session = self.conns.sessions[step.session]
        if session.busy:
            named = self.scenario.prompts[step.session]  # B@2 on a cluster, as the transcript names it
            yield from self.stuck(index, f"{named}'s next statement cannot be sent", [session])
        sql = self.captures.substitute(step)
        self.conns.before_statement(session, sql)
        # The events show what was sent, a captured value's control characters written out.
        self._inflight[session.name] = (index, step, shown(sql))
        early = session.send(sql)
        if early is not None:
            del self._inflight[session.name]
            yield ev.Completed(index, step.session, shown(sql), step.comment, early, self.now())
            return
        yield from self.settle(lead=session)

    def settle(self, lead: Session | None = None) -> Iterator[ev.Event]:
        """Until every statement in flight has answered or is seen waiting (settle.py)."""
        for verdict in settle(self.conns.sessions, self.conns.monitor, self.options, lead):
            if isinstance(verdict, Answered):
                yield self.completion(verdict.session)
            else:
                yield self._waiting(verdict.session, verdict.kind)

    def forget_statement(self, session: Session) -> None:
        """The session's statement will never be answered: its connection was dropped."""
        self._inflight.pop(session.name, None)
        session.pending_sql = None

    def completion(self, session: Session) -> ev.Completed:
        """Read the answer of the session's statement in flight."""
        index, step, sql = self._inflight.pop(session.name)
        was_waiting = session.waiting
        waited_ms = (time.perf_counter() - session.sent_at) * 1000.0 if was_waiting else None
        result = session.read(self.options.step_timeout)
        self.captures.keep(step, result)
        wait = self._waits.pop(session.name, None)
        blockers = wait.blockers if wait else ()
        cause, cycle = self._rolled_back(session, result)
        return ev.Completed(index, session.name, sql, step.comment, result, self.now(), waited_ms, blockers, cycle, cause)

    def _rolled_back(self, session: Session, result) -> tuple[str | None, DeadlockCycle | None]:
        """For a deadlock error: what rolled the transaction back, on a cluster node (a
        deadlock, a lost certification or a brute-force abort), and the cycle when it was a
        deadlock, read only where lock holders are named (not while explore classifies schedules)."""
        if result.error is None or result.error.error_class != "deadlock":
            return None, None

        cause = self.conns.rollback_cause(session)
        if cause not in (None, BY_DEADLOCK) or not self.options.name_blockers:
            return cause, None
        return cause, self.server.seam.read_deadlock(self.conns.monitor, self.database, self.conns.names(), session.thread_id)

    def _waiting(self, session: Session, kind: str) -> ev.Waiting:
        session.waiting = True
        index, step, sql = self._inflight[session.name]
        if not self.options.name_blockers:
            return ev.Waiting(index, session.name, sql, step.comment, self.now(), kind, ())
        info = self.conns.monitor.describe(session.thread_id, kind, self.database)
        names = self.conns.names()
        edges = tuple(self._blocker(names.get(e.thread, f"connection {e.thread}"), e) for e in info.edges)
        blockers = tuple(e.session for e in edges)
        wait = ev.Waiting(index, session.name, sql, step.comment, self.now(), info.kind, blockers, info.lock, edges, info.requested)
        self._waits[session.name] = wait
        return wait

    def _blocker(self, name: str, edge) -> ev.Blocker:
        """A blocker as the run names it; one queued ahead with its request and whom that waits for."""
        if edge.how != QUEUED:
            return ev.Blocker(name, edge.how, edge.mode)
        inflight = self._inflight.get(name)
        ahead = self._waits.get(name)
        return ev.Blocker(name, edge.how, edge.mode, statement_head(inflight[2]) if inflight else "",
                          ahead.blockers if ahead else ())

    # -- reporting a schedule that cannot go on ---------------------------------

    def stuck(self, index: int, what: str, waiting: list[Session]) -> Iterator[ev.Event]:
        """Tell the whole waits-for chain as an event, then end the run with it."""
        from . import stuck

        found = self._wait_chain(waiting)
        yield ev.Stuck(index, what, found)
        raise StuckError(stuck.message(self.scenario, index, what, waiting, found))

    def stuck_message(self, what: str) -> str | None:
        """Why the run cannot go on past its last step, or None when nothing is left running."""
        waiting = self.still_running()
        if not waiting:
            return None
        from . import stuck

        index = len(self.scenario.steps)
        return stuck.message(self.scenario, index, what, waiting, self._wait_chain(waiting))

    def _wait_chain(self, waiting: list[Session]) -> WaitChain:
        from . import stuck

        conns = self.conns
        scene = stuck.Scene(conns.sessions, self._waits, conns.monitor, conns.names, self.options.name_blockers)
        return stuck.wait_chain(scene, waiting)
