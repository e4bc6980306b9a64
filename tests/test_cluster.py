"""The embedded Galera cluster: nodes that form one primary component with no state transfer,
replicate, and leave nothing behind however the process that started them ends."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobqueue_demo.engine import control
from jobqueue_demo.engine.cluster import EmbeddedCluster, parse_node_dsns
from jobqueue_demo.engine.leftovers import sweep_dirs
from jobqueue_demo.errors import ServerError, UsageError

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def cluster():
    try:
        with EmbeddedCluster(3) as started:
            yield started
    except ServerError as exc:
        pytest.skip(f"the embedded Galera cluster cannot start on this machine: {exc}")


def value(conn, sql: str):
    return control.text(control.rows(conn, sql)[0][-1])


def test_three_nodes_form_one_primary_component_without_state_transfer(cluster):
    for node in cluster.nodes:
        conn = node.params.connect()
        try:
            assert value(conn, "SHOW GLOBAL STATUS LIKE 'wsrep_cluster_size'") == "3"
            assert value(conn, "SHOW GLOBAL STATUS LIKE 'wsrep_cluster_status'") == "Primary"
            assert value(conn, "SELECT @@port") == str(node.port)
        finally:
            conn.close()
        log = node.log.read_text()
        assert "state transfer needed: no" in log
        assert "wsrep_sst_" not in log  # no SST script ever ran


def test_a_write_on_node_1_is_read_on_node_3(cluster):
    one, three = (cluster.nodes[i].params.connect() for i in (0, 2))
    try:
        control.execute(one, "CREATE DATABASE jqd_cluster_probe")
        control.execute(one, "CREATE TABLE jqd_cluster_probe.t (id INT PRIMARY KEY) ENGINE=InnoDB")
        control.execute(one, "INSERT INTO jqd_cluster_probe.t VALUES (7)")
        control.execute(three, "SET SESSION wsrep_sync_wait = 1")
        assert value(three, "SELECT id FROM jqd_cluster_probe.t") == "7"
    finally:
        control.execute(one, "DROP DATABASE IF EXISTS jqd_cluster_probe")
        one.close()
        three.close()


def test_node_dsns_are_read_in_node_order():
    params = parse_node_dsns(["node2=mysql://root@127.0.0.1:3307", "node1=mysql://root@127.0.0.1:3306"])
    assert [p.port for p in params] == [3306, 3307]


@pytest.mark.parametrize(
    "dsns",
    [["mysql://root@127.0.0.1"], ["node1=mysql://a@h", "node1=mysql://b@h"], ["node1=mysql://a@h", "node3=mysql://a@h"]],
)
def test_bad_node_dsns_are_usage_errors(dsns):
    with pytest.raises(UsageError):
        parse_node_dsns(dsns)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone for our purpose; its parent (init) reaps it later.
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(")")[-1].split()[0] != "Z"


def test_sigkill_of_the_starter_ends_every_node_and_the_sweep_removes_its_directory(cluster):
    code = (
        "from jobqueue_demo.engine.cluster import EmbeddedCluster\n"
        "c = EmbeddedCluster(2)\n"
        "c.start()\n"
        "print(c.workdir, *[n.process.pid for n in c.nodes], flush=True)\n"
        "import time; time.sleep(600)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    workdir = None
    try:
        first, *pids = child.stdout.readline().split()
        workdir = Path(first)
        assert all(alive(int(pid)) for pid in pids)
        child.send_signal(signal.SIGKILL)
        child.wait()
        deadline = time.monotonic() + 10
        while any(alive(int(pid)) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(alive(int(pid)) for pid in pids)
        swept = sweep_dirs(folder=workdir.parent)
        assert str(workdir) in [found.name for found in swept.found]
        assert not workdir.exists()
    finally:
        child.kill()
        child.wait()
        if workdir is not None and workdir.name.startswith("jobqueue-demo-"):
            shutil.rmtree(workdir, ignore_errors=True)


def test_stop_removes_every_node_and_its_directory(cluster):
    workdir, pids = cluster.workdir, [n.process.pid for n in cluster.nodes]
    cluster.stop()
    assert not workdir.exists()
    assert not any(alive(pid) for pid in pids)
