"""What a run does across a cluster's nodes beyond what it does on one server (seam.py's
ClusterRun): sessions on their own nodes, the tool's control connection to each, the lock
waits read on every node, a COMMIT's node first applying what the others committed, and why
a 1213 rolled a transaction back.

Every node numbers its threads itself, so a session on node N > 1 is known to the run by an id
that carries its node (types.on_node); statements about it go to its own node.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace

from ...errors import ScenarioError
from ..mysql.session import MySqlSession
from ..types import on_node, split
from . import node as galera
from .node_waits import NodeWaits

# A COMMIT on a Galera node first lets the node apply what the others committed (before_statement).
COMMIT = re.compile(r"^\s*COMMIT\b", re.IGNORECASE)


class NodesRun:
    """The run's view of the cluster: `nodes` are the nodes its sessions are on (1 for none)."""

    def __init__(self, server, scratch, answer_timeout: float, nodes: set[int]):
        self.server = server
        self.scratch = scratch
        self.answer_timeout = answer_timeout
        self.nodes = nodes
        # A session there is killed from a control connection to its own node, opened when first needed.
        self._controls: dict[int, object] = {}
        self._causes = galera.RollbackCauses()

    def watch(self, monitor):
        """The run's wait monitor: node 1's alone, or one per node the sessions are on."""
        others = self.nodes - {1}
        if not others:
            return monitor
        return NodeWaits({1: monitor, **{node: self.server.seam.wait_monitor(self.control_of(node), self.server) for node in others}})

    def check_replicable(self, path: str) -> None:
        """Galera replicates the rows of InnoDB tables with a primary key only; a lesson whose
        tables lack either would show nodes silently apart, so it is refused."""
        found = galera.unreplicable_tables(self.scratch.conn, self.scratch.name)
        if found:
            tables = ", ".join(found)
            raise ScenarioError(path, f"setup: on a Galera cluster every table needs ENGINE=InnoDB and a PRIMARY KEY: {tables}")

    def connect(self, name: str, node: int, settings_sql: str | None) -> MySqlSession:
        """A session's connection to its own node. The run's user and database are made on
        node 1: the node applies them before the session logs in (connecting first was refused
        now and then: no such user yet)."""
        galera.catch_up(self.control_of(node), galera.last_committed(self.scratch.conn))
        where = self.server.nodes[node - 1]
        params = replace(self.scratch.session_params, host=where.host, port=where.port, unix_socket=where.unix_socket)
        conn = params.connect(database=self.scratch.name, answer_timeout=self.answer_timeout)
        if settings_sql:
            conn.query(settings_sql.encode())
        return MySqlSession(name, conn, on_node(node, conn.thread_id()))

    def mark_causes(self) -> None:
        """What each session's node has counted before the run is none of its rollbacks."""
        for node in self.nodes:
            self._causes.mark(node, self.control_of(node))

    def rollback_cause(self, session) -> str | None:
        """What rolled back the session's transaction with ERROR 1213 (a deadlock, a lost
        certification or a brute-force abort: node.py), read on its node."""
        node, _ = split(session.thread_id)
        return self._causes.cause(node, self.control_of(node))

    def catch_up(self) -> None:
        """Every session's node applies what node 1 committed (explore's reset), so the next
        schedule starts from the same rows on every node."""
        others = self.nodes - {1}
        if not others:
            return
        seqno = galera.last_committed(self.scratch.conn)
        for node in others:
            galera.catch_up(self.control_of(node), seqno)

    def settle_before_reset(self) -> None:
        """Node 1 first applies what the other nodes committed: the invariants read it, and a
        reset running beside a late write set would be rolled back by it (ERROR 1213)."""
        seqno = max([galera.last_committed(self.control_of(node)) for node in self.nodes - {1}], default=0)
        galera.catch_up(self.scratch.conn, seqno)

    def before_statement(self, session, sql: str) -> None:
        """Before a COMMIT, let the session's node apply what the run's nodes committed so far.
        Otherwise a COMMIT that conflicts with an earlier step's commit on another node races
        that commit's replication: in most runs the node applies it first and aborts the
        session's transaction (a brute-force abort), in some (6 of 40 here) the session's write
        set is certified first and fails certification; the same error either way, but a
        lesson's transcript would change from run to run. A node kept from applying (a table
        lock on it) is waited for at most the step timeout; the COMMIT then meets what it meets."""
        if not COMMIT.match(sql):
            return
        node, _ = split(session.thread_id)
        seqno = max((galera.last_committed(self.control_of(other)) for other in self.nodes - {node}), default=0)
        galera.applied(self.control_of(node), seqno, self.answer_timeout)

    def execute_on_node(self, run_id: int, statement: Callable[[int], str]) -> None:
        """`statement(thread id)` on the control connection of the thread's own node."""
        node, thread_id = split(run_id)
        self.server.seam.execute(self.control_of(node), statement(thread_id))

    def control_ids(self) -> dict[int, str]:
        """The run's ids of the tool's own connections to the other nodes, named."""
        return {on_node(node, conn.thread_id()): "the control connection" for node, conn in self._controls.items()}

    def control_of(self, node: int):
        """The tool's own connection to a cluster node, opened when first needed."""
        if node == 1:
            return self.scratch.conn
        if node not in self._controls:
            self._controls[node] = self.server.nodes[node - 1].connect(database=None)
        return self._controls[node]

    def close(self) -> None:
        for conn in self._controls.values():
            conn.close()
        self._controls.clear()
