"""The workers' queue on a Galera cluster, node by node: what the crew reads and does on each
node besides the workers' own claims (mysql/queue.py holds those, and the single server's).

Every node counts its own row-lock waits and numbers its own threads, so a worker's thread is
watched, and killed, on the node it talks to: the crew knows it by an id that carries its
node (node_waits.on_node). After the run each node is read once it has applied every write
set committed anywhere (`wsrep_sync_wait`), so what one node holds can be set against the
others'. A stalled run reads every node's lock waits, its appliers' with its workers', and
every node's flow control: on a cluster one node's stuck applier stops every node's commits.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from ..mysql import control
from ..mysql.queue import MySqlQueue
from ..mysql.scratch import literal, quote
from ..types import on_node, split
from .node import FlowControl, appliers, catch_up, flow_control, last_committed


@dataclass(frozen=True)
class ClusterLockWaits:
    """The lock waits of every node, in engine/mysql/lock_waits.py's row form, each thread id one
    that carries its node (node_waits.on_node)."""

    rows: list[tuple[tuple, str | None]]
    appliers: frozenset[int]  # the nodes' applier threads, which wait and block as workers do


class _OnNode:
    """One node's connection where the queue's run-wide reads take a scratch database."""

    def __init__(self, conn, server):
        self.conn = conn
        self.server = server

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
            self._conns[node] = _OnNode(self.server.nodes[node - 1].connect(database=None), self.server)
        return self._conns[node]

    def _numbers(self) -> range:
        return range(1, len(self.server.nodes) + 1)

    def lock_wait_count(self) -> int:
        """InnoDB's row-lock waits summed over the nodes (each counts only its own)."""
        return sum(self.queue.lock_wait_count(self._on(node)) for node in self._numbers())

    def sessions_present(self, session_ids: list[int]) -> set[int]:
        """Which of these threads (ids that carry their node) their node still lists."""
        present = set()
        for node, ids in _by_node(session_ids).items():
            present |= {ids[t] for t in self.queue.sessions_present(self._on(node), list(ids))}
        return present

    def lock_waits(self, session_ids: list[int]) -> ClusterLockWaits:
        """Every lock wait of these threads (ids that carry their node) and of every node's
        appliers, each read on its own node: a node's lock tables show its own threads only."""
        by_node = _by_node(session_ids)
        rows: list[tuple[tuple, str | None]] = []
        threads_of_appliers: set[int] = set()
        for node in self._numbers():
            own_appliers = appliers(self._on(node).conn)
            threads_of_appliers |= {on_node(node, t) for t in own_appliers}
            for row, mode in self.queue.lock_waits(self._on(node), [*by_node.get(node, ()), *own_appliers]):
                rows.append(((_on(node, row[0]), _on(node, row[1]), *row[2:]), mode))
        return ClusterLockWaits(rows, frozenset(threads_of_appliers))

    def flow_control(self) -> list[FlowControl]:
        return [flow_control(self._on(node).conn, node) for node in self._numbers()]

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

    def copies(self) -> list[NodeState]:
        """Each node's checksum of every table in the scratch database (a queue file's run: its
        tables are the file's, so all of them are compared, the tool's among them)."""
        with self._synced(1) as conn:
            names = [
                control.text(row[0]) for row in control.rows(
                    conn, "SELECT table_name FROM information_schema.tables WHERE table_schema = "
                    f"{literal(self.database)} ORDER BY table_name",
                )
            ]
        tables = ", ".join(f"{quote(self.database)}.{quote(name)}" for name in names)
        return [self._checksums(node, tables) for node in self._numbers()]

    def _checksums(self, node: int, tables: str) -> NodeState:
        with self._synced(node) as conn:
            sums = control.rows(conn, f"CHECKSUM TABLE {tables}")
        return NodeState(node, 0, 0, ",".join(control.text(row[1]) for row in sums))

    def _synced(self, node: int):
        """A connection of its own whose reads first wait until the node has applied every
        write set committed anywhere (wsrep_sync_wait = 1); the shared one stays unsynced,
        since the progress reads must not wait for replication."""
        conn = self.server.nodes[node - 1].connect(database=None)
        control.execute(conn, "SET SESSION wsrep_sync_wait = 1")
        return contextlib.closing(conn)


def _by_node(session_ids: list[int]) -> dict[int, dict[int, int]]:
    """node -> {the node's own thread id: the run's id} of ids that carry their node."""
    by_node: dict[int, dict[int, int]] = {}
    for session_id in session_ids:
        node, thread_id = split(session_id)
        by_node.setdefault(node, {})[thread_id] = session_id
    return by_node


def _on(node: int, thread) -> int | None:
    """A thread id of a lock-table row as the run's id; None stays (no client thread)."""
    return None if thread is None else on_node(node, int(thread))


@dataclass(frozen=True)
class GaleraQueue(MySqlQueue):
    """MariaDB's queue, and what the crew asks of each node of a cluster."""

    def on_nodes(self, server, database: str) -> QueueNodes:
        """The queue on each node (QueueNodes): its counters, the workers' threads by node, a
        stall's lock waits and flow control, and what each node holds at the end."""
        return QueueNodes(self, server, database)


@dataclass(frozen=True)
class NodeState:
    """What one node holds after the run, read once it has applied everything."""

    node: int
    done: int
    completions: int
    checksum: str
