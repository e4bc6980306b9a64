"""Worker processes on a real queue: every strategy's invariants, kills, effects, CLI shape."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid

import pytest
from conftest import LOCAL_DSN, ROOT, cli, dsn_env, left_behind, local_server_reachable, scratch_databases

from jobqueue_demo.errors import UsageError
from jobqueue_demo.workers.crew import Scratch, WorkersConfig, check, run_workers, validate
from jobqueue_demo.workers.stall import diagnose
from jobqueue_demo.workers.strategies import REGISTRY

STRATEGIES = tuple(s.name for s in REGISTRY if s.swept)
LOCK_HELD = ("skip-locked", "for-update", "nowait-retry", "update-limit")
ISOLATIONS = ("read-committed", "repeatable-read")
JSON_KEYS = {
    "strategy", "isolation", "workers", "jobs", "completed", "seconds", "jobs_per_s", "claim_ms_p50",
    "claim_ms_p99", "deadlocks", "lock_wait_timeouts", "empty_claims", "retries", "killed", "lost", "duplicated",
    "external_duplicates", "serialization_failures",
}


def assert_every_job_done_once(summary) -> None:
    assert summary.invariants_hold, summary
    assert (summary.completed, summary.lost, summary.duplicated) == (summary.jobs, 0, 0)
    # Every completed job wrote its effect once in the attempt that committed; the rest are repeats.
    assert summary.effects - summary.jobs == summary.external_duplicates
    assert summary.retries == (
        summary.deadlocks + summary.lock_wait_timeouts + summary.nowait_failures + summary.serialization_failures
    )


@pytest.mark.parametrize("isolation", ISOLATIONS)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_invariants_hold(server, strategy, isolation):
    summary = run_workers(WorkersConfig(strategy, isolation, workers=3, jobs=40, work_ms=0.5), server)
    assert_every_job_done_once(summary)
    assert summary.killed == 0 and summary.claim_ms_p50 is not None
    assert sum(w.completed for w in summary.per_worker) == summary.jobs


@pytest.mark.parametrize("isolation", ISOLATIONS)
@pytest.mark.parametrize("strategy", LOCK_HELD)
def test_killed_workers_claims_come_back(server, strategy, isolation):
    summary = run_workers(WorkersConfig(strategy, isolation, workers=4, jobs=60, work_ms=2, kill=2), server)
    assert_every_job_done_once(summary)
    assert summary.killed == 2
    assert [w.state for w in summary.per_worker].count("killed") == 2
    # Each killed worker held one job (batch 1), which another worker then completed.
    assert summary.reclaimed == 2
    assert all(ms is not None and ms > 0 for ms in summary.notice_ms)
    # Kills land after the job's effect, so each leaves one repeated effect at least.
    assert summary.external_duplicates >= 2


def test_idempotency_key_removes_external_duplicates(embedded):
    config = WorkersConfig("skip-locked", "read-committed", workers=4, jobs=60, work_ms=2, kill=2, idempotency_key=True)
    summary = run_workers(config, embedded)
    assert_every_job_done_once(summary)
    assert (summary.effects, summary.external_duplicates) == (summary.jobs, 0)
    assert summary.deduplicated >= summary.killed == 2


def test_batch_claims(embedded):
    summary = run_workers(WorkersConfig("skip-locked", "read-committed", workers=2, jobs=45, batch=4, work_ms=0), embedded)
    assert_every_job_done_once(summary)


def test_broken_claim_is_caught(embedded):
    # A plain SELECT locks nothing: workers take the same job, and the second completion is refused.
    summary = run_workers(WorkersConfig("no-lock", "read-committed", workers=4, jobs=40, work_ms=2), embedded)
    assert summary.duplicated > 0 and not summary.invariants_hold
    assert summary.lost == 0


def test_live_view_and_summary_render(embedded):
    from rich.console import Console

    from jobqueue_demo.render.live import progress_table, summary_table

    seen = []
    summary = run_workers(WorkersConfig(workers=3, jobs=30, kill=1, work_ms=5), embedded, seen.append)
    assert seen and all(len(p.workers) == 3 for p in seen)
    console = Console(file=io.StringIO(), width=100, color_system=None)
    console.print(progress_table(seen[-1]))
    console.print(summary_table(summary))
    text = console.file.getvalue()
    assert "deadlock" in text and "nowait" in text
    assert "30 of 30" in text and "server noticed after" in text


def test_lost_jobs_are_counted(embedded):
    with Scratch(embedded) as scratch:
        scratch.prepare(3)
        scratch.execute("UPDATE jobs SET state = 'done' WHERE id = 1")
        scratch.execute("INSERT INTO completions (job_id, worker) VALUES (1, 0)")
        scratch.execute("UPDATE jobs SET state = 'done' WHERE id = 2")  # done, but no completion recorded
        checked = check(scratch, [])
    assert (checked.completed, checked.lost) == (1, 2)


def test_ceiling_runs_without_contention(server):
    summary = run_workers(WorkersConfig("own-rows", "repeatable-read", workers=3, jobs=30, work_ms=0), server)
    assert_every_job_done_once(summary)
    assert (summary.deadlocks, summary.empty_claims) == (0, 3)


def test_runs_leave_no_scratch_database(local):
    before = scratch_databases(local)
    run_workers(WorkersConfig(workers=2, jobs=10, kill=1), local)
    assert left_behind(local, before) == set()
    # Other engineers' runs use the same server: only what appears during this call counts.
    before = scratch_databases(local)
    with pytest.raises(UsageError):
        run_workers(WorkersConfig(workers=2, jobs=10, kill=5), local)
    assert left_behind(local, before) == set()


@pytest.mark.parametrize(
    "values, words",
    [
        (dict(workers=0), "--workers must be from 1 to 64, got 0"),
        (dict(workers=-2), "--workers must be from 1 to 64, got -2"),
        (dict(workers=500), "--workers must be from 1 to 64, got 500"),
        (dict(jobs=0), "--jobs must be from 1 to 1,000,000, got 0"),
        (dict(jobs=10**9), "--jobs must be from 1 to 1,000,000"),
        (dict(strategy="skip_locked"), "unknown strategy 'skip_locked'"),
        (dict(isolation="serializable"), "unknown isolation 'serializable'"),
        (dict(workers=2, kill=2), "--kill must be from 0 to 1"),
        (dict(work_ms=-1.0), "--work-ms must be from 0"),
        (dict(work_ms=float("nan")), "--work-ms must be from 0"),
        (dict(jobs=5, batch=6), "--batch must be from 1 to 5"),
        (dict(strategy="own-rows", kill=1), "own-rows cannot take --kill"),
        (dict(stall_s=0), "--stall must be from 0.1 to 3,600, got 0"),
    ],
)
def test_bad_values_are_rejected(values, words):
    with pytest.raises(UsageError, match=words.replace("(", r"\(")):
        validate(WorkersConfig(**values))


@pytest.mark.fast
@pytest.mark.parametrize(
    "workers, kill, words",
    [("", 0, "--workers counts must be from 1 to 64, got ''"),
     ("2", 5, "--kill must be from 0 to 1 so that a worker survives in every step, got 5"),
     ("2,8", 2, "--kill must be from 0 to 1 so that a worker survives in every step, got 2")],
    ids=["empty-workers", "kill-past-workers", "kill-past-the-smallest-step"],
)
def test_bench_refuses_what_workers_refuses(workers, kill, words):
    """`bench -w ''` ran the default sweep, and a --kill past a step's workers was checked
    against the largest step only."""
    from jobqueue_demo import api

    with pytest.raises(UsageError, match=words):
        api.sweep_config("skip-locked", workers, "read-committed", 10, False, 1, 0.0, 1, kill)


@pytest.mark.fast
def test_bench_runs_a_strategy_named_twice_once():
    from jobqueue_demo import api

    config = api.sweep_config("skip-locked,skip-locked", "2", "read-committed,read-committed", 10, False, 1, 0.0, 1, 0)
    assert (config.strategies, config.isolations) == (("skip-locked",), ("read-committed",))


@pytest.mark.parametrize(
    "args",
    [
        ("workers", "--workers", "0"),
        ("workers", "--jobs", "-5"),
        ("workers", "-s", "bogus"),
        ("workers", "--engine", "oracle"),
        ("bench", "--engine", "sqlite"),
        ("bench", "--workers", "0,4"),
        ("bench", "--strategies", "nope"),
    ],
)
def test_cli_rejects_bad_values_in_one_line(args):
    done = cli(*args)
    assert done.returncode == 2
    assert done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and done.stderr.startswith("jobqueue-demo: ")


def test_cli_json_is_one_line_with_the_issue_keys():
    done = cli("workers", "-w", "3", "-j", "30", "--work-ms", "2", "--kill", "1", "--json")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert JSON_KEYS <= set(record)
    assert (record["completed"], record["lost"], record["duplicated"], record["killed"]) == (30, 0, 0, 1)
    assert record["strategy"] == "skip-locked" and record["isolation"] == "repeatable-read"


def test_cli_table_and_exit_1_when_invariants_fail():
    done = cli("workers", "-w", "4", "-j", "30", "-s", "no-lock", "--work-ms", "2", "--isolation", "read-committed")
    assert done.returncode == 1
    assert "duplicated (second completions)" in done.stdout
    assert done.stdout.strip().splitlines()[-1].startswith("invariants violated: 0 lost, ")


def test_cli_bench_tiny_sweep(tmp_path):
    plot = tmp_path / "sweep.svg"
    dsn = ("--dsn", LOCAL_DSN) if local_server_reachable() else ()
    done = cli(
        "bench", "--jobs", "24", "--workers", "1,2", "--strategies", "skip-locked,for-update",
        "--work-ms", "0", "--json", "--plot", str(plot), *dsn,
    )
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines()
    result = json.loads(line)
    assert {(r["isolation"], r["strategy"], r["workers"]) for r in result["rows"]} == {
        (i, s, w) for i in ISOLATIONS for s in ("own-rows", "skip-locked", "for-update") for w in (1, 2)
    }
    assert all(r["invariants_hold"] for r in result["rows"])
    assert [h["workers"] for h in result["headlines"]] == [2, 2]
    assert set(result["deadlocks"]) == set(ISOLATIONS)
    matplotlib = subprocess.run([sys.executable, "-c", "import matplotlib"], capture_output=True).returncode == 0
    assert plot.exists() == matplotlib and (result["plot"] is not None) == matplotlib


@pytest.mark.parametrize(
    "plot, words",
    [("sweep.txt", "the plot's format follows the suffix; use .png or .svg"), ("missing/sweep.png", "no such directory"),
     (".", "the plot's format follows the suffix"), ("/dev/sweep.png", "/dev holds devices")],
    ids=["suffix", "no-folder", "directory", "dev"],
)
def test_cli_bench_refuses_a_plot_it_cannot_write_before_the_sweep(tmp_path, plot, words):
    """Each of these ran the whole sweep (a minute by default) and only then failed, or said
    nothing; the DSN here is never reached: the refusal comes first, exit 2 and not 3."""
    target = plot if plot.startswith("/") else str(tmp_path / plot)
    done = cli("bench", "--dsn", "mysql://root@127.0.0.1:1/none", "--plot", target)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"jobqueue-demo: {target}: ") and words in line, line


@pytest.mark.skipif(not local_server_reachable(), reason="no server on 127.0.0.1:3306")
def test_ctrl_c_leaves_nothing_behind(local):
    before = scratch_databases(local)
    interrupted_run("--dsn", LOCAL_DSN)
    assert left_behind(local, before) == set()


def interrupted_run(*args: str) -> None:
    """`workers -w 4 -j 100000 ARGS`, sent Ctrl-C once its workers run: exit 130, no traceback,
    none of its processes left, and a report of what the workers did until then."""
    marker = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if k != "JOBQUEUE_DEMO_DSN"} | {"JQD_TEST_MARK": marker}
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobqueue_demo", "workers", "-w", "4", "-j", "100000", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
    )
    # The CLI, the forkserver, the resource tracker and the 4 workers.
    _started_workers(marker, 7)
    time.sleep(1)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert _processes_with(marker) == []
    assert re.search(r"^interrupted \(Ctrl-C\) after \d+ of 100000 job\(s\) completed", stdout, re.M), stdout
    assert re.search(r"jobs completed .* of 100,000", stdout), stdout
    assert stderr.splitlines()[-1] == "jobqueue-demo: interrupted (Ctrl-C)", stderr


def test_ctrl_c_in_bench_prints_the_rows_done_so_far(embedded):
    env = {k: v for k, v in os.environ.items() if k != "JOBQUEUE_DEMO_DSN"} | dsn_env(embedded)
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobqueue_demo", "bench", "--jobs", "3000", "--workers", "2", "--strategies", "skip-locked",
         "--isolation", "read-committed,repeatable-read", "--plot", ""],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
    )
    while "-- 2 of 4," not in (line := proc.stderr.readline()):
        assert line, proc.communicate()
    proc.send_signal(signal.SIGINT)  # during the repeatable-read group
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert re.search(r"^ read-committed \| skip-locked +\| +2 \|", stdout, re.M), stdout
    assert "repeatable-read |" not in stdout
    assert "interrupted (Ctrl-C) after 2 row(s) of the sweep; invariants hold in their runs" in stdout
    assert stderr.splitlines()[-1] == "jobqueue-demo: interrupted (Ctrl-C)", stderr


def _processes_with(marker: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if f"JQD_TEST_MARK={marker}".encode() in f.read():
                    found.append(int(pid))
        except OSError:
            continue  # gone, or not ours to read
    return found


@pytest.mark.parametrize("strategy", ["lease", "lease-heartbeat"])
def test_a_killed_workers_lease_expires_and_its_job_runs_again(server, strategy):
    config = WorkersConfig(strategy, "repeatable-read", workers=4, jobs=60, work_ms=2, kill=2, lease_ms=150)
    summary = run_workers(config, server)
    assert_every_job_done_once(summary)
    assert summary.killed == 2 and summary.reclaimed == 2
    # The killed worker's claim was committed: only the lease's expiry lets another worker run it.
    assert all(ms is not None and ms > 0 for ms in summary.rerun_ms)
    assert summary.external_duplicates >= 2


def test_a_heartbeat_keeps_a_lease_shorter_than_the_job(embedded):
    # Without the heartbeat every job would outlive its 200 ms lease and be handed to another worker.
    config = WorkersConfig("lease-heartbeat", "read-committed", workers=3, jobs=6, work_ms=300, lease_ms=200)
    summary = run_workers(config, embedded)
    assert_every_job_done_once(summary)
    assert (summary.leases_lost, summary.external_duplicates) == (0, 0)


def test_the_old_state_layout_is_still_reachable(embedded):
    summary = run_workers(WorkersConfig(workers=2, jobs=20, state_order="done-first"), embedded)
    assert_every_job_done_once(summary)
    assert summary.state_order == "done-first"


def test_a_stall_is_diagnosed_from_the_servers_lock_waits(server):
    """One connection holds a row, another waits for it: the diagnosis names both, the index and the mode."""
    with Scratch(server) as scratch:
        scratch.prepare(3)
        holder = server.params.connect(database=scratch.name)
        waiter = server.params.connect(database=scratch.name)
        try:
            holder.query(b"BEGIN")
            holder.query(b"SELECT id FROM jobs WHERE id = 2 FOR UPDATE")
            holder.store_result()
            waiter.query(b"BEGIN")
            waiter.send_query(b"UPDATE jobs SET state = 'done' WHERE id = 2")
            threads = {holder.thread_id(): 0, waiter.thread_id(): 1}
            diagnosis = _diagnosis_once_waiting(scratch, threads)
        finally:
            holder.close()
            waiter.close()
    (wait,) = diagnosis.waits
    assert (wait.waiter, wait.blocker, wait.table, wait.index, wait.record) == ("worker 1", "worker 0", "jobs", "PRIMARY", "2")
    assert wait.mode.startswith("X") and "UPDATE jobs SET state = 'done'" in wait.statement
    (line,) = diagnosis.lines()
    assert "worker 1" in line and "held (X) by worker 0" in line
    assert diagnosis.as_dict()["waits"][0]["index"] == "PRIMARY"


def _diagnosis_once_waiting(scratch, threads):
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        diagnosis = diagnose(scratch, threads)
        if diagnosis.waits:
            return diagnosis
        time.sleep(0.12)  # InnoDB refreshes its INFORMATION_SCHEMA cache after 0.1 s of quiet
    raise AssertionError("the waiter never showed in INNODB_LOCK_WAITS")


@pytest.mark.parametrize("width", [60, 80, 120])
def test_the_worker_table_fits_the_width_with_whole_headings(width):
    from rich.console import Console

    from jobqueue_demo.render.live import WORKER_COLUMNS, worker_table
    from jobqueue_demo.workers.crew import WorkerView

    workers = [WorkerView(i, "running", 1234, 1500, 12, 345, 0, 0, 345, 0) for i in range(8)]
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(worker_table(workers, width))
    text = console.file.getvalue()
    assert max(len(line) for line in text.splitlines()) <= width
    header = next(line for line in text.splitlines() if "worker" in line)
    shown = [name for name, _ in WORKER_COLUMNS if name in header.split("   ") or f" {name} " in f" {header} "]
    assert shown[:4] == ["worker", "state", "done", "claims"]
    hidden = [name for name, _ in WORKER_COLUMNS if name not in shown]
    assert (width < 120) == bool(hidden)
    if hidden:
        assert "not shown (too narrow): " in " ".join(text.split())


def test_cli_table_run_keeps_the_worker_table_and_ends_with_the_verdict():
    done = cli("workers", "-w", "2", "-j", "20", "--work-ms", "0", env={"COLUMNS": "60"})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[-1] == "invariants hold: no job lost, none done twice"
    assert any(line.split()[:4] == ["worker", "state", "done", "claims"] for line in lines)
    assert max(len(line) for line in lines) <= 60


def test_every_registered_strategy_is_in_the_help():
    done = cli("workers", "--help", env={"COLUMNS": "200"})
    text = "".join(done.stdout.split())  # rich may break a line after a hyphen
    for strategy in REGISTRY:
        assert strategy.name in text


def _started_workers(marker: str, count: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while len(_processes_with(marker)) < count:
        assert time.monotonic() < deadline, "the workers did not start"
        time.sleep(0.1)


def _gone_within(marker: str, seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while _processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    return _processes_with(marker)


@pytest.mark.parametrize("where", ["embedded", "dsn"])
def test_workers_die_with_the_cli_on_sigkill(where):
    if where == "dsn" and not local_server_reachable():
        pytest.skip("no server on 127.0.0.1:3306")
    marker = uuid.uuid4().hex
    dsn = ("--dsn", LOCAL_DSN) if where == "dsn" else ()
    env = {k: v for k, v in os.environ.items() if k != "JOBQUEUE_DEMO_DSN"} | {"JQD_TEST_MARK": marker}
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobqueue_demo", "workers", "-w", "4", "-j", "1000", "--work-ms", "1000",
         "--isolation", "read-committed", *dsn],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=ROOT,
    )
    # The CLI, the forkserver, the resource tracker and 4 workers (the embedded run adds its server).
    _started_workers(marker, 7)
    threads = _worker_threads_of(marker) if where == "dsn" else set()
    assert where != "dsn" or len(threads) >= 9
    proc.kill()
    proc.wait()
    assert _gone_within(marker, 3) == []
    if threads:
        assert _connections_left(threads) == set()


def _worker_threads_of(marker: str) -> set[int]:
    """The server threads of a run's processes: PROCESSLIST's client ports that their sockets use."""
    from jobqueue_demo.engine.seam import open_server

    deadline = time.monotonic() + 30
    with open_server(LOCAL_DSN) as info:
        conn = info.params.connect()
        try:
            while True:
                ports = _local_ports(_processes_with(marker))
                conn.query(b"SELECT ID, HOST FROM information_schema.PROCESSLIST")
                found = {int(t) for t, host in conn.store_result().fetch_row(0) if _port(host) in ports}
                # 4 workers with two connections each, and the control connection
                if len(found) >= 9 or time.monotonic() > deadline:
                    return found
                time.sleep(0.1)
        finally:
            conn.close()


def _port(host) -> int | None:
    host = host.decode() if isinstance(host, bytes) else host or ""
    return int(host.rsplit(":", 1)[1]) if ":" in host else None


def _local_ports(pids: list[int]) -> set[int]:
    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    link = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if link.startswith("socket:["):
                        inodes.add(link[8:-1])
        except OSError:
            continue
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[9] in inodes:
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def _connections_left(threads: set[int]) -> set[int]:
    from jobqueue_demo.engine.seam import open_server

    deadline = time.monotonic() + 3
    with open_server(LOCAL_DSN) as info:
        conn = info.params.connect()
        try:
            while True:
                listed = ", ".join(str(t) for t in threads)
                conn.query(f"SELECT ID FROM information_schema.PROCESSLIST WHERE ID IN ({listed})".encode())
                left = {int(row[0]) for row in conn.store_result().fetch_row(0)}
                if not left or time.monotonic() > deadline:
                    return left
                time.sleep(0.05)
        finally:
            conn.close()


def test_cli_bench_with_kills_spares_the_ceiling_and_counts_what_ran_twice():
    done = cli(
        "bench", "--jobs", "60", "--workers", "2", "--strategies", "skip-locked,lease-heartbeat", "--isolation",
        "read-committed", "--kill", "1", "--work-ms", "2", "--plot", "", "--json",
    )
    assert done.returncode == 0, done.stderr
    rows = {r["strategy"]: r for r in json.loads(done.stdout)["rows"]}
    assert rows["own-rows"]["killed"] == 0
    for name in ("skip-locked", "lease-heartbeat"):
        assert rows[name]["killed"] == 1 and rows[name]["invariants_hold"]
        assert rows[name]["external_duplicates"] >= 1 and rows[name]["rerun_ms"][0] is not None


def test_bench_says_how_far_it_is_off_a_terminal():
    done = cli("bench", "--jobs", "10", "--workers", "1", "--strategies", "skip-locked", "--isolation", "read-committed",
               "--plot", "")
    assert done.returncode == 0, done.stderr
    assert "-- 1 of 2, about " in done.stderr and " s left" in done.stderr
    assert done.stdout.strip().splitlines()[-1] == "invariants hold in all 2 runs: no job lost, none done twice"


def test_bench_headline_gives_no_ratio_to_a_strategy_that_did_not_run():
    dsn = ("--dsn", LOCAL_DSN) if local_server_reachable() else ()
    done = cli("bench", "--jobs", "20", "--workers", "2", "--strategies", "skip-locked", "--isolation", "read-committed",
               "--work-ms", "0", "--plot", "", *dsn)
    assert done.returncode == 0, done.stderr
    (headline,) = [line for line in done.stdout.splitlines() if line.startswith("read-committed at 2 workers")]
    assert "for-update was not in this sweep: no ratio" in headline and "- for-update" not in headline


def test_bench_headline_above_the_ceiling_says_why_it_can_be():
    from jobqueue_demo.render.live import headline_lines
    from jobqueue_demo.workers.sweep import Headline, SweepResult

    result = SweepResult("MariaDB", 400, 1.0, 1, 1, 0, [], [Headline("read-committed", 8, 3.1, 2.64)])
    (line,) = headline_lines(result)
    assert "264% of the ceiling (above 100%: the ceiling's own run was slower" in line
