"""Worker processes on PostgreSQL: every strategy's invariants, kills, leases, the stall picture.

The same checks as tests/test_workers.py, on the embedded PostgreSQL the test starts and on the
local cluster (127.0.0.1:5432) when one answers. What differs on PostgreSQL is asserted as
such: REPEATABLE READ turns a claim of a row changed since the snapshot into a serialization
failure (40001), which the claim loop counts and retries.
"""

from __future__ import annotations

import json
import time

import pytest

from jobqueue_demo.engine.postgresql import control

from conftest import cli, skip_without_pg
from jobqueue_demo.workers.crew import Scratch, WorkersConfig, check, run_workers
from jobqueue_demo.workers.stall import diagnose
from jobqueue_demo.workers.strategies import REGISTRY
from test_workers import assert_every_job_done_once, interrupted_run

STRATEGIES = tuple(s.name for s in REGISTRY if s.swept)
LOCK_HELD = ("skip-locked", "for-update", "nowait-retry", "update-limit")
ISOLATIONS = ("read-committed", "repeatable-read")


@pytest.mark.parametrize("isolation", ISOLATIONS)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_invariants_hold(pg, strategy, isolation):
    summary = run_workers(WorkersConfig(strategy, isolation, workers=3, jobs=40, work_ms=0.5), pg)
    assert_every_job_done_once(summary)
    assert summary.server.startswith("PostgreSQL")
    assert sum(w.completed for w in summary.per_worker) == summary.jobs
    # PostgreSQL keeps no count of lock waits: the summary says so instead of showing 0.
    assert summary.row_lock_waits is None and summary.row_lock_waits_scope == "not counted by this server"


@pytest.mark.parametrize("isolation", ISOLATIONS)
@pytest.mark.parametrize("strategy", LOCK_HELD)
def test_killed_workers_claims_come_back(pg, strategy, isolation):
    summary = run_workers(WorkersConfig(strategy, isolation, workers=4, jobs=60, work_ms=2, kill=2), pg)
    assert_every_job_done_once(summary)
    assert summary.killed == 2 and summary.reclaimed == 2
    # pg_terminate_backend of the dead worker's backend, and pg_stat_activity no longer listing it
    assert all(ms is not None and ms > 0 for ms in summary.notice_ms)
    assert summary.external_duplicates >= 2


@pytest.mark.parametrize("strategy", ["lease", "lease-heartbeat"])
def test_a_killed_workers_lease_expires_and_its_job_runs_again(pg, strategy):
    config = WorkersConfig(strategy, "repeatable-read", workers=4, jobs=60, work_ms=2, kill=2, lease_ms=150)
    summary = run_workers(config, pg)
    assert_every_job_done_once(summary)
    assert summary.killed == 2 and summary.reclaimed == 2
    assert all(ms is not None and ms >= 100 for ms in summary.rerun_ms)


def test_a_heartbeat_keeps_a_lease_shorter_than_the_job(pg_embedded):
    config = WorkersConfig("lease-heartbeat", "read-committed", workers=3, jobs=6, work_ms=300, lease_ms=200)
    summary = run_workers(config, pg_embedded)
    assert_every_job_done_once(summary)
    assert (summary.leases_lost, summary.external_duplicates) == (0, 0)


def test_idempotency_key_removes_external_duplicates(pg_embedded):
    config = WorkersConfig("skip-locked", "read-committed", workers=4, jobs=60, work_ms=2, kill=2, idempotency_key=True)
    summary = run_workers(config, pg_embedded)
    assert_every_job_done_once(summary)
    assert (summary.effects, summary.external_duplicates) == (summary.jobs, 0)
    assert summary.deduplicated >= 2


def test_batch_claims(pg_embedded):
    summary = run_workers(WorkersConfig("skip-locked", "read-committed", workers=2, jobs=45, batch=4, work_ms=0), pg_embedded)
    assert_every_job_done_once(summary)


def test_the_broken_claim_is_caught_under_read_committed(pg_embedded):
    summary = run_workers(WorkersConfig("no-lock", "read-committed", workers=4, jobs=40, work_ms=2), pg_embedded)
    assert summary.duplicated > 0 and not summary.invariants_hold and summary.lost == 0


def test_repeatable_read_refuses_the_broken_claims_second_update(pg_embedded):
    """On PostgreSQL the second UPDATE of a job fails with 40001 under REPEATABLE READ, before
    the completion: the naive claim loses no job and completes none twice, at a retry's cost."""
    summary = run_workers(WorkersConfig("no-lock", "repeatable-read", workers=4, jobs=40, work_ms=2), pg_embedded)
    assert_every_job_done_once(summary)
    assert summary.serialization_failures > 0
    # Each refused UPDATE came after the job's effect: one repeated effect per failure.
    assert summary.external_duplicates == summary.serialization_failures


def test_update_limit_waits_and_claims_nothing_under_read_committed(pg_embedded):
    """A worker that waited for another's row finds it claimed: no skipping, an empty claim."""
    summary = run_workers(WorkersConfig("update-limit", "read-committed", workers=4, jobs=60, work_ms=2), pg_embedded)
    assert_every_job_done_once(summary)
    assert summary.empty_claims > summary.workers


def test_ceiling_runs_without_contention(pg_embedded):
    summary = run_workers(WorkersConfig("own-rows", "repeatable-read", workers=3, jobs=30, work_ms=0), pg_embedded)
    assert_every_job_done_once(summary)
    assert (summary.serialization_failures, summary.empty_claims) == (0, 3)


def test_the_old_state_layout_runs_too(pg_embedded):
    summary = run_workers(WorkersConfig(workers=2, jobs=20, state_order="done-first"), pg_embedded)
    assert_every_job_done_once(summary)


def test_lost_jobs_are_counted(pg_embedded):
    with Scratch(pg_embedded) as scratch:
        scratch.prepare(3)
        scratch.execute("UPDATE jobs SET state = 'done' WHERE id = 1")
        scratch.execute("INSERT INTO completions (job_id, worker) VALUES (1, 0)")
        scratch.execute("UPDATE jobs SET state = 'done' WHERE id = 2")
        checked = check(scratch, [])
    assert (checked.completed, checked.lost) == (1, 2)


def test_a_stall_is_diagnosed_from_pg_locks(pg):
    """One backend holds a row, a second waits for it, a third queues behind the second."""
    with Scratch(pg) as scratch:
        scratch.prepare(3)
        conns = [pg.params.connect(database=scratch.name) for _ in range(3)]
        try:
            holder, waiter, third = conns
            control.execute(holder, "BEGIN")
            control.execute(holder, "SELECT id FROM jobs WHERE id = 2 FOR UPDATE")
            control.execute(waiter, "BEGIN")
            waiter.pgconn.send_query(b"UPDATE jobs SET state = 'done' WHERE id = 2")
            threads = {c.pgconn.backend_pid: i for i, c in enumerate(conns)}
            _diagnosis_with(scratch, threads, 1)  # the third must queue behind a waiting second
            control.execute(third, "BEGIN")
            third.pgconn.send_query(b"SELECT id FROM jobs WHERE id = 2 FOR UPDATE")
            diagnosis = _diagnosis_with(scratch, threads, 2)
        finally:
            for conn in conns:
                conn.pgconn.finish()
    first, second = sorted(diagnosis.waits, key=lambda w: w.waiter)
    assert (first.waiter, first.blocker, first.table, first.record) == ("worker 1", "worker 0", "jobs", "ctid (0,2)")
    assert first.mode == "ShareLock (transactionid)" and first.blocking_mode == "ExclusiveLock"
    assert (second.waiter, second.blocker, second.mode) == ("worker 2", "worker 1", "AccessExclusiveLock (tuple)")
    assert first.waiter_rows_locked is None and "rows locked" not in diagnosis.lines()[0]
    assert "UPDATE jobs SET state = 'done'" in first.statement


def _diagnosis_with(scratch, threads, waits: int):
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        diagnosis = diagnose(scratch, threads)
        if len(diagnosis.waits) >= waits:
            return diagnosis
        time.sleep(0.05)
    raise AssertionError("the waiters never showed in pg_locks")


def test_cli_workers_on_postgresql_json():
    skip_without_pg()
    done = cli("workers", "--engine", "postgresql", "-w", "3", "-j", "30", "--work-ms", "2", "--kill", "1", "--json",
               timeout=180)
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines()
    record = json.loads(line)
    assert (record["completed"], record["lost"], record["duplicated"], record["killed"]) == (30, 0, 0, 1)
    assert record["server"].startswith("PostgreSQL") and record["row_lock_waits"] is None


def test_cli_bench_tiny_sweep_on_postgresql():
    skip_without_pg()
    done = cli(
        "bench", "--engine", "postgresql", "--jobs", "24", "--workers", "2", "--strategies",
        "skip-locked,update-limit,lease", "--work-ms", "0", "--json", "--plot", "", timeout=300,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert {(r["isolation"], r["strategy"]) for r in result["rows"]} == {
        (i, s) for i in ISOLATIONS for s in ("own-rows", "skip-locked", "update-limit", "lease")
    }
    assert all(r["invariants_hold"] for r in result["rows"])
    assert result["server"].startswith("PostgreSQL")


def test_ctrl_c_on_postgresql_leaves_no_process_behind():
    """Ctrl-C of a PostgreSQL run: exit 130, the workers, the forkserver and the embedded server gone."""
    skip_without_pg()
    interrupted_run("--engine", "postgresql")


def test_the_crew_ends_a_workers_backend_with_pg_terminate_backend(pg_embedded):
    with Scratch(pg_embedded) as scratch:
        scratch.prepare(1)
        conn = pg_embedded.params.connect(database=scratch.name)
        try:
            control.execute(conn, "BEGIN")
            control.execute(conn, "SELECT id FROM jobs WHERE id = 1 FOR UPDATE")
            pid = conn.pgconn.backend_pid
            assert scratch.threads_present([pid]) == {pid}
            scratch.kill_threads([pid])
            deadline = time.monotonic() + 5
            while scratch.threads_present([pid]) and time.monotonic() < deadline:
                time.sleep(0.01)
            assert scratch.threads_present([pid]) == set()
            # The row it held is free again.
            assert scratch.rows("SELECT id FROM jobs WHERE id = 1 FOR UPDATE NOWAIT") == (("1",),)
        finally:
            conn.close()


def test_live_view_and_summary_say_what_postgresql_does_not_count(pg_embedded):
    import io

    from rich.console import Console

    from jobqueue_demo.render.live import progress_table, summary_table

    seen = []
    summary = run_workers(WorkersConfig(workers=3, jobs=30, kill=1, work_ms=5), pg_embedded, seen.append)
    assert seen and all(p.row_lock_waits is None for p in seen)
    console = Console(file=io.StringIO(), width=120, color_system=None)
    console.print(progress_table(seen[-1]))
    console.print(summary_table(summary))
    text = console.file.getvalue()
    assert "row lock waits (not counted by this server) -" in text
    assert "serialization failures" in text and "30 of 30" in text
