"""A run's connections: the scratch database with its control connection, the per-run user's
connection for setup and invariants, and one connection per scenario session.

Opened once, reset between explore's schedules, and closed leaving nothing behind.
"""

from __future__ import annotations

import time

from ..engine.seam import ClusterRun, Scratch, Session, TableSnapshot, WaitMonitor, uninterrupted
from ..engine.types import ServerInfo, Survey, split
from ..errors import ScenarioError, ServerError, UsageError
from ..scenario.model import Scenario, SessionSpec
from .settle import POLL_FIRST_S, POLL_MAX_S


def new_scratch(server: ServerInfo, step_timeout: float) -> Scratch:
    """A run's scratch database and per-run user, not yet made (Scratch.open makes them)."""
    return server.seam.scratch(server, confine=server.seam.confines(server), answer_timeout=step_timeout, several_statements=True)


class Connections:
    """Everything a run holds open on the server; `sessions` by name, replaced on reconnect."""

    def __init__(self, scenario: Scenario, server: ServerInfo, step_timeout: float, settings: tuple[str, ...],
                 watch: bool = True, scratch: Scratch | None = None):
        if scenario.cluster and len(server.nodes) < scenario.cluster:
            raise UsageError(f"{scenario.path} needs a {scenario.cluster}-node Galera cluster; this server is not one")
        self.scenario = scenario
        self.server = server
        self.step_timeout = step_timeout
        self.settings = settings  # --matrix: SET SESSION assignments for every session, after its own
        # Without the engine's wait monitor (a spec's run on PostgreSQL asks the server as
        # isolationtester does): its first questions cost a new database's catalog reads.
        self.watch = watch
        self.seam = server.seam
        # Opened and closed by the caller when given (RunOptions.scratch): this run empties it.
        self.shared = scratch is not None
        self.scratch: Scratch = scratch if scratch is not None else new_scratch(server, step_timeout)
        self.database = self.scratch.name
        self.control = None
        # Runs the scenario's own setup and invariants, as the sessions' (per-run) user.
        self.user_conn = None
        self.monitor: WaitMonitor | None = None
        self.sessions: dict[str, Session] = {}
        self.specs = {s.name: s for s in scenario.sessions}
        # Threads of sessions disconnected during a lock wait: the server ends them only when
        # the wait ends, so they are killed before the database is reset or dropped.
        self._orphans: list[int] = []
        # On a cluster, what the run does across its nodes (engine/galera/run_nodes.py).
        self.cluster: ClusterRun | None = None

    def open(self) -> None:
        if not self.shared:
            self.scratch.open()
        self.control = self.scratch.conn
        nodes = {s.node or 1 for s in self.scenario.sessions}
        self.cluster = self.seam.cluster_run(self.server, self.scratch, self.step_timeout, nodes) if self.server.nodes else None
        if self.watch:
            self.monitor = self.seam.wait_monitor(self.control, self.server)
            if self.cluster:
                self.monitor = self.cluster.watch(self.monitor)
        self.user_conn = self.seam.user_connection(self.scratch, self.step_timeout)
        if self.scenario.setup:
            self._run_setup()
        if self.cluster:
            self.cluster.check_replicable(self.scenario.path)
        for spec in self.scenario.sessions:
            self.sessions[spec.name] = self._connect(spec)
        if self.cluster:
            self.cluster.mark_causes()

    def recreate_database(self) -> None:
        """Drop the scratch database and build it again from the setup; sessions must be idle."""
        self.scratch.recreate()
        if self.scenario.setup:
            self._run_setup()

    def survey(self) -> Survey:
        # Invariants run between schedules on the per-run user's connection, several
        # statements a query: their SQL may change the schema as a step's may.
        sqls = [s.sql for _, s in self.scenario.statements()] + [i.sql for i in self.scenario.invariants]
        return self.seam.survey(self.scratch, sqls)

    def snapshot(self, tables: tuple[str, ...]) -> TableSnapshot:
        # The restore writes the scenario's tables, so whatever fires on them runs with the
        # scenario's own rights: it goes through the per-run user's connection.
        return self.seam.snapshot(self.scratch, tables, self.user_conn)

    def restart_sessions(self) -> None:
        """Give every session a clean slate, as if newly connected (the seam's `reset_sessions`:
        cheaper than a new connection). A session that is gone, or still inside a statement,
        gets a new connection instead.
        """
        if self.cluster:
            self.cluster.settle_before_reset()
        self.end_orphans()
        for session in self.sessions.values():
            if session.busy and not session.closed:
                self.kill_quietly(session.thread_id)
                session.close()
        live = [(name, s) for name, s in self.sessions.items() if not s.closed]
        reset = self.seam.reset_sessions([(s, self._settings_sql(self.specs[name])) for name, s in live], self.scratch)
        kept = {name for (name, _), ok in zip(live, reset) if ok}
        for name, session in list(self.sessions.items()):
            if name not in kept:
                session.close()  # killed by a fault step: the server has already ended it
                self.sessions[name] = self._connect(self.specs[name])

    def rollback_cause(self, session: Session) -> str | None:
        """On a cluster, what rolled back the session's transaction with ERROR 1213 (a
        deadlock, a lost certification or a brute-force abort); None on one server."""
        return self.cluster.rollback_cause(session) if self.cluster else None

    def catch_up(self) -> None:
        """On a cluster, every session's node applies what node 1 committed (explore's reset)."""
        if self.cluster:
            self.cluster.catch_up()

    def before_statement(self, session: Session, sql: str) -> None:
        """On a cluster, what a statement waits for before it is sent (a COMMIT: its node
        applies what the others committed, engine/galera/run_nodes.py)."""
        if self.cluster:
            self.cluster.before_statement(session, sql)

    def reconnect(self, name: str) -> None:
        self.sessions[name].close()
        self.sessions[name] = self._connect(self.specs[name])

    def _run_setup(self) -> None:
        failure = self.seam.run_script(self.user_conn, self.scenario.setup)
        if failure is not None:
            raise ScenarioError(self.scenario.path, f"setup failed: {failure}")

    def _connect(self, spec: SessionSpec) -> Session:
        if spec.node is None:
            return self.seam.session(spec.name, self.scratch, self._settings_sql(spec), self.step_timeout)
        return self.cluster.connect(spec.name, spec.node, self._settings_sql(spec))

    def _settings_sql(self, spec: SessionSpec) -> str | None:
        """The statement giving a session its settings, None when it has none."""
        dialect = self.server.dialect
        settings = []
        if spec.isolation:
            settings.append(dialect.isolation_setting(spec.isolation))
        if spec.innodb_lock_wait_timeout is not None:
            settings.append(dialect.row_lock_timeout(spec.innodb_lock_wait_timeout))
        if spec.lock_wait_timeout is not None:
            settings.append(dialect.metadata_lock_timeout(spec.lock_wait_timeout))
        if spec.wsrep_sync_wait is not None:
            settings.append(f"wsrep_sync_wait = {spec.wsrep_sync_wait}")
        settings += self.settings
        return dialect.set_session(settings) if settings else None

    @uninterrupted()
    def close(self, quiet: bool = False) -> None:
        """Leave nothing behind: end every session's transaction, drop the scratch database
        and the per-run user. `quiet` when already failing: the first error is the one told.

        A session stuck in a lock wait would not notice its socket closing, and its locks
        would hold DROP DATABASE, so a session with a statement in flight is killed from the
        control connection; an idle one ends as its socket closes (a round trip fewer each).
        """
        for session in self.sessions.values():
            if not session.closed and session.busy and self.control is not None:
                self.kill_quietly(session.thread_id)
            session.close()
        if self.cluster:
            self.cluster.close()
        self.end_orphans(wait=False)  # DROP DATABASE waits for their locks anyway
        if self.user_conn is not None:
            try:
                self.user_conn.close()
            except Exception:  # already gone; nothing more to release
                pass
            self.user_conn = None
        self.control = None
        if not self.shared:
            self.scratch.close(quiet)
            return
        try:
            self.scratch.recreate()  # for the next run on it: a stuck one's leftovers too
        except Exception:
            if not quiet:
                raise

    # -- ending sessions from the control connection -------------------------------

    def orphan(self, thread_id: int) -> None:
        """A session whose socket was dropped during a lock wait, to be killed before a reset."""
        self._orphans.append(thread_id)

    def end_orphans(self, wait: bool = True) -> None:
        for thread_id in self._orphans:
            self.kill_quietly(thread_id)
            if wait:
                self.wait_gone(thread_id, time.perf_counter() + self.step_timeout)
        self._orphans.clear()

    def kill_quietly(self, thread_id: int) -> None:
        try:
            self._on_its_node(thread_id, self.server.dialect.kill_connection)
        except ServerError:
            pass  # already gone

    def kill_statement(self, session: Session) -> None:
        self._on_its_node(session.thread_id, self.server.dialect.kill_statement)

    def kill_connection(self, session: Session) -> None:
        self._on_its_node(session.thread_id, self.server.dialect.kill_connection)

    def _on_its_node(self, run_id: int, statement) -> None:
        """`statement(thread id)` on the control connection of the thread's own node."""
        if self.cluster:
            self.cluster.execute_on_node(run_id, statement)
        else:
            self.seam.execute(self.control, statement(split(run_id)[1]))

    def execute(self, sql: str) -> None:
        """The tool's own SQL on the control connection."""
        self.seam.execute(self.control, sql)

    def wait_gone(self, thread_id: int, deadline: float) -> bool:
        """Whether the server has ended the connection before `deadline`."""
        interval = POLL_FIRST_S
        while time.perf_counter() < deadline:
            if not self.monitor.alive(thread_id):
                return True
            time.sleep(interval)
            interval = min(interval * 2, POLL_MAX_S)
        return False

    def names(self) -> dict[int, str]:
        """Thread id -> how a transcript names it."""
        names = {s.thread_id: s.name for s in self.sessions.values()}
        names[self.seam.connection_id(self.control)] = "the control connection"
        if self.cluster:
            names.update(self.cluster.control_ids())
        return names
