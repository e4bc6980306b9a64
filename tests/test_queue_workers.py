"""workers --queue on real servers: the file's SQL run by the crew, judged by the tool's own tables."""

from __future__ import annotations

import json
import re

import pytest
from conftest import ROOT, cli, dsn_env, hostile_queue_file

from jobqueue_demo import api

QUEUES = ROOT / "queues"
ENGINES = ("embedded", "pg_embedded")


def run(server, name: str, **options):
    values = {"workers": 4, "jobs": 120, "work_ms": 2.0, "isolation": "read-committed", **options}
    return api.run_workers(api.workers_config(queue=api.load_queue(str(QUEUES / name)), **values), server)


@pytest.mark.parametrize("engine", ENGINES)
def test_read_then_mark_claims_jobs_twice_and_its_locking_fix_does_not(request, engine):
    server = request.getfixturevalue(engine)
    broken = run(server, "read-then-mark-bug.yaml")
    assert broken.done_twice > 0 and not broken.invariants_hold
    assert "done twice" in broken.verdict
    fixed = run(server, "read-then-mark-fixed.yaml")
    assert fixed.invariants_hold, fixed.verdict
    assert (fixed.completed, fixed.lost, fixed.done_twice, fixed.left_claimed) == (120, 0, 0, 0)
    assert fixed.effects == 120


def test_a_killed_workers_job_stays_claimed_until_a_rescuer_puts_it_back(pg_embedded, tmp_path):
    rescued = run(pg_embedded, "river.yaml", kill=1)
    assert rescued.invariants_hold, rescued.verdict
    assert rescued.killed == 1 and rescued.completed == 120
    # The killed worker had run the job's effect: it ran again once rescued, no second completion.
    assert rescued.external_duplicates == 1
    text = (QUEUES / "river.yaml").read_text()
    no_rescue = tmp_path / "river-no-rescue.yaml"
    no_rescue.write_text(text[: text.index("rescue:")])
    stuck = api.run_workers(
        api.workers_config(queue=api.load_queue(str(no_rescue)), workers=4, jobs=120, work_ms=2.0, kill=1), pg_embedded
    )
    assert (stuck.left_claimed, stuck.lost, stuck.completed) == (1, 0, 119)
    assert "1 left claimed" in stuck.verdict


def test_enqueuing_while_workers_claim_completes_every_job(embedded):
    summary = run(embedded, "read-then-mark-fixed.yaml", jobs=200, enqueue_during=True)
    assert summary.invariants_hold, summary.verdict
    assert summary.completed == 200


def test_deadlocks_are_retried_and_counted_by_statement(embedded, tmp_path):
    # Two jobs claimed per transaction and completed in opposite orders by alternate workers:
    # each completion waits for the other's rows, and InnoDB picks a victim.
    path = tmp_path / "crossed.yaml"
    path.write_text(
        "title: crossed\nmodels: a test of retries\nsetup: |\n"
        "  CREATE TABLE t (id INT PRIMARY KEY, n INT NOT NULL DEFAULT 0);\n"
        "  CREATE TABLE c (k INT PRIMARY KEY, n INT NOT NULL);\n"
        "  INSERT INTO c VALUES (1, 0), (2, 0)\n"
        "enqueue: INSERT INTO t (id) VALUES (:job)\n"
        "claim: SELECT id FROM t WHERE n = 0 ORDER BY id LIMIT :batch FOR UPDATE SKIP LOCKED\n"
        "complete:\n"
        "  - UPDATE c SET n = n + 1 WHERE k = 1 + MOD(:job + :worker, 2)\n"
        "  - UPDATE c SET n = n + 1 WHERE k = 2 - MOD(:job + :worker, 2)\n"
        "  - UPDATE t SET n = 1 WHERE id = :job\n"
    )
    summary = api.run_workers(
        api.workers_config(queue=api.load_queue(str(path)), workers=4, jobs=150, work_ms=1.0), embedded
    )
    assert summary.completed == 150 and summary.done_twice == summary.lost == summary.left_claimed == 0
    assert summary.deadlocks > 0
    assert sum(summary.retried_by_statement.values()) == summary.deadlocks + summary.lock_wait_timeouts
    assert set(summary.retried_by_statement) <= {"complete[0]", "complete[1]"}
    # On a single server a deadlock between the file's own statements is a finding: exit 1.
    assert not summary.invariants_hold and summary.verdict.startswith("deadlocks: complete[")
    assert sum(summary.deadlocked_by_statement.values()) == summary.deadlocks


def test_the_delayed_job_reserve_deadlocks_with_its_delete_and_its_skip_locked_fix_does_not(embedded):
    broken = run(embedded, "delayed-job-bug.yaml", jobs=300, work_ms=1.0, isolation="repeatable-read")
    assert broken.deadlocked_by_statement and not broken.invariants_hold, broken.verdict
    # The DELETE chosen as the victim: the job stays locked by its worker and runs again (a job
    # whose completion is the victim twice runs again once more, and counts once).
    victims = broken.deadlocked_by_statement.get("complete[0]", 0)
    assert (broken.run_again > 0) == (victims > 0) and broken.run_again <= victims
    assert broken.completed == 300 and broken.done_twice == 0
    fixed = run(embedded, "delayed-job-fixed.yaml", jobs=300, work_ms=1.0, isolation="repeatable-read")
    assert fixed.invariants_hold, fixed.verdict
    assert fixed.deadlocked_by_statement == {} and fixed.run_again == 0


def test_failed_jobs_go_through_the_files_fail_and_retry(embedded, tmp_path):
    from jobqueue_demo.workers.own_record import injected_failure

    expected = sum(injected_failure(job, 0.1) for job in range(1, 101))
    retried = run(embedded, "delayed-job-fixed.yaml", jobs=100, fail_rate=0.1)
    assert retried.invariants_hold, retried.verdict
    # fail: sets failed_at, which the claim skips: only retry: makes those jobs claimable again.
    assert (retried.failures_injected, retried.fail_runs, retried.completed) == (expected, expected, 100)
    text = (QUEUES / "delayed-job-fixed.yaml").read_text()
    no_retry = tmp_path / "no-retry.yaml"
    no_retry.write_text(text[: text.index("retry:")])
    ended = api.run_workers(api.workers_config(queue=api.load_queue(str(no_retry)), jobs=100, fail_rate=0.1), embedded)
    assert ended.invariants_hold, ended.verdict
    assert (ended.failed_jobs, ended.completed, ended.lost) == (expected, 100 - expected, 0)


def test_fail_rate_needs_a_file_with_fail():
    result = cli("workers", "--queue", "delayed-job-bug", "--fail-rate", "0.1")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "jobqueue-demo: --fail-rate needs a queue file with fail: (what your queue runs when a job fails)"
    )


def test_a_hostile_file_cannot_fake_the_verdict_by_writing_the_tools_record(pg_embedded, tmp_path):
    # The loader refuses the name jqd_...; a PL/pgSQL body spells it at run time and deletes each
    # job's earlier completions, so the table shows every job done once. The workers' own count
    # (shared memory, out of the SQL's reach) still has the double claims, and the run fails on
    # the difference.
    path = hostile_queue_file(tmp_path)
    summary = api.run_workers(
        api.workers_config(queue=api.load_queue(str(path)), workers=4, jobs=200, work_ms=2.0, isolation="read-committed"),
        pg_embedded,
    )
    assert not summary.invariants_hold
    assert summary.record_tampered and summary.record_tampered.startswith("jqd_done holds 1 row(s) for job")
    assert summary.verdict.startswith("verdict refused: jqd_done")
    assert summary.done_twice > 0  # counted by the workers, whatever the table says


def test_the_files_sql_runs_confined_to_the_scratch_database(embedded, tmp_path):
    path = tmp_path / "escape.yaml"
    path.write_text(
        "title: reaches outside\nmodels: an adversarial file\n"
        "setup: |\n  CREATE TABLE q (id INT PRIMARY KEY);\n  CREATE DATABASE jqdtest_5ca1ab1e\n"
        "enqueue: INSERT INTO q (id) VALUES (:job)\n"
        "claim: SELECT id FROM q ORDER BY id LIMIT :batch FOR UPDATE SKIP LOCKED\n"
        "complete: DELETE FROM q WHERE id = :job\n"
    )
    result = cli("workers", "--queue", str(path), "-w", "2", "--jobs", "5", env=dsn_env(embedded))
    assert result.returncode == 2, result.stderr
    assert f"{path}:5: setup[1]: ERROR 1044" in result.stderr and "Traceback" not in result.stderr


def test_workers_queue_json_on_the_command_line(embedded):
    result = cli(
        "workers", "--queue", str(QUEUES / "skip-locked.yaml"), "-w", "2", "--jobs", "30", "--json", env=dsn_env(embedded)
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["strategy"] == "queue skip-locked" and summary["completed"] == 30
    assert (summary["done_twice"], summary["left_claimed"], summary["lost"]) == (0, 0, 0)


def test_a_bad_queue_file_is_one_line_and_exit_2(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("title: t\nsetup: CREATE TABLE q (id INT)\nenqueue: INSERT INTO q VALUES (:jb)\nclaim: SELECT 1\ncomplete: SELECT 1\n")
    result = cli("workers", "--queue", str(path))
    assert result.returncode == 2
    assert result.stderr.strip() == f"jobqueue-demo: {path}:3: enqueue: unknown parameter :jb (enqueue takes :job)"


def test_a_queue_file_over_a_galera_cluster_retries_its_certification_failures(galera):
    # Worker i on node i mod 3 + 1: SKIP LOCKED claims on different nodes collide at COMMIT (1213).
    summary = run(galera, "read-then-mark-fixed.yaml", workers=6, jobs=150, isolation="repeatable-read")
    assert summary.invariants_hold, summary.verdict
    assert summary.completed == 150
    # Every node's copy of every table in the scratch database, the file's and the tool's, is the same.
    assert (summary.nodes, summary.nodes_agree) == (3, True) and summary.verdict.endswith("on every node")
    assert sum(summary.retried_by_statement.values()) == summary.deadlocks + summary.lock_wait_timeouts


def test_bench_runs_queue_files_next_to_the_strategies_and_the_ceiling(embedded):
    config = api.sweep_config(
        "skip-locked", "2", "read-committed", 60, False, 1, 1.0, 1, 0, f"skip-locked,{QUEUES / 'solid-queue.yaml'}"
    )
    assert config.runs == 4
    result = api.sweep(config, embedded)
    assert [row.run.strategy for row in result.rows] == ["own-rows", "skip-locked", "queue skip-locked", "queue solid-queue"]
    assert all(row.run.invariants_hold and row.run.completed == 60 for row in result.rows)
    assert all(row.ceiling_share > 0 for row in result.rows)


def test_a_stalled_queue_file_shows_what_its_workers_wait_for(embedded, tmp_path):
    path = tmp_path / "stall.yaml"
    path.write_text(
        "title: a completion that sleeps holding the only lock\nmodels: a test of the stall picture\nengines: [mysql]\n"
        "setup: CREATE TABLE q (id INT PRIMARY KEY, done INT NOT NULL DEFAULT 0)\n"
        "enqueue: INSERT INTO q (id) VALUES (:job)\n"
        "claim: SELECT id FROM q WHERE done = 0 ORDER BY id LIMIT :batch FOR UPDATE\n"
        "complete:\n  - UPDATE q SET done = 1 WHERE id = :job\n  - SELECT SLEEP(3)\n"
    )
    result = cli("workers", "--queue", str(path), "-w", "3", "--jobs", "5", "--stall", "1", env=dsn_env(embedded))
    assert result.returncode == 1, result.stderr
    assert "no job completed for 1 s (0 of 5 done); what the workers wait for:" in result.stderr
    # InnoDB names the waited-for record's key in some of its lock reports and not in others.
    assert re.search(r"waits for X on q\.PRIMARY record (1|\(not shown by the server\)), held \(X\) by worker", result.stderr), result.stderr
