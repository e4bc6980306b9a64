"""The workers on a Galera cluster: spread over the nodes, checked on every node, and compared
with the same workers on one node of the same cluster and on a single server.

On a cluster a SKIP LOCKED claim is a lock on one node only: two workers on two nodes can
claim the same job, both write its effect, and the later one learns at COMMIT that its
write set failed certification (ERROR 1213, counted with the deadlocks). The database keeps
one completion per job; the effects table shows the work done twice.
"""

from __future__ import annotations

from contextlib import closing
from dataclasses import dataclass, replace

from ..engine import control
from ..engine.embedded import embedded_with
from ..engine.server import ServerInfo


@dataclass(frozen=True)
class NodeState:
    """What one node holds after the run, read once it has applied everything."""

    node: int
    done: int
    completions: int
    checksum: str


def _synced(server: ServerInfo, node: int):
    conn = server.nodes[node - 1].connect(database=None)
    control.execute(conn, "SET SESSION wsrep_sync_wait = 1")
    return closing(conn)


def row_lock_waits(server: ServerInfo, conns: dict[int, object]) -> int:
    """InnoDB's row lock waits summed over the nodes (each counts only its own); `conns` keeps
    one connection per node between calls."""
    total = 0
    for node, params in enumerate(server.nodes, 1):
        if node not in conns:
            conns[node] = params.connect(database=None)
        found = control.rows(conns[node], "SHOW GLOBAL STATUS LIKE 'Innodb_row_lock_waits'")
        total += int(control.text(found[0][1])) if found else 0
    return total


def catch_up(server: ServerInfo, database: str) -> None:
    """Wait until every node has the scratch database and its jobs, so no worker connects early."""
    for node in range(2, len(server.nodes) + 1):
        with _synced(server, node) as conn:
            control.rows(conn, f"SELECT COUNT(*) FROM `{database}`.jobs")


def node_states(server: ServerInfo, database: str) -> list[NodeState]:
    states = []
    for node in range(1, len(server.nodes) + 1):
        with _synced(server, node) as conn:
            done = control.rows(conn, f"SELECT COUNT(*) FROM `{database}`.jobs WHERE state = 'done'")[0][0]
            completions = control.rows(conn, f"SELECT COUNT(*) FROM `{database}`.completions")[0][0]
            sums = control.rows(conn, f"CHECKSUM TABLE `{database}`.jobs, `{database}`.completions")
            checksum = ",".join(control.text(row[1]) for row in sums)
        states.append(NodeState(node, int(done), int(completions), checksum))
    return states


def agree(states: list[NodeState]) -> bool:
    """Every node holds the same jobs and completions."""
    return len({(s.done, s.completions, s.checksum) for s in states}) == 1


@dataclass(frozen=True)
class ClusterComparison:
    """One run: the workers spread over the nodes, then on node 1 only, then on a single server."""

    spread: object  # WorkersSummary
    one_node: object
    single: object

    @property
    def invariants_hold(self) -> bool:
        return all(s.invariants_hold for s in (self.spread, self.one_node, self.single))

    def lines(self) -> list[str]:
        rows = [("spread over the nodes", self.spread), ("on node 1 only", self.one_node), ("single server", self.single)]
        return [
            f"{label:<22} {s.jobs_per_s:>8.1f} jobs/s  certification failures and deadlocks {s.deadlocks:>4}"
            f"  effects run twice {s.external_duplicates:>4}"
            for label, s in rows
        ]

    def as_dict(self) -> dict:
        return {"spread": self.spread.as_dict(), "one_node": self.one_node.as_dict(), "single": self.single.as_dict()}


def compare(config, server: ServerInfo, run, on_progress=None) -> ClusterComparison:
    """`run(config, server, on_progress)` three times: over every node, on node 1, on a single server."""
    spread = run(config, server, on_progress)
    one_node = run(config, replace(server, nodes=server.nodes[:1]), None)
    with embedded_with(()) as single_server:
        single = run(config, single_server, None)
    return ClusterComparison(spread, one_node, single)
