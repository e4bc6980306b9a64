"""Runs a scenario's schedule on a server and yields what happened, in order.

Like PostgreSQL's isolationtester: one connection per session plus a control connection
that sets up the scratch database and watches for lock waits. After every step the driver
"settles": each session with a statement in flight either answers or is seen waiting on a
lock, so the transcript is in the order things happened and a wait never hangs the run.
`Run` takes the steps in file order; `explore` drives the same `Driver` one chosen step at
a time, asking it which sessions are blocked.
"""

from __future__ import annotations

import re
import select
import time
from collections.abc import Iterator
from dataclasses import dataclass

from ..engine import control
from ..engine.deadlock import DeadlockCycle, read_deadlock
from ..engine.mysql_errors import ER_LOCK_DEADLOCK
from ..engine.scratch import ScratchDatabase
from ..engine.server import ServerInfo
from ..engine.session import Session
from ..engine.waits import ROW, WaitMonitor
from ..errors import ScenarioError, ServerError, StuckError
from ..scenario.model import CAPTURE_REF, Fault, Locks, Narration, Scenario, SessionSpec, Statement
from . import chain
from . import events as ev

# A lock wait is normally visible 2-5 ms after sending; polling this often keeps the
# detection latency near the server's own, without a fixed sleep.
POLL_FIRST_S = 0.0005
POLL_MAX_S = 0.002
# How long a freed waiter's answer may be held back for the statement that freed it.
LEAD_FIRST_S = 0.05
SKIPS_ROW_LOCKS = re.compile(r"\b(SKIP\s+LOCKED|NOWAIT)\b", re.IGNORECASE)
SKIP_LOCKED_CONFIRM_S = 0.005


@dataclass(frozen=True)
class RunOptions:
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


class Run:
    """One run of one scenario; iterate `events()` once."""

    def __init__(self, scenario: Scenario, server: ServerInfo, options: RunOptions = RunOptions()):
        self.scenario = scenario
        self.driver = Driver(scenario, server, options)
        self.database = self.driver.database

    @property
    def sessions(self) -> dict[str, Session]:
        return self.driver.sessions

    def events(self) -> Iterator[ev.Event]:
        driver = self.driver
        driver.started = time.perf_counter()
        try:
            driver.open()
            yield ev.RunStarted(self.scenario.title, driver.server.label, self.database)
            for index, step in enumerate(self.scenario.steps):
                yield ev.StepStarting(index, step)
                yield from driver.step(index, step)
            still = [s for s in self.sessions.values() if s.busy]
            if still:
                yield from driver.stuck(len(self.scenario.steps), "the scenario ended", still)
            yield ev.RunFinished(driver.now())
        except BaseException:
            driver.close(quiet=True)
            raise
        driver.close()


class Driver:
    """A scenario's sessions on a scratch database, taking one step at a time."""

    def __init__(self, scenario: Scenario, server: ServerInfo, options: RunOptions = RunOptions()):
        self.scenario = scenario
        self.server = server
        self.options = options
        self.scratch = ScratchDatabase(
            server, confine=not server.shared_user, multi_statements=True, answer_timeout=options.step_timeout
        )
        self.database = self.scratch.name
        self.control = None
        # Runs the scenario's own setup and invariants, as the sessions' (per-run) user.
        self.user_conn = None
        self.monitor: WaitMonitor | None = None
        self.footprint = None
        self.sessions: dict[str, Session] = {}
        self.specs = {s.name: s for s in scenario.sessions}
        self.captures: dict[str, dict[str, str | None]] = {s.name: {} for s in scenario.sessions}
        self.started = 0.0
        self._inflight: dict[str, tuple[int, Statement, str]] = {}
        self._waits: dict[str, ev.Waiting] = {}
        # Threads of sessions disconnected during a lock wait: the server ends them only when
        # the wait ends, so they are killed before the database is reset or dropped.
        self._orphans: list[int] = []

    # -- lifecycle -------------------------------------------------------------

    def open(self) -> None:
        self.scratch.open()
        self.control = self.scratch.conn
        self.monitor = WaitMonitor(self.control, self.server.flavor)
        if self.options.show_locks:
            from .footprint import Footprint

            self.footprint = Footprint(self.monitor, self.sessions)
        self.user_conn = self.scratch.session_params.connect(
            database=self.database, multi_statements=True, answer_timeout=self.options.step_timeout
        )
        if self.scenario.setup:
            self._run_setup()
        for spec in self.scenario.sessions:
            self.sessions[spec.name] = self._connect(spec)

    def recreate_database(self) -> None:
        """Drop the scratch database and build it again from the setup; sessions must be idle."""
        self.scratch.recreate()
        if self.scenario.setup:
            self._run_setup()

    def restart_sessions(self) -> None:
        """Give every session a clean slate, as if newly connected, and forget captures.

        COM_CHANGE_USER rolls back, drops temporary tables, releases table and user locks
        and resets session variables, at a fifth of the cost of a new connection. A session
        that is gone, or still inside a statement, gets a new connection instead.
        """
        import MySQLdb

        self._end_orphans()
        for name, session in list(self.sessions.items()):
            if session.busy and not session.closed:
                self._kill_quietly(session.thread_id)
                session.close()
            if not session.closed:
                try:
                    params = self.scratch.session_params
                    session.conn.change_user(params.user, params.password, self.database)
                    self._apply_settings(session.conn, self.specs[name])
                    continue
                except MySQLdb.OperationalError:
                    session.close()  # killed by a fault step: the server has already ended it
            self.sessions[name] = self._connect(self.specs[name])
        self.captures = {name: {} for name in self.sessions}
        self._inflight.clear()
        self._waits.clear()

    def blocked(self) -> frozenset[str]:
        """Sessions whose statement has not answered yet; after a step, each waits on a lock."""
        return frozenset(s.name for s in self.sessions.values() if s.busy)

    def settle(self) -> Iterator[ev.Event]:
        """Look again at the statements in flight, reporting those that answered since."""
        return self._settle()

    def _run_setup(self) -> None:
        import MySQLdb

        try:
            self.user_conn.query(self.scenario.setup.encode("utf-8"))
            while True:
                self.user_conn.store_result()  # each setup statement's result must be read before the next
                if self.user_conn.next_result() != 0:
                    break
        except MySQLdb.Error as e:
            raise ScenarioError(self.scenario.path, f"setup failed: ERROR {e.args[0]}: {e.args[-1]}") from None

    def _connect(self, spec: SessionSpec) -> Session:
        conn = self.scratch.session_params.connect(database=self.database, answer_timeout=self.options.step_timeout)
        self._apply_settings(conn, spec)
        return Session(spec.name, conn, conn.thread_id())

    def _apply_settings(self, conn, spec: SessionSpec) -> None:
        settings = []
        if spec.isolation:
            settings.append(self.server.dialect.isolation_setting(spec.isolation))
        if spec.innodb_lock_wait_timeout is not None:
            settings.append(f"innodb_lock_wait_timeout = {spec.innodb_lock_wait_timeout}")
        if spec.lock_wait_timeout is not None:
            settings.append(f"lock_wait_timeout = {spec.lock_wait_timeout}")
        settings += self.options.session_settings
        if settings:
            conn.query(self.server.dialect.set_session(settings).encode())

    def close(self, quiet: bool = False) -> None:
        """Leave nothing behind: end every session's transaction, drop the scratch database
        and the per-run user. `quiet` when already failing: the first error is the one told.

        A session stuck in a lock wait would not notice its socket closing, and its locks
        would hold DROP DATABASE, so sessions are killed from the control connection.
        """
        for session in self.sessions.values():
            if not session.closed and self.control is not None:
                self._kill_quietly(session.thread_id)
            session.close()
        self._end_orphans(wait=False)  # DROP DATABASE waits for their locks anyway
        if self.user_conn is not None:
            try:
                self.user_conn.close()
            except Exception:  # already gone; nothing more to release
                pass
            self.user_conn = None
        self.control = None
        self.scratch.close(quiet)

    def _end_orphans(self, wait: bool = True) -> None:
        for thread_id in self._orphans:
            self._kill_quietly(thread_id)
            if wait:
                self._wait_gone(thread_id, time.perf_counter() + self.options.step_timeout)
        self._orphans.clear()

    def _kill_quietly(self, thread_id: int) -> None:
        try:
            self._control(self.server.dialect.kill_connection(thread_id))
        except ServerError:
            pass  # already gone

    def _control(self, sql: str) -> None:
        control.execute(self.control, sql)

    def now(self) -> float:
        return (time.perf_counter() - self.started) * 1000.0

    # -- steps -----------------------------------------------------------------

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
            yield from self._fault(index, step)
        elif isinstance(step, Locks):
            from ..engine.locks import lock_table

            sessions = {s.thread_id: s.name for s in self.sessions.values() if not s.closed}
            columns, rows, note = lock_table(self.monitor, self.database, sessions)
            yield ev.LocksShown(index, columns, rows, note)

    def _statement(self, index: int, step: Statement) -> Iterator[ev.Event]:
        session = self.sessions[step.session]
        if session.busy:
            yield from self.stuck(index, f"{step.session}'s next statement cannot be sent", [session])
        sql = self._substitute(step)
        self._inflight[session.name] = (index, step, sql)
        early = session.send(sql)
        if early is not None:
            del self._inflight[session.name]
            yield ev.Completed(index, step.session, sql, step.comment, early, self.now())
            return
        yield from self._settle(lead=session)

    def _substitute(self, step: Statement) -> str:
        values = self.captures[step.session]
        if not values:
            return step.sql

        def literal(match: re.Match) -> str:
            name = match.group(1)
            if name not in values:
                return match.group(0)
            value = values[name]
            if value is None:
                return "NULL"
            if re.fullmatch(r"-?\d+(\.\d+)?", value):
                return value
            return "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"

        return CAPTURE_REF.sub(literal, step.sql)

    def _settle(self, lead: Session | None = None) -> Iterator[ev.Event]:
        """Until every in-flight statement has answered or is confirmed waiting on a lock.

        "Waiting" must be seen on two polls in a row: just after a lock is released the
        waiter may still show its old state for a moment before it wakes. The statement
        just sent (`lead`) is reported before the ones it set free: InnoDB releases locks
        before a COMMIT's reply is sent, so a freed waiter often answers first, but the
        lesson reads in cause-then-effect order.
        """
        deadline = time.perf_counter() + self.options.step_timeout
        interval = POLL_FIRST_S
        confirmed: dict[str, str] = {}
        since: dict[str, float] = {}  # when each wait in `confirmed` was first seen
        while True:
            busy = [s for s in self.sessions.values() if s.busy and not s.closed]
            if not busy:
                return
            ready, _, _ = select.select(busy, [], [], interval)
            lead_pending = lead is not None and lead.busy and lead not in ready and lead.name not in confirmed
            hold_back = lead_pending and time.perf_counter() - lead.sent_at < LEAD_FIRST_S
            for session in sorted(ready, key=lambda s: s is not lead):
                if session is lead or not hold_back:
                    yield self._completion(session)
            busy = [s for s in busy if s.busy]
            if not busy:
                return
            kinds = self.monitor.blocked([s.thread_id for s in busy])
            waiting_now = {s.name: kinds[s.thread_id] for s in busy if s.thread_id in kinds}
            now = time.perf_counter()
            since = {n: since.get(n, now) if confirmed.get(n) == k else now for n, k in waiting_now.items()}
            known = {s.name for s in busy if s.waiting}  # confirmed by an earlier step already
            held = all(
                confirmed.get(n) == k and (n in known or now - since[n] >= self._confirm_s(n, k))
                for n, k in waiting_now.items()
            )
            if len(waiting_now) == len(busy) and held:
                for session in busy:
                    if not session.waiting:
                        yield self._waiting(session, waiting_now[session.name])
                return
            # A new sighting is re-checked at once: a deadlock victim or a freed waiter shows
            # its wait only for a moment.
            interval = 0.0 if waiting_now and waiting_now != confirmed else min(max(interval, POLL_FIRST_S) * 2, POLL_MAX_S)
            confirmed = waiting_now
            if time.perf_counter() > deadline:
                running = [s.name for s in busy if s.name not in waiting_now]
                raise StuckError(
                    f"step timeout: {', '.join(running)} still running after {self.options.step_timeout:g} s "
                    "(raise --step-timeout for slow statements)"
                )

    def _confirm_s(self, session: str, kind: str) -> float:
        """SKIP LOCKED and NOWAIT never wait for a row lock, but MariaDB shows the momentary
        waiting lock SKIP LOCKED enqueues before it skips; only a lasting one is believed."""
        if kind == ROW and SKIPS_ROW_LOCKS.search(self._inflight[session][2]):
            return max(self.options.confirm_s, SKIP_LOCKED_CONFIRM_S)
        return self.options.confirm_s

    def _completion(self, session: Session) -> ev.Completed:
        index, step, sql = self._inflight.pop(session.name)
        was_waiting = session.waiting
        waited_ms = (time.perf_counter() - session.sent_at) * 1000.0 if was_waiting else None
        result = session.read(self.options.step_timeout)
        if step.capture and result.rows:
            self.captures[session.name][step.capture] = result.rows[0][0]
        elif step.capture and result.error is None:
            self.captures[session.name][step.capture] = None
        wait = self._waits.pop(session.name, None)
        blockers = wait.blockers if wait else ()
        cycle = self._deadlock(session, result)
        return ev.Completed(index, session.name, sql, step.comment, result, self.now(), waited_ms, blockers, cycle)

    def _deadlock(self, session: Session, result) -> DeadlockCycle | None:
        """The cycle a deadlock error broke; read only where lock holders are named (not while
        explore classifies schedules)."""
        if result.error is None or result.error.errno != ER_LOCK_DEADLOCK or not self.options.name_blockers:
            return None
        return read_deadlock(self.monitor, self.database, self._names(), session.thread_id)

    def _waiting(self, session: Session, kind: str) -> ev.Waiting:
        session.waiting = True
        index, step, sql = self._inflight[session.name]
        if not self.options.name_blockers:
            return ev.Waiting(index, session.name, sql, step.comment, self.now(), kind, ())
        info = self.monitor.describe(session.thread_id, kind, self.database)
        names = self._names()
        blockers = tuple(names.get(t, f"connection {t}") for t in info.blockers)
        wait = ev.Waiting(index, session.name, sql, step.comment, self.now(), kind, blockers, info.lock)
        self._waits[session.name] = wait
        return wait

    def _names(self) -> dict[int, str]:
        names = {s.thread_id: s.name for s in self.sessions.values()}
        names[self.control.thread_id()] = "the control connection"
        return names

    # -- faults ----------------------------------------------------------------

    def _fault(self, index: int, step: Fault) -> Iterator[ev.Event]:
        session = self.sessions[step.session]
        action = step.action
        if action == "wait":
            yield from self._wait_for(index, session)
            return
        if action == "reconnect":
            if session.busy:
                yield from self.stuck(index, f"{session.name} cannot reconnect", [session])
            session.close()
            self.sessions[session.name] = self._connect(self.specs[session.name])
            yield ev.FaultApplied(index, action, session.name, self.now(), "new connection")
            return
        if session.closed:
            yield ev.FaultApplied(index, action, session.name, self.now(), "already disconnected")
            return
        if action == "kill-query":
            self._control(self.server.dialect.kill_statement(session.thread_id))
            yield ev.FaultApplied(index, action, session.name, self.now(), "statement interrupted")
            yield from self._settle()
            return
        began = time.perf_counter()
        if action == "kill":
            self._control(self.server.dialect.kill_connection(session.thread_id))
            yield from self._settle()
        else:
            waited = session.busy
            session.drop_socket()
            self._inflight.pop(session.name, None)
            session.pending_sql = None
            if waited:
                # InnoDB does not look at the client's socket during a lock wait: the server
                # finds the connection gone only when the wait ends, as with a crashed client.
                self._orphans.append(session.thread_id)
                detail = "its statement was waiting: the server ends the session when that wait ends"
                yield ev.FaultApplied(index, action, session.name, self.now(), detail)
                return
        gone = self._wait_gone(session.thread_id, began + self.options.step_timeout)
        took = (time.perf_counter() - began) * 1000.0
        if gone:
            detail = "the server ended the session and rolled back its transaction"
        else:
            detail = f"the server had not noticed after {self.options.step_timeout:g} s"
        yield ev.FaultApplied(index, action, session.name, self.now(), detail, took if gone else None)
        # The rollback has released the session's locks only now: statements that waited
        # for them answer here, not at some later step.
        yield from self._settle()

    def _wait_gone(self, thread_id: int, deadline: float) -> bool:
        interval = POLL_FIRST_S
        while time.perf_counter() < deadline:
            if not self.monitor.alive(thread_id):
                return True
            time.sleep(interval)
            interval = min(interval * 2, POLL_MAX_S)
        return False

    def _wait_for(self, index: int, session: Session) -> Iterator[ev.Event]:
        """A `wait` step: let the session's statement end on its own (a lock wait timeout)."""
        deadline = time.perf_counter() + self.options.step_timeout
        while session.busy:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                yield from self.stuck(index, f"{session.name} did not finish within the step timeout", [session])
            ready, _, _ = select.select([session], [], [], remaining)
            if ready:
                yield self._completion(session)
        yield from self._settle()

    # -- reporting a schedule that cannot go on ---------------------------------

    def stuck(self, index: int, what: str, waiting: list[Session]) -> Iterator[ev.Event]:
        """Tell the whole waits-for chain as an event, then end the run with it."""
        found = self.wait_chain(waiting)
        yield ev.Stuck(index, what, found)
        raise StuckError(self._stuck_text(index, what, waiting, found))

    def stuck_message(self, index: int, what: str, waiting: list[Session]) -> str:
        return self._stuck_text(index, what, waiting, self.wait_chain(waiting))

    def _stuck_text(self, index: int, what: str, waiting: list[Session], found: chain.WaitChain) -> str:
        sentences = [found.sentence(name) for name in chain.starts(found, [s.name for s in waiting])]
        return f"stuck at {self._where(index)}: {what}: " + "; ".join(sentences)

    def wait_chain(self, waiting: list[Session]) -> chain.WaitChain:
        links = {}
        for name, session in self.sessions.items():
            if session.busy and session.waiting and not session.closed:
                wait = self._waits.get(name)
                _, _, sql = self._inflight.get(name, (0, None, session.pending_sql or ""))
                kind, blockers, lock = (wait.kind, wait.blockers, wait.lock) if wait else ("lock", (), "")
                links[name] = chain.Link(name, blockers, kind, self._fuller_lock(session, wait) or lock, sql)
        active = {tid for tid, trx in self.monitor.transactions().items() if trx.active}
        threads = {s.name: s.thread_id for s in self.sessions.values()}

        def state_of(name: str) -> str:
            if name not in self.sessions:
                return chain.OUTSIDE
            if self.sessions[name].busy:
                return chain.RUNNING
            return chain.IDLE_IN_TRANSACTION if threads[name] in active else chain.IDLE

        return chain.follow([s.name for s in waiting], links, state_of)

    def _fuller_lock(self, session: Session, wait: ev.Waiting | None) -> str:
        """The waited-for record, when the wait was told without it: with one other active
        transaction the holder is deduced without InnoDB's lock tables, which name the record.
        Read once the run is stuck, where the 0.1 s their cache needs costs nothing."""
        if wait is None or wait.kind != ROW or wait.lock.endswith(")") or not self.options.name_blockers:
            return ""
        names = self._names()
        info = self.monitor.describe_from_lock_tables(session.thread_id)
        same = tuple(names.get(t, f"connection {t}") for t in info.blockers) == wait.blockers
        return info.lock if same else ""

    def _where(self, index: int) -> str:
        if index < len(self.scenario.steps):
            return f"{self.scenario.path}:{self.scenario.steps[index].line} (step {index + 1})"
        return f"{self.scenario.path} (end)"
