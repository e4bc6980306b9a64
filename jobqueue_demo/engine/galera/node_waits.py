"""Lock waits seen on each node of a Galera cluster, each from that node's own status.

Every node numbers its connections itself, so two sessions on two nodes can share a thread id.
A session on node N > 1 is therefore known to the run by an id that carries its node
(`on_node`); this monitor splits such ids, asks that node's WaitMonitor (over a control
connection to that node), and answers in the run's ids. Node 1's ids are plain. What reads
every node (the lock table, the record locks each transaction holds, the transactions a stuck
run looks at) goes through `by_node`, and a deadlock is read on its victim's node: InnoDB's
deadlocks are each node's own, since a cycle across nodes is no lock wait but a conflict
Galera settles when the write sets meet.
"""

from __future__ import annotations

from dataclasses import replace

from ..mysql.waits import WaitMonitor, record_locks_held
from ..types import TrxStatus, WaitInfo, on_node, split


class NodeWaits:
    """A WaitMonitor per node behind the one interface the runner uses."""

    def __init__(self, monitors: dict[int, WaitMonitor]):
        self.monitors = monitors
        self.primary = monitors[1]

    def __getattr__(self, name: str):
        return getattr(self.primary, name)

    def blocked(self, thread_ids: list[int]) -> dict[int, str]:
        by_node: dict[int, list[int]] = {}
        for run_id in thread_ids:
            node, thread_id = split(run_id)
            by_node.setdefault(node, []).append(thread_id)
        out = {}
        for node, ids in by_node.items():
            for thread_id, kind in self.monitors[node].blocked(ids).items():
                out[on_node(node, thread_id)] = kind
        return out

    def by_node(self) -> tuple[tuple[int, WaitMonitor], ...]:
        return tuple(sorted(self.monitors.items()))

    def record_locks_held(self) -> dict[int, int]:
        return record_locks_held(self)

    def transactions(self) -> dict[int, TrxStatus]:
        return {
            on_node(node, thread_id): status
            for node, monitor in self.by_node()
            for thread_id, status in monitor.transactions().items()
        }

    def describe_from_lock_tables(self, run_id: int) -> WaitInfo:
        node, thread_id = split(run_id)
        return _on_node(node, self.monitors[node].describe_from_lock_tables(thread_id))

    def alive(self, run_id: int) -> bool:
        node, thread_id = split(run_id)
        return self.monitors[node].alive(thread_id)

    def describe(self, run_id: int, kind: str, schema: str) -> WaitInfo:
        node, thread_id = split(run_id)
        return _on_node(node, self.monitors[node].describe(thread_id, kind, schema))


def _on_node(node: int, info: WaitInfo) -> WaitInfo:
    """A node's wait in the run's ids (its blockers follow its edges)."""
    return replace(info, blockers=(), edges=tuple(replace(e, thread=on_node(node, e.thread)) for e in info.edges))
