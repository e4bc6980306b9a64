"""The workers on a Galera cluster: spread over the nodes, checked on every node, and compared
with the same workers on one node of the same cluster and on a single server.

On a cluster a SKIP LOCKED claim is a lock on one node only: two workers on two nodes can
claim the same job, both write its effect, and the later one is rolled back at COMMIT
(ERROR 1213, counted with the deadlocks: aborted when its node applied the other's write
set, or its own write set failed certification). The database keeps one completion per
job; the effects table shows the work done twice. What the crew reads on each node is the
engine's (engine/galera/queue.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..engine.seam import seam_of
from ..engine.types import ServerInfo

if TYPE_CHECKING:
    from ..engine.seam import NodeState


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
            f"{label:<22} {s.jobs_per_s:>8.1f} jobs/s  rolled back (ERROR 1213) {s.deadlocks:>4}"
            f"  effects run twice {s.external_duplicates:>4}"
            for label, s in rows
        ]

    def as_dict(self) -> dict:
        return {"spread": self.spread.as_dict(), "one_node": self.one_node.as_dict(), "single": self.single.as_dict()}


def compare(config, server: ServerInfo, run, on_progress=None) -> ClusterComparison:
    """`run(config, server, on_progress)` three times: over every node, on node 1, on a single server."""
    spread = _whole(run(config, server, on_progress))
    one_node = _whole(run(config, replace(server, nodes=server.nodes[:1]), None))
    with seam_of(server.engine).embedded() as single_server:
        single = _whole(run(config, single_server, None))
    return ClusterComparison(spread, one_node, single)


def _whole(summary):
    """A run a stop signal cut short compares with nothing: the signal goes on."""
    if summary.stopped is not None:
        raise summary.stopped
    return summary
