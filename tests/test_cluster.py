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
from conftest import cli, write_lesson

from jobqueue_demo import api as core
from jobqueue_demo.engine.galera.cluster import EmbeddedCluster, parse_node_dsns
from jobqueue_demo.engine.leftovers import sweep_dirs
from jobqueue_demo.engine.mysql import control
from jobqueue_demo.engine.mysql import errors as mysql_errors
from jobqueue_demo.errors import ScenarioError, ServerError, UsageError
from jobqueue_demo.run import events as ev
from jobqueue_demo.scenario.loader import load_scenario

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def cluster(galera_cluster):
    return galera_cluster


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
        control.execute(one, "CREATE DATABASE probe_cluster_replication")
        control.execute(one, "CREATE TABLE probe_cluster_replication.t (id INT PRIMARY KEY) ENGINE=InnoDB")
        control.execute(one, "INSERT INTO probe_cluster_replication.t VALUES (7)")
        control.execute(three, "SET SESSION wsrep_sync_wait = 1")
        assert value(three, "SELECT id FROM probe_cluster_replication.t") == "7"
    finally:
        control.execute(one, "DROP DATABASE IF EXISTS probe_cluster_replication")
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
        "from jobqueue_demo.engine.galera.cluster import EmbeddedCluster\n"
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
        # Any run's sweep may take it (other runs sweep this folder too): one that holds its
        # marker's lock while removing it makes ours pass it by, so its end is waited for.
        sweep_dirs(folder=workdir.parent)
        deadline = time.monotonic() + 10
        while workdir.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
            sweep_dirs(folder=workdir.parent)
        assert not workdir.exists()
    finally:
        child.kill()
        child.wait()
        if workdir is not None and workdir.name.startswith("jobqueue-demo-"):
            shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="module")
def on_cluster(galera):
    return galera


def errors_of(report) -> dict[str, int]:
    return {
        f"{e.session}: {e.sql}": e.result.error.errno
        for e in report.events
        if isinstance(e, ev.Completed) and e.result.error is not None
    }


def test_skip_locked_on_two_nodes_claims_job_1_twice_and_fails_at_commit(on_cluster):
    report = core.run(core.load("cluster-skip-locked"), on_cluster, 10.0)
    assert not report.mismatches
    assert errors_of(report) == {"B: COMMIT;": mysql_errors.ER_LOCK_DEADLOCK}


@pytest.mark.parametrize(
    "name", ["cluster-claim-one-node", "cluster-claim-update", "cluster-idempotency", "cluster-stale-read"]
)
def test_the_fixes_and_the_stale_read_hold_on_the_cluster(on_cluster, name):
    report = core.run(core.load(name), on_cluster, 10.0)
    assert not report.mismatches, report.mismatches


def test_the_one_node_fix_has_no_error_and_the_update_fix_fails_before_the_email(on_cluster):
    assert errors_of(core.run(core.load("cluster-claim-one-node"), on_cluster, 10.0)) == {}
    report = core.run(core.load("cluster-claim-update"), on_cluster, 10.0)
    sql = [e.sql for e in report.events if isinstance(e, ev.Completed)]
    failed = next(i for i, e in enumerate(report.events) if isinstance(e, ev.Completed) and e.result.error)
    first_mail = next(i for i, e in enumerate(report.events) if isinstance(e, ev.Completed) and "sent_mail" in e.sql)
    assert failed < first_mail, sql


def test_a_session_on_a_node_the_server_lacks_is_refused(tmp_path):
    with pytest.raises(ScenarioError, match="node 4 of a 3-node cluster"):
        load_scenario(write_lesson(tmp_path, "cluster: 3\nsessions: {A: {node: 4}}"))
    with pytest.raises(ScenarioError, match="say how many with 'cluster: N'"):
        load_scenario(write_lesson(tmp_path, "sessions: {A: {node: 2}}"))


def test_a_cluster_lesson_refuses_a_single_dsn_in_one_line():  # no cluster needed
    done = cli("run", "cluster-skip-locked", "--dsn", "mysql://root@127.0.0.1:9/test")
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "needs a 3-node Galera cluster" in done.stderr


def test_a_cluster_on_postgresql_is_refused_in_one_line():  # no cluster needed
    done = cli("--engine", "postgresql", "run", "skip-locked", "--cluster", "3")
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip().count("\n") == 0 and "Galera cluster is MariaDB's" in done.stderr


def test_the_transcript_names_each_session_with_its_node(cluster):  # skips where none starts
    done = cli("run", "cluster-skip-locked", timeout=120)
    assert done.returncode == 0, done.stderr
    assert "A@1> BEGIN;" in done.stdout and "B@2> COMMIT;" in done.stdout and "M@3> INSERT" in done.stdout
    assert "embedded 3-node Galera cluster" in done.stdout


def test_stop_removes_every_node_and_its_directory(cluster):
    two = EmbeddedCluster(2)
    two.start()
    workdir, pids = two.workdir, [n.process.pid for n in two.nodes]
    two.stop()
    assert not workdir.exists()
    assert not any(alive(pid) for pid in pids)


def test_workers_spread_over_the_nodes_double_the_effects_but_not_the_completions(galera):
    from jobqueue_demo.workers.cluster import compare
    from jobqueue_demo.workers.crew import WorkersConfig, run_workers

    compared = compare(WorkersConfig(workers=4, jobs=120, work_ms=2.0), galera, run_workers)
    spread = compared.spread
    assert spread.nodes == 3 and spread.nodes_agree is True
    assert spread.invariants_hold and spread.completed == 120 and spread.duplicated == 0
    # Two workers on two nodes claim the same job: one loses certification after its effect.
    assert spread.deadlocks > 0 and spread.external_duplicates > 0
    for alone in (compared.one_node, compared.single):
        assert alone.nodes == 1 and alone.invariants_hold
        assert alone.deadlocks == 0 and alone.external_duplicates == 0


def test_explore_finds_the_email_sent_twice_across_two_nodes(cluster):  # skips where none starts
    done = cli("explore", "cluster-skip-locked-explore", "--sample", "600", "--seed", "1", timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "embedded 3-node Galera cluster" in done.stdout
    assert "\"no job's email sent twice\" violated" in done.stdout
    # The losers' 1213s are named as the nodes counted them: no deadlock among them.
    assert "at line 60 aborted by a write set replicated from another node (brute-force abort)" in done.stdout
    assert "chosen as the victim" not in done.stdout


def node_dsns(cluster) -> list[str]:
    return [f"--dsn=node{i}=mysql://root@localhost/?unix_socket={p.unix_socket}" for i, p in enumerate(cluster.params, 1)]


def test_every_cluster_lesson_verifies_on_an_existing_cluster_named_node_by_node(cluster):
    lessons = sorted(str(p) for p in (ROOT / "scenarios").glob("cluster-*.yaml"))
    done = cli("verify", *lessons, *node_dsns(cluster))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count(": ok (") == len(lessons) >= 6


@pytest.mark.parametrize(
    "dsns, message",
    [
        (["--dsn", "mysql://root@127.0.0.1:9/a", "--dsn", "mysql://root@127.0.0.1:9/b"], "--dsn given more than once"),
        (["--dsn", "node1=mysql://root@127.0.0.1:9/a", "--dsn", "mysql://root@127.0.0.1:9/b"], "not both"),
        (["--dsn", "node1=mysql://root@127.0.0.1:9/a"], "names 1 node(s)"),
    ],
)
def test_bad_node_dsns_on_the_command_line_are_one_line(dsns, message):
    done = cli("run", "cluster-skip-locked", *dsns)
    assert done.returncode == 2 and message in done.stderr and done.stderr.count("\n") == 1, done.stderr


def on_nodes(title: str, steps: str, sessions: str = "A: {node: 1}, B: {node: 2}, C: {node: 2}") -> str:
    """A cluster lesson on a jobs table of two queued jobs; `steps` as the YAML list under `steps:`."""
    return (
        f"title: {title}\ncluster: 3\nsetup: |\n"
        "  CREATE TABLE jobs (id INT PRIMARY KEY, state VARCHAR(10) NOT NULL) ENGINE=InnoDB;\n"
        "  INSERT INTO jobs VALUES (1, 'queued'), (2, 'queued');\n"
        f"sessions: {{{sessions}}}\nsteps:\n{steps}"
    )


def lesson_at(folder: Path, text: str):
    path = folder / "lesson.yaml"
    path.write_text(text)
    return load_scenario(str(path))


# A holds job 1 on node 1, B on node 2, and C on node 2 waits for B.
THREE_CLAIMS = """  - A: BEGIN;
  - A: SELECT id FROM jobs WHERE id = 1 FOR UPDATE;
  - B: BEGIN;
  - B: SELECT id FROM jobs WHERE id = 1 FOR UPDATE;
    expect: {waits: false, rows: [[1]]}
  - C: BEGIN;
  - C: SELECT id FROM jobs WHERE id = 1 FOR UPDATE;
"""
WAIT_ON_NODE_2 = on_nodes(
    "a wait on node 2",
    THREE_CLAIMS
    + """    expect: {waits: true, rows: [[1]]}
  - B: COMMIT;
    expect: ok
  - C: COMMIT;
    expect: ok
  - A: COMMIT;
    expect: ok
""",
)


def test_a_wait_is_seen_on_its_own_node_and_names_its_blocker(tmp_path, galera):
    report = core.run(lesson_at(tmp_path, WAIT_ON_NODE_2), galera, 10.0)
    assert not report.mismatches, report.mismatches
    waiting = [e for e in report.events if isinstance(e, ev.Waiting)]
    # A's lock on node 1 is not seen on node 2; B's is, by C, and B is named as the holder.
    assert [(e.session, e.blockers) for e in waiting] == [("C", ("B",))]


def test_a_table_galera_cannot_replicate_is_refused_in_one_line(tmp_path, cluster):
    path = tmp_path / "nopk.yaml"
    path.write_text(
        "title: t\ncluster: 3\nsetup: CREATE TABLE log (line TEXT) ENGINE=InnoDB;\n"
        "sessions: {A: {node: 2}}\nsteps:\n  - A: SELECT 1;\n"
    )
    done = cli("run", str(path))
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "needs ENGINE=InnoDB and a PRIMARY KEY: log" in done.stderr


def test_record_stamps_a_cluster_lesson_as_verified_on_a_cluster(embedded):  # no cluster needed
    import dataclasses
    import datetime

    from jobqueue_demo import api

    on = datetime.date(2026, 12, 4)
    three = dataclasses.replace(embedded, nodes=(embedded.params,) * 3)
    assert api.verified_line(three, on) == f"{embedded.label} (3-node Galera cluster) on 2026-12-04"
    assert api.verified_line(embedded, on) == f"{embedded.label} on 2026-12-04"


def test_a_machine_without_the_cached_template_builds_it_and_starts(galera_cluster, tmp_path, monkeypatch):
    """The first cluster on a machine bootstraps one node into a fresh cache; every later start
    copies it. `galera_cluster` first: a machine where no cluster starts skips here too."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    with EmbeddedCluster(2) as fresh:
        conn = fresh.nodes[1].params.connect()
        try:
            assert value(conn, "SHOW GLOBAL STATUS LIKE 'wsrep_cluster_size'") == "2"
        finally:
            conn.close()
    (grastate,) = tmp_path.glob("jobqueue-demo/*-galera/grastate.dat")
    assert "seqno:   -1" not in grastate.read_text()


# --- what a run reads on each session's own node ------------------------------------------

DEADLOCK_ON_NODE_2 = on_nodes(
    "a deadlock on node 2",
    """  - A: BEGIN;
  - A: SELECT id FROM jobs WHERE id = 2 FOR UPDATE;
  - B: BEGIN;
  - C: BEGIN;
  - B: UPDATE jobs SET state = 'b' WHERE id = 1;
  - C: UPDATE jobs SET state = 'c' WHERE id = 2;
  - locks
  - B: UPDATE jobs SET state = 'b' WHERE id = 2;
    expect: {waits: true}
  - C: UPDATE jobs SET state = 'c' WHERE id = 1;
    expect: {error: deadlock}
  - B: ROLLBACK;
  - C: ROLLBACK;
  - A: ROLLBACK;
""",
)


@pytest.fixture(scope="module")
def deadlock_on_node_2(tmp_path_factory, galera):
    return core.run(lesson_at(tmp_path_factory.mktemp("node2"), DEADLOCK_ON_NODE_2), galera, 10.0, show_locks=True)


def test_a_deadlock_on_node_2_is_read_on_node_2(deadlock_on_node_2):
    report = deadlock_on_node_2
    assert not report.mismatches, report.mismatches
    (victim,) = [e for e in report.events if isinstance(e, ev.Completed) and e.result.error is not None]
    assert victim.result.error.errno == mysql_errors.ER_LOCK_DEADLOCK and victim.rollback == "deadlock"
    cycle = victim.deadlock
    assert cycle is not None, "the cycle is read on the victim's node"
    assert {p.session for p in cycle.parties} == {"B", "C"}
    assert cycle.name(cycle.victim) == victim.session


def test_show_locks_and_the_locks_step_read_each_session_on_its_node(deadlock_on_node_2):
    taken = {(e.session, e.index): e.locked for e in deadlock_on_node_2.events if isinstance(e, ev.LocksTaken)}
    assert taken[("A", 1)] > 0 and taken[("B", 4)] > 0 and taken[("C", 5)] > 0
    (shown,) = [e for e in deadlock_on_node_2.events if isinstance(e, ev.LocksShown)]
    assert {row[0] for row in shown.rows} == {"A", "B", "C"}


def test_the_transcript_names_the_node_in_the_cycle_and_the_lock_table(deadlock_on_node_2):
    from jobqueue_demo.render.transcript import event_lines, prompted

    prompts = {"A": "A@1", "B": "B@2", "C": "C@2"}
    text = "\n".join(
        line.text for event in deadlock_on_node_2.events for line in event_lines(prompted(event, prompts))
    )
    assert "-- deadlock: B@2 -> C@2 -> B@2" in text or "-- deadlock: C@2 -> B@2 -> C@2" in text
    assert "\n B@2 " in text and "\n C@2 " in text  # the lock table's rows


STUCK_ON_NODE_2 = on_nodes("stuck on node 2", THREE_CLAIMS + "  - C: COMMIT;\n")


def test_a_stuck_run_reads_every_node_and_names_it(tmp_path, galera):
    from jobqueue_demo.errors import StuckError

    with pytest.raises(StuckError) as stuck:
        core.run(lesson_at(tmp_path, STUCK_ON_NODE_2), galera, 10.0)
    message = str(stuck.value)
    assert "C@2 waits for B@2 (row lock jobs PRIMARY X (1)" in message, message
    # B's open transaction is on node 2: read there, it is idle in a transaction, not idle.
    assert message.endswith("which is idle in a transaction, so nothing will release its locks"), message


# B is aborted when node 2 applies A's write set (S's read waits for that): at its next
# statement, not a COMMIT.
BRUTE_FORCE_ABORT = on_nodes(
    "a brute-force abort",
    """  - A: BEGIN;
  - B: BEGIN;
  - A: UPDATE jobs SET state = 'a' WHERE id = 1;
  - B: UPDATE jobs SET state = 'b' WHERE id = 1;
    expect: {waits: false, affected: 1}
  - A: COMMIT;
    expect: ok
  - S: SELECT state FROM jobs WHERE id = 1;
    expect: {rows: [[a]]}
  - B: SELECT state FROM jobs WHERE id = 2;
    expect: {error: deadlock}
  - B: SELECT state FROM jobs WHERE id = 1;
    expect: {rows: [[a]]}
""",
    sessions="A: {node: 1}, B: {node: 2}, S: {node: 2, wsrep_sync_wait: 1}",
)


def test_a_brute_force_abort_is_told_as_one_not_as_a_deadlock(tmp_path, galera, galera_cluster):
    import json

    scenario = lesson_at(tmp_path, BRUTE_FORCE_ABORT)
    report = core.run(scenario, galera, 10.0)
    assert not report.mismatches, report.mismatches
    (aborted,) = [e for e in report.events if isinstance(e, ev.Completed) and e.result.error is not None]
    assert (aborted.session, aborted.rollback, aborted.deadlock) == ("B", "brute-force abort", None)
    done = cli("run", scenario.path, *node_dsns(galera_cluster))
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        "-- B@2's transaction was aborted by a conflicting write set replicated from another node "
        "(Galera brute-force abort): its whole transaction was rolled back"
    ) in done.stdout
    assert "deadlock victim" not in done.stdout
    lines = cli("run", scenario.path, "--format", "json", *node_dsns(galera_cluster)).stdout.splitlines()
    (failed,) = [r for r in map(json.loads, lines) if r["event"] == "statement" and "error" in r]
    assert failed["error"]["rolled_back_by"] == "brute-force abort"
    assert not any(json.loads(line)["event"] == "deadlock" for line in lines)


# --- the workers' reads and kills on each node ------------------------------------------------


def test_a_workers_thread_is_seen_and_killed_on_its_own_node(galera):
    from jobqueue_demo.engine.types import on_node
    from jobqueue_demo.workers.crew import Scratch

    with Scratch(galera) as scratch:
        scratch.prepare(3)
        scratch.nodes.wait_for_jobs()
        worker = galera.nodes[1].connect(database=scratch.name)
        try:
            on_two = on_node(2, worker.thread_id())
            assert scratch.threads_present([on_two]) == {on_two}
            scratch.kill_threads([on_two])
            deadline = time.monotonic() + 10
            while scratch.threads_present([on_two]) and time.monotonic() < deadline:
                time.sleep(0.01)
            assert scratch.threads_present([on_two]) == set()
            with pytest.raises(ServerError):
                control.rows(worker, "SELECT 1")  # its own node ended it
        finally:
            worker.close()


def test_workers_killed_on_a_cluster_are_watched_on_their_nodes_and_every_node_checked(galera):
    from jobqueue_demo.workers.crew import WorkersConfig, run_workers

    # Worker i is on node i mod 3 + 1: of two killed among three, one at least is not on node 1.
    summary = run_workers(WorkersConfig(workers=3, jobs=90, work_ms=3.0, kill=2), galera)
    assert summary.nodes == 3 and summary.nodes_agree is True
    assert summary.killed == 2 and [w.state for w in summary.per_worker].count("killed") == 2
    assert all(ms is not None for ms in summary.notice_ms)
    assert summary.invariants_hold and summary.completed == 90 and summary.lost == 0
    # Each killed worker held its claimed job, which another worker then completed.
    assert summary.reclaimed == 2


def test_each_cause_of_a_1213_has_its_own_note():  # no cluster needed: the note for each cause
    from jobqueue_demo.engine.mysql.errors import MySqlError
    from jobqueue_demo.engine.types import Result
    from jobqueue_demo.render.transcript import event_lines

    error = Result(error=MySqlError(mysql_errors.ER_LOCK_DEADLOCK, "40001", "Deadlock found"))
    notes = {}
    for cause in (None, "deadlock", "certification failure", "brute-force abort"):
        event = ev.Completed(0, "B@2", "COMMIT;", None, error, 0.0, rollback=cause)
        notes[cause] = [line.text for line in event_lines(event)][-1]
    assert notes[None] == notes["deadlock"] == "-- B@2 was chosen as the deadlock victim: its whole transaction was rolled back"
    assert notes["certification failure"].startswith("-- B@2's write set failed certification")
    assert notes["brute-force abort"].startswith("-- B@2's transaction was aborted by a conflicting write set")
