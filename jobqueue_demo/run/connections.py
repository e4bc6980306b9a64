"""A run's connections: the scratch database with its control connection, the per-run user's
connection for setup and invariants, and one connection per scenario session.

Opened once, reset between explore's schedules, and closed leaving nothing behind.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING

from ..engine.server import ServerInfo
from ..engine.session import Session
from ..engine.node_waits import NodeWaits, on_node, split
from ..engine.waits import WaitMonitor
from ..errors import ScenarioError, ServerError, UsageError
from ..scenario.model import Scenario, SessionSpec
from .settle import POLL_FIRST_S, POLL_MAX_S

if TYPE_CHECKING:  # explore's resets only: imported where they are made, off run's start-up
    from ..engine.snapshot import Survey, TableSnapshot


class Connections:
    """Everything a run holds open on the server; `sessions` by name, replaced on reconnect."""

    def __init__(self, scenario: Scenario, server: ServerInfo, step_timeout: float, settings: tuple[str, ...]):
        if scenario.cluster and len(server.nodes) < scenario.cluster:
            raise UsageError(f"{scenario.path} needs a {scenario.cluster}-node Galera cluster; this server is not one")
        self.scenario = scenario
        self.server = server
        self.step_timeout = step_timeout
        self.settings = settings  # --matrix: SET SESSION assignments for every session, after its own
        self.seam = server.seam
        self.scratch = self.seam.scratch(
            server, confine=server.seam.confines(server), multi_statements=True, answer_timeout=step_timeout
        )
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
        # A cluster's other nodes number their threads themselves: a session there is
        # killed from a control connection to its own node, opened when first needed.
        self._node_controls: dict[int, object] = {}
        # On a cluster, why a session's transaction was rolled back with ERROR 1213.
        self._causes = _galera().RollbackCauses() if server.nodes else None

    def open(self) -> None:
        self.scratch.open()
        self.control = self.scratch.conn
        self.monitor = self.seam.wait_monitor(self.control, self.server)
        if self._nodes():
            others = {node: self.seam.wait_monitor(self._control_of(node), self.server) for node in self._nodes()}
            self.monitor = NodeWaits({1: self.monitor, **others})
        self.user_conn = self.seam.user_connection(self.scratch, self.step_timeout)
        if self.scenario.setup:
            self._run_setup()
        if self.server.nodes:
            self._check_replicable()
        for spec in self.scenario.sessions:
            self.sessions[spec.name] = self._connect(spec)
        self._mark_causes()

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
        if self.server.nodes:
            # Node 1 first applies what the other nodes committed: the invariants read it, and
            # a reset running beside a late write set would be rolled back by it (ERROR 1213).
            _galera().catch_up(self.control, self._cluster_seqno())
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

    def _mark_causes(self) -> None:
        """What each session's node has counted before the run is none of its rollbacks."""
        if self._causes is not None:
            for node in self._session_nodes():
                self._causes.mark(node, self._control_of(node))

    def rollback_cause(self, session: Session) -> str | None:
        """On a cluster, what rolled back the session's transaction with ERROR 1213 (a
        deadlock, a lost certification or a brute-force abort: engine/galera.py), read on its
        node; None on one server."""
        if self._causes is None:
            return None
        node, _ = split(session.thread_id)
        return self._causes.cause(node, self._control_of(node))

    def catch_up(self) -> None:
        """On a cluster, every session's node applies what node 1 committed (explore's reset),
        so the next schedule starts from the same rows on every node."""
        nodes = self._nodes()
        if not nodes:
            return
        galera = _galera()
        seqno = galera.last_committed(self.control)
        for node in nodes:
            galera.catch_up(self._control_of(node), seqno)

    def apply_before_commit(self, session: Session) -> None:
        """On a cluster, let the session's node apply what the run's nodes committed so far,
        before the session commits. Otherwise a COMMIT that conflicts with an earlier step's
        commit on another node races that commit's replication: in most runs the node applies
        it first and aborts the session's transaction (a brute-force abort), in some (6 of 40
        here) the session's write set is certified first and fails certification; the same
        error either way, but a lesson's transcript would change from run to run. A node kept
        from applying (a table lock on it) is waited for at most the step timeout; the COMMIT
        then meets what it meets."""
        if self._causes is None:
            return
        galera = _galera()
        node, _ = split(session.thread_id)
        others = self._session_nodes() - {node}
        seqno = max((galera.last_committed(self._control_of(other)) for other in others), default=0)
        galera.applied(self._control_of(node), seqno, self.step_timeout)

    def _nodes(self) -> set[int]:
        """The cluster nodes other than node 1 that sessions of this run are on."""
        return self._session_nodes() - {1}

    def _session_nodes(self) -> set[int]:
        """The cluster nodes the sessions of this run are on (no `node`: node 1)."""
        return {s.node or 1 for s in self.scenario.sessions}

    def _cluster_seqno(self) -> int:
        """The newest write set any node of the run's sessions has applied (read from the
        tool's own connections: a session whose transaction lost certification answers its
        next statement with ERROR 1213)."""
        return max([_galera().last_committed(self._control_of(node)) for node in self._nodes()], default=0)

    def _control_of(self, node: int):
        """The tool's own connection to a cluster node, opened when first needed."""
        if node == 1:
            return self.control
        if node not in self._node_controls:
            self._node_controls[node] = self.server.nodes[node - 1].connect(database=None)
        return self._node_controls[node]

    def reconnect(self, name: str) -> None:
        self.sessions[name].close()
        self.sessions[name] = self._connect(self.specs[name])

    def _run_setup(self) -> None:
        failure = self.seam.run_script(self.user_conn, self.scenario.setup)
        if failure is not None:
            raise ScenarioError(self.scenario.path, f"setup failed: {failure}")

    def _check_replicable(self) -> None:
        """Galera replicates the rows of InnoDB tables with a primary key only; a lesson whose
        tables lack either would show nodes silently apart, so it is refused."""
        found = _galera().unreplicable_tables(self.control, self.database)
        if found:
            tables = ", ".join(found)
            raise ScenarioError(
                self.scenario.path, f"setup: on a Galera cluster every table needs ENGINE=InnoDB and a PRIMARY KEY: {tables}"
            )

    def _connect(self, spec: SessionSpec) -> Session:
        if spec.node is None:
            return self.seam.session(spec.name, self.scratch, self._settings_sql(spec), self.step_timeout)
        # The run's user and database are made on node 1: the node applies them before the
        # session logs in (connecting first was refused now and then: no such user yet).
        galera = _galera()
        galera.catch_up(self._control_of(spec.node), galera.last_committed(self.control))
        node = self.server.nodes[spec.node - 1]
        params = replace(self.scratch.session_params, host=node.host, port=node.port, unix_socket=node.unix_socket)
        conn = params.connect(database=self.database, answer_timeout=self.step_timeout)
        settings = self._settings_sql(spec)
        if settings:
            conn.query(settings.encode())
        return Session(spec.name, conn, on_node(spec.node, conn.thread_id()))

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

    def close(self, quiet: bool = False) -> None:
        """Leave nothing behind: end every session's transaction, drop the scratch database
        and the per-run user. `quiet` when already failing: the first error is the one told.

        A session stuck in a lock wait would not notice its socket closing, and its locks
        would hold DROP DATABASE, so sessions are killed from the control connection.
        """
        for session in self.sessions.values():
            if not session.closed and self.control is not None:
                self.kill_quietly(session.thread_id)
            session.close()
        for conn in self._node_controls.values():
            conn.close()
        self._node_controls.clear()
        self.end_orphans(wait=False)  # DROP DATABASE waits for their locks anyway
        if self.user_conn is not None:
            try:
                self.user_conn.close()
            except Exception:  # already gone; nothing more to release
                pass
            self.user_conn = None
        self.control = None
        self.scratch.close(quiet)

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
        node, thread_id = split(run_id)
        self.seam.execute(self._control_of(node), statement(thread_id))

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
        for node, conn in self._node_controls.items():
            names[on_node(node, self.seam.connection_id(conn))] = "the control connection"
        return names


def _galera():
    """engine/galera.py, imported on a cluster's paths only: off a single server's start-up."""
    from ..engine import galera

    return galera
