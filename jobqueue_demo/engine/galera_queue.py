"""The workers' queue on a Galera cluster, node by node: what the crew reads and does on each
node besides the workers' own claims (mysql_queue.py holds those, and the single server's).

Every node counts its own row-lock waits and numbers its own threads, so a worker's thread is
watched, and killed, on the node it talks to: the crew knows it by an id that carries its
node (node_waits.on_node). After the run each node is read once it has applied every write
set committed anywhere (`wsrep_sync_wait`), so what one node holds can be set against the
others'.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from . import control
from .galera import catch_up, last_committed
from .node_waits import split


@dataclass(frozen=True)
class NodeState:
    """What one node holds after the run, read once it has applied everything."""

    node: int
    done: int
    completions: int
    checksum: str


class _OnNode:
    """One node's connection where the queue's run-wide reads take a scratch database."""

    def __init__(self, conn):
        self.conn = conn

    def rows(self, sql: str) -> tuple:
        return control.rows(self.conn, sql)

    def close(self) -> None:
        self.conn.close()


class QueueNodes:
    """The tool's own connection to each node of a cluster, opened when first needed; the
    reads a single server answers alone are the queue's own (`queue`: mysql_queue.MySqlQueue),
    asked of each node."""

    def __init__(self, queue, server, database: str):
        self.queue = queue
        self.server = server
        self.database = database
        self._conns: dict[int, _OnNode] = {}

    def close(self) -> None:
        conns, self._conns = self._conns, {}
        for conn in conns.values():
            conn.close()

    def _on(self, node: int) -> _OnNode:
        if node not in self._conns:
            self._conns[node] = _OnNode(self.server.nodes[node - 1].connect(database=None))
        return self._conns[node]

    def _numbers(self) -> range:
        return range(1, len(self.server.nodes) + 1)

    def lock_wait_count(self) -> int:
        """InnoDB's row-lock waits summed over the nodes (each counts only its own)."""
        return sum(self.queue.lock_wait_count(self._on(node)) for node in self._numbers())

    def sessions_present(self, session_ids: list[int]) -> set[int]:
        """Which of these threads (ids that carry their node) their node still lists."""
        by_node: dict[int, dict[int, int]] = {}
        for session_id in session_ids:
            node, thread_id = split(session_id)
            by_node.setdefault(node, {})[thread_id] = session_id
        present = set()
        for node, ids in by_node.items():
            present |= {ids[t] for t in self.queue.sessions_present(self._on(node), list(ids))}
        return present

    def kill(self, session_id: int) -> None:
        """End a worker's thread on its own node; ServerError when it is already gone."""
        node, thread_id = split(session_id)
        control.execute(self._on(node).conn, self.server.dialect.kill_connection(thread_id))

    def settle(self) -> None:
        """Node 1, where the run's checks read, applies what every other node committed."""
        catch_up(self._on(1).conn, max(last_committed(self._on(node).conn) for node in self._numbers()))

    def wait_for_jobs(self) -> None:
        """Every node has the scratch database and its jobs, so no worker connects early."""
        for node in self._numbers()[1:]:
            with self._synced(node) as conn:
                control.rows(conn, f"SELECT COUNT(*) FROM `{self.database}`.jobs")

    def states(self) -> list[NodeState]:
        return [self._state(node) for node in self._numbers()]

    def _state(self, node: int) -> NodeState:
        name = f"`{self.database}`"
        with self._synced(node) as conn:
            done = control.rows(conn, f"SELECT COUNT(*) FROM {name}.jobs WHERE state = 'done'")[0][0]
            completions = control.rows(conn, f"SELECT COUNT(*) FROM {name}.completions")[0][0]
            sums = control.rows(conn, f"CHECKSUM TABLE {name}.jobs, {name}.completions")
        return NodeState(node, int(done), int(completions), ",".join(control.text(row[1]) for row in sums))

    def _synced(self, node: int):
        """A connection of its own whose reads first wait until the node has applied every
        write set committed anywhere (wsrep_sync_wait = 1); the shared one stays unsynced,
        since the progress reads must not wait for replication."""
        conn = self.server.nodes[node - 1].connect(database=None)
        control.execute(conn, "SET SESSION wsrep_sync_wait = 1")
        return contextlib.closing(conn)
