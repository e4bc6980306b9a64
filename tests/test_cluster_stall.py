"""A stalled workers run on the embedded Galera cluster: the picture reads every node, names each
thread with its node (workers, outside connections, the nodes' appliers) and gives the nodes'
flow control when one holds back write sets. Each stall is made on purpose, in about a second."""

from __future__ import annotations

import json
import threading

import pytest
from conftest import cli, run_cli
from test_cluster import node_dsns

from jobqueue_demo.engine.mysql import control
from jobqueue_demo.errors import WorkersStuck
from jobqueue_demo.workers.crew import WorkersConfig, run_workers
from jobqueue_demo.workers.stall import FLOW_CONTROL_NOTE

# Worker i is on node i mod 3 + 1, so each node has two of these six. Under FOR UPDATE one of
# them claims job 1 and works 10 s in its transaction; the other waits for it on that node
# (no write set leaves a node before a COMMIT, so no node sees another's claim).
ONE_WAITS_ON_EACH_NODE = dict(strategy="for-update", workers=6, jobs=12, work_ms=10_000, stall_s=1)
CLI_ARGS = ("workers", "-s", "for-update", "-w", "6", "--jobs", "12", "--work-ms", "10000", "--stall", "1")


def pairs_by_node(waits) -> dict[int, set[str]]:
    """node -> the two names in each wait, checked to be on that node."""
    found = {}
    for waiter, blocker in waits:
        node = int(waiter.rpartition("@")[2])
        assert blocker.endswith(f"@{node}"), (waiter, blocker)
        found[node] = {waiter, blocker}
    return found


EACH_NODES_PAIR = {n: {f"worker {n - 1}@{n}", f"worker {n + 2}@{n}"} for n in (1, 2, 3)}


def test_a_stall_names_each_waiting_worker_and_its_blocker_on_its_node(galera):
    with pytest.raises(WorkersStuck) as stuck:
        run_workers(WorkersConfig(**ONE_WAITS_ON_EACH_NODE), galera)
    diagnosis = stuck.value.diagnosis
    assert len(diagnosis.waits) == 3
    assert pairs_by_node((w.waiter, w.blocker) for w in diagnosis.waits) == EACH_NODES_PAIR
    assert {(w.table, w.mode, w.blocking_mode) for w in diagnosis.waits} == {("jobs", "X", "X")}
    # Nothing was written, so no node has write sets to apply: no flow-control line.
    assert [f.node for f in diagnosis.flow] == [1, 2, 3]
    assert not any(f.queued for f in diagnosis.flow)
    assert len(diagnosis.lines()) == 3 and all(" waits for X on jobs." in line for line in diagnosis.lines())


class HeldOnNode2:
    """An outside connection on node 2 that locks job `job` once the workers run, out of
    replication (wsrep_on = OFF), so no write set can abort it: node 2's applier waits for it.
    Released when the run drops its scratch database, which flow control would hold up."""

    def __init__(self, cluster, job: int):
        self.nodes = cluster.params
        self.job = job
        self.conn = self.nodes[1].connect()
        self.thread = self.conn.thread_id()
        self.taken = False
        self.done = threading.Event()
        self.watcher = threading.Thread(target=self._release_at_drop)

    def __enter__(self):
        self.watcher.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.done.set()
        self.watcher.join()
        self.conn.close()

    def take(self, progress) -> None:
        """The run's progress callback: the first call comes as the workers start."""
        if self.taken:
            return
        (database,) = {control.text(db) for (db,) in control.rows(
            self.conn, "SELECT DB FROM information_schema.PROCESSLIST WHERE DB LIKE 'jqd\\_%'"
        )}
        for sql in ("SET SESSION wsrep_on = OFF", f"USE `{database}`", "BEGIN"):
            control.execute(self.conn, sql)
        assert control.rows(self.conn, f"SELECT id FROM jobs WHERE id = {self.job} FOR UPDATE"), progress
        self.taken = True

    def _release_at_drop(self) -> None:
        one = self.nodes[0].connect()
        try:
            while not self.done.wait(0.05):
                if control.rows(one, "SELECT 1 FROM information_schema.PROCESSLIST WHERE INFO LIKE 'DROP DATABASE%'"):
                    control.execute(self.conn, "ROLLBACK")
                    self.done.set()
        finally:
            one.close()


def test_a_node_whose_applier_waits_stops_every_node_and_the_picture_says_so(galera, galera_cluster):
    # Job 100 of 200 is locked on node 2 as the workers start; the worker on node 1 or 3 that
    # completes it sends a write set node 2's applier cannot apply, the write sets after it
    # queue on node 2 until flow control pauses every node's commits.
    with HeldOnNode2(galera_cluster, job=100) as held, pytest.raises(WorkersStuck) as stuck:
        run_workers(WorkersConfig(workers=4, jobs=200, work_ms=2, stall_s=1), galera, held.take)
    diagnosis = stuck.value.diagnosis
    applier = [w for w in diagnosis.waits if w.waiter == "the applier of node 2"]
    assert [(w.blocker, w.table, w.index) for w in applier] == [
        (f"thread {held.thread}@2 (not a worker of this run)", "jobs", "PRIMARY")
    ]
    assert "WHERE id IN (100)" in applier[0].statement
    two = diagnosis.flow[1]
    assert (two.node, two.requested, two.active) == (2, True, True) and two.recv_queue > 0
    (flow,) = [line for line in diagnosis.lines() if line.startswith("flow control: ")]
    assert f"node 2: requested, active, receive queue {two.recv_queue:,}, send queue" in flow
    assert flow.endswith(FLOW_CONTROL_NOTE)


def test_the_cli_prints_a_stalled_cluster_runs_picture_and_exits_1(galera_cluster):
    done = cli(*CLI_ARGS, *node_dsns(galera_cluster))
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stderr.splitlines()
    assert lines[1] == "-- no job completed for 1 s (0 of 12 done); what the workers wait for:"
    waits = [line.removeprefix("--   ").split(" (trx active")[0] for line in lines[2:5]]
    blockers = [line.rpartition(" by ")[2] for line in lines[2:5]]
    assert pairs_by_node(zip(waits, blockers)) == EACH_NODES_PAIR
    assert lines[5:] == ["jobqueue-demo: no job completed for 1 s (0 of 12 done)"]
    assert done.stdout == ""


def test_the_cli_gives_a_stalled_cluster_runs_picture_as_json(galera_cluster):
    done = run_cli(*CLI_ARGS, "--json", *node_dsns(galera_cluster))
    assert isinstance(done.exception, WorkersStuck)
    (line,) = done.stdout.splitlines()
    stuck = json.loads(line)
    assert stuck["stuck"] == "no job completed for 1 s (0 of 12 done)"
    waits = stuck["diagnosis"]["waits"]
    assert pairs_by_node((w["waiter"], w["blocker"]) for w in waits) == EACH_NODES_PAIR
    assert [f["node"] for f in stuck["diagnosis"]["flow"]] == [1, 2, 3]
    assert set(stuck["diagnosis"]["flow"][0]) == {
        "node", "active", "requested", "recv_queue", "send_queue", "paused", "state"
    }
