"""A MariaDB Galera cluster behind the seam: MariaDB's engine (mysql/engine.py), and what a
run and the workers do across the nodes (run_nodes.py, queue.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..mysql.engine import MySqlEngine
from ..types import ServerInfo

if TYPE_CHECKING:  # the seam's Protocols, for annotations only: the seam loads this module
    from ..seam import ClusterRun, Queue, Scratch


class GaleraEngine(MySqlEngine):
    def queue(self) -> Queue:
        """The workers' SQL, and the queue on each node (queue.GaleraQueue)."""
        from .queue import GaleraQueue

        return GaleraQueue()

    def cluster_run(self, server: ServerInfo, scratch: Scratch, answer_timeout: float, nodes: set[int]) -> ClusterRun:
        """The run across the nodes its sessions are on (run_nodes.NodesRun)."""
        from .run_nodes import NodesRun

        return NodesRun(server, scratch, answer_timeout, nodes)


ENGINE = GaleraEngine()
