"""The PostgreSQL engine on real servers: the embedded one each test session starts, and the
local cluster on 127.0.0.1:5432 when it answers. Skipped only where no PostgreSQL server
binaries are installed (make install installs them)."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest
from conftest import LOCAL_PG_DSN, ROOT, cli, local_pg_reachable, pg_binaries_missing, reachable_tmp
from test_interrupt import interrupt_while_waiting, start

from jobqueue_demo import api as core
from jobqueue_demo.engine.postgresql import control
from jobqueue_demo.errors import StuckError
from jobqueue_demo.run import events as ev

DATA = ROOT / "tests" / "data" / "postgresql"
MISSING = pg_binaries_missing()
pytestmark = pytest.mark.skipif(MISSING is not None, reason=f"no PostgreSQL server binaries: {MISSING}")


def run(name: str, server):
    return core.run(core.load(str(DATA / f"{name}.yaml")), server, 10.0)


def completed(report, session: str) -> list[ev.Completed]:
    return [e for e in report.events if isinstance(e, ev.Completed) and e.session == session]


def waits(report) -> list[ev.Waiting]:
    return [e for e in report.events if isinstance(e, ev.Waiting)]


def compare_tool() -> Path | None:
    for root in (Path("/work/shared"), ROOT.parent / "shared"):
        tool = root / "tools" / "compare-transcript"
        if tool.is_file():
            return tool
    return None


def test_server_info_names_the_engine(pg):
    assert (pg.engine, pg.flavor) == ("postgresql", "PostgreSQL")
    assert pg.label.startswith("PostgreSQL ")
    assert pg.dialect.kill_connection(42) == "SELECT pg_terminate_backend(42)"


def test_seed_schedule_matches_the_seed_transcript():
    tool = compare_tool()
    if tool is None:
        pytest.skip("no shared/tools/compare-transcript beside the repository")
    done = cli("--engine", "postgresql", "run", "tests/data/postgresql/skip-locked.yaml")
    assert done.returncode == 0, done.stderr
    assert "on PostgreSQL" in done.stdout
    seed = tool.parent.parent / "seed" / "skip-locked-transcript.txt"
    compared = subprocess.run([str(tool), str(seed)], input=done.stdout, capture_output=True, text=True)
    assert compared.returncode == 0, compared.stdout + done.stdout


def test_for_update_waits_with_the_blocker_named_then_completes(pg):
    report = run("waits", pg)
    first = waits(report)[0]
    assert (first.session, first.kind, first.blockers) == ("B", "row lock", ("A",))
    # FOR UPDATE is B's request: what A holds on the row is in the row, not in pg_locks.
    assert (first.lock, first.requested) == ("jobs row (0,1)", "FOR UPDATE")
    assert [(e.session, e.how, e.mode) for e in first.edges] == [("A", "holds", "")]
    b_select = completed(report, "B")[1]
    assert b_select.waited_ms is not None and b_select.result.rows == (("1", "send welcome email"),)
    a_commit = next(i for i, e in enumerate(report.events) if isinstance(e, ev.Completed) and e.sql == "COMMIT;" and e.session == "A")
    assert report.events.index(b_select) > a_commit


def test_nowait_fails_at_once_with_55P03(pg):
    report = run("waits", pg)
    nowait = completed(report, "C")[0]
    assert nowait.waited_ms is None
    error = nowait.result.error
    assert (error.code, error.error_class, error.name) == ("55P03", "lock-not-available", "LOCK_NOT_AVAILABLE")
    assert str(error) == 'ERROR:  could not obtain lock on row in relation "jobs"'


def test_kill_query_cancels_a_wait(pg):
    report = run("waits", pg)
    cancelled = completed(report, "C")[1]
    assert cancelled.waited_ms is not None
    assert (cancelled.result.error.code, cancelled.result.error.error_class) == ("57014", "interrupted")
    c_wait = [w for w in waits(report) if w.session == "C"]
    assert c_wait and c_wait[0].blockers  # behind A (holder) or B (first in the queue)


def test_deadlock_is_broken_after_deadlock_timeout_and_classified(pg):
    report = run("deadlock", pg)
    errors = [e for s in ("A", "B") for e in completed(report, s) if e.result.error]
    assert len(errors) == 1
    assert (errors[0].result.error.code, errors[0].result.error.error_class) == ("40P01", "deadlock")
    survivor = "B" if errors[0].session == "A" else "A"
    assert completed(report, survivor)[-2].result.rows  # its claim went through once the victim rolled back
    assert not any(isinstance(e, ev.Stuck) for e in report.events)
    # The cycle as the wait monitor saw it before the server broke it, told as InnoDB's is.
    cycle = errors[0].deadlock
    victim = errors[0].session
    assert cycle.lines()[0] == f"deadlock: {victim} -> {survivor} -> {victim}; the server rolled back {victim}"
    assert {line.split(" waited for ")[1] for line in cycle.lines()[1:]} == {
        "FOR UPDATE row lock on jobs (0,1), held by A", "FOR UPDATE row lock on jobs (0,2), held by B",
    }
    from jobqueue_demo.render.deadlock_svg import cycle_svg

    assert "<svg" in cycle_svg(cycle, {"A": "#000", "B": "#111"})


def test_kill_terminates_the_backend_and_its_claim_comes_back(pg):
    report = run("kill-worker", pg)
    fault = next(e for e in report.events if isinstance(e, ev.FaultApplied))
    assert fault.detail == "the server ended the session and rolled back its transaction"
    from jobqueue_demo.render.transcript import fault_text

    # It once read "(KILL CONNECTION)", a MariaDB statement, on PostgreSQL too.
    assert fault_text(fault).startswith("-- B killed from the control connection (pg_terminate_backend): ")
    reclaimed = [e for e in completed(report, "A") if e.result.rows == (("2", "generate invoice"),)]
    assert reclaimed
    last = completed(report, "B")[-1].result.error
    assert last.error_class == "connection-lost" and str(last).startswith("FATAL:  ")


def test_disconnect_closes_the_socket_and_the_server_rolls_back(pg):
    report = run("disconnect-worker", pg)
    fault = next(e for e in report.events if isinstance(e, ev.FaultApplied))
    assert fault.action == "disconnect" and fault.took_ms is not None
    assert [e for e in completed(report, "A") if e.result.rows == (("2", "generate invoice"),)]
    assert completed(report, "B")[-1].result.error.error_class == "connection-lost"


def test_locks_step_reads_pg_locks(pg):
    report = run("waits", pg)
    (shown,) = [e for e in report.events if isinstance(e, ev.LocksShown)]
    assert "pg_locks" in shown.note
    assert ("B", None, None, "ShareLock", "A's transaction", "waiting") in shown.rows
    assert ("B", "jobs", None, "FOR UPDATE", "(0,1)", "granted") in shown.rows
    assert ("C", "jobs", None, "FOR UPDATE", "(0,1)", "waiting") in shown.rows
    assert ("A", "jobs", "jobs_pkey", "RowShareLock", None, "granted") in shown.rows


def test_the_scratch_database_and_role_are_dropped(pg):
    report = run("skip-locked", pg)
    assert report.mismatches == []
    database = next(e for e in report.events if isinstance(e, ev.RunStarted)).database
    conn = pg.params.connect()
    try:
        left = control.rows(conn, "SELECT datname FROM pg_database UNION ALL SELECT rolname FROM pg_roles")
    finally:
        conn.close()
    assert database.startswith("jqd_") and database not in {r[0] for r in left}


def test_snapshot_restores_rows_and_sequences(pg_embedded):
    from jobqueue_demo.engine.postgresql.session import answer

    scratch = pg_embedded.seam.scratch(pg_embedded, confine=True, answer_timeout=10.0)
    scratch.open()
    try:
        user = scratch.session_params.connect()
        answer(user, "CREATE TABLE jobs (id SERIAL PRIMARY KEY, state TEXT, twice INT GENERATED ALWAYS AS (id * 2) STORED)")
        answer(user, "INSERT INTO jobs (state) VALUES ('queued'), ('queued')")
        survey = pg_embedded.seam.survey(scratch)
        assert (survey.tables, survey.obstacle) == (("jobs",), None)
        snapshot = pg_embedded.seam.snapshot(scratch, survey.tables, user)
        answer(user, "UPDATE jobs SET state = 'done'; INSERT INTO jobs (state) VALUES ('new')")
        snapshot.restore()
        assert answer(user, "SELECT id, state, twice FROM jobs ORDER BY id").rows == (("1", "queued", "2"), ("2", "queued", "4"))
        assert answer(user, "INSERT INTO jobs (state) VALUES ('x') RETURNING id").rows == (("3",),)
        user.close()
    finally:
        scratch.close()


def test_local_cluster_by_dsn():
    if not local_pg_reachable():
        pytest.skip("no PostgreSQL on 127.0.0.1:5432")
    done = cli("run", "tests/data/postgresql/skip-locked.yaml", "--dsn", LOCAL_PG_DSN, "--format", "json")
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    database = events[0]["database"]
    check = subprocess.run(
        ["psql", "-h", "127.0.0.1", "-U", "root", "-d", "test", "-Atc", f"SELECT count(*) FROM pg_database WHERE datname = '{database}'"],
        capture_output=True, text=True,
    )
    assert check.stdout.strip() == "0", check.stderr


@pytest.mark.parametrize(
    "dsn, code, words",
    [
        ("postgresql://root@127.0.0.1:1/test", 3, "cannot connect to root@127.0.0.1:1/test"),
        ("postgresql://root@/test", 2, "names no host"),
        ("postgres://root@h/db?sslmode=off", 2, "only option is one ?host=/socket/dir"),
    ],
)
def test_bad_dsn_is_one_line_and_its_exit_code(dsn, code, words):
    done = cli("run", "tests/data/postgresql/skip-locked.yaml", "--dsn", dsn)
    assert done.returncode == code, done.stderr
    assert words in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def _left_in(folder: Path) -> tuple[list[str], str]:
    dirs = [p.name for p in folder.iterdir() if p.name.startswith("jobqueue-demo-")]
    alive = subprocess.run(["pgrep", "-f", str(folder)], capture_output=True, text=True).stdout.strip()
    return dirs, alive


def test_ctrl_c_stops_and_removes_the_embedded_postgresql():
    folder = reachable_tmp()
    try:
        proc = start("--engine", "postgresql", "run", "tests/data/long-wait.yaml", "--step-timeout", "60", env={"TMPDIR": str(folder)})
        code, out, err = interrupt_while_waiting(proc)
        assert code == 130, err
        assert "waiting for a row lock held by A" in out and "Traceback" not in err
        assert _left_in(folder) == ([], "")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_sigkill_of_the_cli_takes_the_server_with_it_and_the_next_run_sweeps(tmp_path):
    folder = reachable_tmp()
    try:
        proc = start("--engine", "postgresql", "run", "tests/data/long-wait.yaml", "--step-timeout", "60", env={"TMPDIR": str(folder)})
        interrupt_while_waiting(proc, signal.SIGKILL)
        # The postmaster gets SIGKILL with its parent (PR_SET_PDEATHSIG); its backends follow it.
        for _ in range(200):
            if _left_in(folder)[1] == "":
                break
            subprocess.run(["sleep", "0.05"])
        assert _left_in(folder)[1] == ""
        done = cli("--engine", "postgresql", "run", "tests/data/postgresql/skip-locked.yaml", env={"TMPDIR": str(folder)})
        assert done.returncode == 0, done.stderr
        assert _left_in(folder) == ([], "")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_explore_runs_every_schedule_with_the_snapshot_reset():
    done = cli("--engine", "postgresql", "explore", "tests/data/postgresql/skip-locked-explore.yaml")
    assert done.returncode == 0, done.stderr
    assert "reset: tables restored from a snapshot (TRUNCATE + INSERT ... SELECT" in done.stdout
    assert "verdict: invariants hold in all 330 schedule(s)" in done.stdout


def test_show_locks_is_refused_in_one_line():
    done = cli("--engine", "postgresql", "run", "tests/data/postgresql/skip-locked.yaml", "--show-locks")
    assert done.returncode == 2 and "--show-locks needs" in done.stderr and "Traceback" not in done.stderr


def test_scenario_sql_runs_as_the_per_run_role(pg):
    from jobqueue_demo.engine.postgresql.session import answer

    scratch = pg.seam.scratch(pg, confine=True, answer_timeout=10.0)
    scratch.open()
    try:
        user = pg.seam.user_connection(scratch, 10.0)
        assert answer(user, "SELECT current_user").rows == ((scratch.name,),)
        refused = answer(user, "CREATE DATABASE jqd_should_not_exist").error
        assert refused.code == "42501" and str(refused).startswith("ERROR:  permission denied")
        user.close()
    finally:
        scratch.close()


@pytest.mark.sweeps
def test_cleanup_drops_a_dead_runs_database_and_role_only(pg_local):
    from jobqueue_demo.engine.naming import new_name
    from jobqueue_demo.engine.postgresql.control import execute, flag, quote

    dead, locked, elsewhere = new_name(), new_name(), new_name()
    admin = pg_local.params.connect()
    # Live runs as a sweep sees them: one holds its advisory lock on this database; the other's
    # admin connection is on another database (advisory locks are per database), named for it.
    holder = pg_local.params.connect()
    other = pg_local.params.connect(database="postgres", application=f"jobqueue-demo {elsewhere}")
    try:
        for name in (dead, locked, elsewhere):
            execute(admin, f"CREATE DATABASE {quote(name)}")
            execute(admin, f"CREATE ROLE {quote(name)}")
        assert flag(holder, f"SELECT pg_try_advisory_lock(hashtext('{locked}'))")
        done = cli("cleanup", "--dsn", LOCAL_PG_DSN)
        assert done.returncode == 0, done.stderr
        assert f"removed database {dead}" in done.stdout and f"removed user {dead}" in done.stdout
        left = {r[0] for r in control.rows(admin, "SELECT datname FROM pg_database UNION ALL SELECT rolname FROM pg_roles")}
        assert dead not in left and {locked, elsewhere} <= left
        assert f"kept database {locked} (its run is alive)" in done.stdout
        assert f"kept database {elsewhere} (its run is alive)" in done.stdout
    finally:
        holder.close()
        other.close()
        for name in (locked, elsewhere):
            execute(admin, f"DROP DATABASE IF EXISTS {quote(name)}")
            execute(admin, f"DROP ROLE IF EXISTS {quote(name)}")
        admin.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="the server runs as a user of its own only when we are root")
def test_a_run_dir_the_postgres_user_cannot_reach_is_one_line_and_left_clean():
    folder = Path(tempfile.mkdtemp(prefix="jqd-test-private-"))  # mode 0700, root's
    try:
        done = cli("--engine", "postgresql", "run", "tests/data/postgresql/skip-locked.yaml", env={"TMPDIR": str(folder)})
        assert done.returncode == 3 and "point TMPDIR at a directory it can enter" in done.stderr and "rebuilding" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
        assert _left_in(folder) == ([], "")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_snapshot_reset_matches_rebuilding_the_schema(pg_embedded):
    from jobqueue_demo.explore.search import ExploreOptions, explore

    scenario = core.load(str(DATA / "claim-without-lock-explore.yaml"))
    outcomes = []
    for recreate in (False, True):
        seen = []
        report = explore(scenario, pg_embedded, ExploreOptions(max_schedules=40, recreate=recreate), seen.append)
        outcomes.append((report.reset, [(s.moves, s.outcome) for s in seen]))
    (fast_reset, fast), (slow_reset, slow) = outcomes
    assert "snapshot" in fast_reset and "rebuilt" in slow_reset
    assert fast == slow and len(fast) == 40
    assert {outcome for _, outcome in fast} == {"ok", "violated"}



RESTORE_OR_NOT = """
title: claims, and maybe an update
engines: [postgresql]
setup: |
  CREATE TABLE jobs (id INT PRIMARY KEY, task TEXT NOT NULL, state TEXT NOT NULL DEFAULT 'queued');
  INSERT INTO jobs (id, task) VALUES (1, 'a'), (2, 'b');
sessions: [A, B]
steps:
  - A: BEGIN;
  - A: SELECT id FROM jobs WHERE state = 'queued' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED;
  - B: SELECT id FROM jobs WHERE state = 'queued' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED;
  - A: LAST
invariants:
  - name: both jobs there
    sql: SELECT COUNT(*) FROM jobs
    expect: [[2]]
"""


@pytest.mark.parametrize("last, restored", [("COMMIT;", False), ("UPDATE jobs SET state = 'done' WHERE id = 1;", True)])
def test_a_schedule_that_wrote_no_row_keeps_its_rows_and_one_that_did_gets_them_back(tmp_path, pg, last, restored):
    """A restore (TRUNCATE and re-insert, 2-5 ms) after a schedule of row locks only, which
    move no row, would cost more than the schedule: the rows are left as they are, the same
    row versions (xmin). After an UPDATE, new versions are put back."""
    from jobqueue_demo.explore.search import ExploreOptions, FirstChoice, ScheduleRunner, Space

    path = tmp_path / "restore-or-not.yaml"
    path.write_text(RESTORE_OR_NOT.replace("LAST", last))
    scenario = core.for_server(core.load(str(path)), pg)
    with ScheduleRunner(Space(scenario, ()), pg, ExploreOptions(jobs=1)) as runner:
        versions = "SELECT id, state, xmin FROM jobs ORDER BY id"
        before = runner.driver.check(versions).rows
        first = runner.run(FirstChoice(()))
        after = runner.driver.check(versions).rows
    assert first.outcome == "ok" and [c.held for c in first.checks] == [True]
    assert [row[:2] for row in after] == [row[:2] for row in before] == [("1", "queued"), ("2", "queued")]
    assert (after != before) == restored


def test_an_invariant_that_errors_is_a_violation_with_its_error(tmp_path, pg_embedded):
    from jobqueue_demo.explore.search import ExploreOptions, explore

    text = (DATA / "claim-without-lock-explore.yaml").read_text()
    broken = tmp_path / "erroring-invariant.yaml"
    broken.write_text(text.replace("sql: SELECT id, runs FROM jobs WHERE runs > 1 ORDER BY id", "sql: SELECT 1/0"))
    report = explore(core.load(str(broken)), pg_embedded, ExploreOptions(max_schedules=5))
    [finding] = [f for f in report.findings if f.kind == "violated"]
    assert finding.what == "no job done twice"
    # Shortening the counterexample compares the failed invariants' errors of two schedules.
    [check] = [c for c in finding.shortest.checks if not c.held]
    assert check.got.error.code == "22012"

# -- a server that stops answering ---------------------------------------------------------

FROZEN_STEP_TIMEOUT_S = 3


def signal_all(postmaster: int, signum: int) -> None:
    """The postmaster and every backend: each backend is a session leader of its own (setsid)."""
    children = subprocess.run(["pgrep", "-P", str(postmaster)], capture_output=True, text=True).stdout.split()
    for pid in [postmaster, *map(int, children)]:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass


@pytest.fixture
def frozen_pg():
    """A private PostgreSQL, to be frozen whole (SIGSTOP) by the test."""
    from jobqueue_demo.engine.postgresql.embedded import EmbeddedPostgres

    server = EmbeddedPostgres()
    server.start()
    postmaster = server._process.pid
    try:
        yield server, postmaster
    finally:
        signal_all(postmaster, signal.SIGCONT)
        server.stop()


def start_frozen_pg_run(server, postmaster: int) -> subprocess.Popen:
    dsn = f"postgresql://postgres@/postgres?host={server.workdir}"
    proc = start("run", "tests/data/postgresql/long-statement.yaml", "--dsn", dsn,
                 "--step-timeout", str(FROZEN_STEP_TIMEOUT_S), "--format", "json", env={})
    while '"run_started"' not in proc.stdout.readline():
        assert proc.poll() is None, proc.stderr.read()
    import time

    time.sleep(0.3)  # the statement is sent and the driver is watching for waits
    signal_all(postmaster, signal.SIGSTOP)
    return proc


def test_frozen_postgresql_ends_the_run_with_exit_3_after_the_step_timeout(frozen_pg):
    import time

    proc = start_frozen_pg_run(*frozen_pg)
    frozen = time.monotonic()
    _, err = proc.communicate(timeout=60)
    took = time.monotonic() - frozen
    assert proc.returncode == 3, err
    assert err.splitlines()[-1].endswith(f"the server did not answer within {FROZEN_STEP_TIMEOUT_S} s")
    assert "Traceback" not in err
    # One step timeout for the monitor's query; the clean-up gives up on the silent server at
    # once. Loose: a busy machine must not fail this, a hang must.
    assert took < 2 * FROZEN_STEP_TIMEOUT_S, took


def test_ctrl_c_while_postgresql_is_frozen_exits_130_at_once(frozen_pg):
    import time

    proc = start_frozen_pg_run(*frozen_pg)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    sent = time.monotonic()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert time.monotonic() - sent < 2.0


def test_a_damaged_template_is_rebuilt_once(tmp_path):
    cache = {"XDG_CACHE_HOME": str(tmp_path)}
    first = cli("--engine", "postgresql", "run", "tests/data/postgresql/skip-locked.yaml", env=cache)
    assert first.returncode == 0, first.stderr
    (template,) = (tmp_path / "jobqueue-demo").glob("postgresql-*[!k]")  # not the .lock file
    (template / "global" / "pg_control").unlink()
    second = cli("--engine", "postgresql", "run", "tests/data/postgresql/skip-locked.yaml", env=cache)
    assert second.returncode == 0, second.stderr
    assert "rebuilding the cached PostgreSQL template once" in second.stderr
    assert (template / "global" / "pg_control").is_file()


def test_reset_session_leaves_a_fresh_session(pg_embedded):
    seam = pg_embedded.seam
    scratch = seam.scratch(pg_embedded, confine=True, answer_timeout=10.0)
    scratch.open()
    try:
        settings = pg_embedded.dialect.set_session([pg_embedded.dialect.isolation_setting("serializable")])
        session = seam.session("A", scratch, settings, 10.0)
        for sql in ("CREATE TEMP TABLE t (x INT)", "SET lock_timeout = '7s'", "SELECT pg_advisory_lock(42)", "BEGIN", "SELECT 1/0"):
            session.send(sql)
            session.read()
        assert seam.reset_session(session, scratch, settings)
        check = seam.answer(
            session.conn,
            "SELECT current_setting('transaction_isolation'), current_setting('lock_timeout'), "
            "(SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()), "
            "to_regclass('pg_temp.t') IS NULL",
        )
        assert check.rows == (("serializable", "0", "0", "t"),)
        session.close()
    finally:
        scratch.close()


def test_table_lock_queue_names_the_one_ahead(pg):
    report = run("table-lock-queue", pg)
    told = {w.session: (w.kind, w.blockers, w.lock, w.requested, [(e.session, e.how, e.mode, e.statement, e.waits_for) for e in w.edges])
            for w in waits(report)}
    assert told == {
        "B": ("table lock", ("A",), "jobs", "AccessExclusiveLock", [("A", "holds", "AccessShareLock", "", ())]),
        # C's RowShareLock conflicts only with B's queued request: pg_blocking_pids names the one
        # ahead, and pg_locks tells that B holds nothing there yet.
        "C": ("table lock", ("B",), "jobs", "RowShareLock", [("B", "queued ahead", "AccessExclusiveLock", "ALTER TABLE", ("A",))]),
    }
    assert completed(report, "C")[-1].result.rows == (("1",),)


def test_metadata_lock_lesson_tells_holders_and_queued_requests_apart(pg_embedded):
    """A holds nothing while its LOCK TABLE waits: C's claim is queued behind A's request, which
    waits for B; each mode is told as what it is, B's held, A's and C's asked."""
    from test_waits import queued_claim_views

    report = core.run(core.load("metadata-lock"), pg_embedded, 10.0)
    assert report.mismatches == []
    views = queued_claim_views(report.events)
    held = "waiting for a table lock held by B (jobs: A asks AccessExclusiveLock, B holds RowShareLock)"
    assert held in queued_claim_views(report.events, "A")["transcript"]
    told = ("waiting for a table lock, queued behind A's LOCK TABLE, which waits for B "
            "(jobs: C asks RowShareLock, A asks AccessExclusiveLock)")
    for view in ("transcript", "columns", "page"):
        assert told in views[view] and "held by A" not in views[view], (view, views[view])
    assert views["json"]["blockers"] == ["A"] and views["json"]["requested_mode"] == "RowShareLock"
    assert views["json"]["edges"] == [{"session": "A", "edge": "queued ahead", "mode": "AccessExclusiveLock",
                                       "statement": "LOCK TABLE", "waits_for": ["B"]}]


def test_a_stuck_run_follows_the_queued_request_on_postgresql(pg_embedded):
    with pytest.raises(StuckError) as stuck:
        core.run(core.load(str(ROOT / "tests" / "data" / "queued-behind-request.yaml")), pg_embedded, 10.0)
    assert (
        "C is queued behind A's request (table lock jobs, asking RowShareLock, in 'SELECT id FROM jobs WHERE id = 1 "
        "FOR UPDATE;'), which waits for B (table lock jobs, asking AccessExclusiveLock, in 'LOCK TABLE jobs IN ACCESS "
        "EXCLUSIVE MODE;'), which is idle in a transaction"
    ) in str(stuck.value)


def test_an_advisory_lock_wait_is_named_so(pg_embedded, tmp_path):
    lesson = tmp_path / "advisory.yaml"
    lesson.write_text(
        "title: two sessions on one advisory lock\nengines: [postgresql]\nsetup: CREATE TABLE t (x INT);\n"
        "sessions: [A, B]\nsteps:\n  - A: BEGIN;\n  - A: SELECT pg_advisory_xact_lock(42);\n"
        "  - B: SELECT pg_advisory_xact_lock(42);\n  - A: COMMIT;\n  - wait: B\n"
    )
    report = core.run(core.load(str(lesson)), pg_embedded, 10.0)
    (wait,) = waits(report)
    assert (wait.kind, wait.blockers, wait.requested) == ("advisory lock", ("A",), "ExclusiveLock")
    assert [(e.session, e.how, e.mode) for e in wait.edges] == [("A", "holds", "ExclusiveLock")]


def test_a_wait_for_a_safe_snapshot_is_seen_as_isolationtester_sees_it(pg):
    report = run("safe-snapshot", pg)
    (told,) = waits(report)
    assert (told.session, told.kind, told.blockers) == ("B", "safe snapshot", ("A",))
    assert completed(report, "B")[1].waited_ms is not None


def test_copy_to_stdout_and_from_stdin_answer_instead_of_hanging(pg_embedded):
    seam = pg_embedded.seam
    scratch = seam.scratch(pg_embedded, confine=True, answer_timeout=10.0)
    scratch.open()
    try:
        user = seam.user_connection(scratch, 5.0)
        assert seam.answer(user, "COPY (SELECT 1 UNION ALL SELECT 2) TO STDOUT").affected == 2
        seam.answer(user, "CREATE TABLE t (x INT)")
        refused = seam.answer(user, "COPY t FROM STDIN").error
        assert refused.code == "57014" and "sends no data" in refused.message
        assert seam.answer(user, "SELECT 3").rows == (("3",),)
        user.close()
    finally:
        scratch.close()


def test_a_big_result_is_read_a_row_at_a_time_and_counted(pg_embedded):
    report = run("big-result", pg_embedded)
    big, two = (e.result for e in completed(report, "A"))
    assert (len(big.rows), big.omitted, big.rows[-1]) == (1000, 199000, ("1000",))
    assert (two.columns, two.rows) == (("two",), (("2",),))


def test_matrix_is_refused_in_one_line_on_postgresql():
    done = cli("--engine", "postgresql", "run", "tests/data/postgresql/skip-locked.yaml", "--matrix", "isolation=read-committed,serializable")
    assert done.returncode == 2 and "--matrix sets MariaDB and MySQL server variables" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_dsn_role_that_is_no_superuser(pg_local):
    """CREATEDB and CREATEROLE are enough: the run's role is granted to it, so it may cancel
    and end the sessions' backends and reset their tables; without CREATEROLE, one line."""
    from jobqueue_demo.engine.postgresql.control import execute, quote

    # Not named like a run's role (jqd_...): another suite's sweep on this shared server would
    # drop it under the test.
    name = f"jqdtest_{secrets.token_hex(8)}"
    admin = pg_local.params.connect()
    execute(admin, f"CREATE ROLE {quote(name)} LOGIN CREATEDB CREATEROLE")
    dsn = f"postgresql://{name}@127.0.0.1:5432/test"
    try:
        done = cli("run", "tests/data/postgresql/waits.yaml", "--dsn", dsn)
        assert "ERROR:  canceling statement due to user request" in done.stdout, done.stderr
        explored = cli("explore", "tests/data/postgresql/skip-locked-explore.yaml", "--dsn", dsn)
        assert explored.returncode == 0 and "invariants hold in all 330" in explored.stdout, explored.stderr
        execute(admin, f"ALTER ROLE {quote(name)} NOCREATEROLE")
        refused = cli("run", "tests/data/postgresql/skip-locked.yaml", "--dsn", dsn)
        assert refused.returncode == 3 and "may not create the per-run role" in refused.stderr
        shared = cli("--allow-shared-user", "run", "tests/data/postgresql/skip-locked.yaml", "--dsn", dsn)
        assert shared.returncode == 0, shared.stderr
    finally:
        execute(admin, f"DROP ROLE {quote(name)}")
        admin.close()


def _segment(datadir: Path) -> tuple[str, str]:
    key, shmid = (datadir / "postmaster.pid").read_text().splitlines()[6].split()
    return key, shmid


def _segments() -> set[tuple[str, str]]:
    return {tuple(row.split()[:2]) for row in Path("/proc/sysvipc/shm").read_text().splitlines()[1:]}


def test_a_killed_embedded_postgresql_leaves_no_shared_memory():
    """SIGKILL of the postmaster skips its own clean-up: its System V segment stayed until
    the machine restarted, and its dynamic shared memory in /dev/shm with it."""
    from jobqueue_demo.engine.postgresql import control
    from jobqueue_demo.engine.postgresql.embedded import EmbeddedPostgres

    server = EmbeddedPostgres()
    server.start()
    try:
        segment = _segment(server.workdir / "data")
        assert segment in _segments()
        conn = server.params.connect()  # a backend attached to it
        assert control.value(conn, "SHOW dynamic_shared_memory_type") == "mmap"
        os.kill(server._process.pid, signal.SIGKILL)
    finally:
        server.stop()
    assert segment not in _segments()


def test_the_per_run_role_logs_in_by_scram_with_its_password_alone(pg_embedded):
    """Its password is stored as a SCRAM verifier made by the tool (one round: 128 random bits
    need no slowing down); the embedded server asks every such role for SCRAM, and a wrong
    password is refused."""
    from dataclasses import replace

    from jobqueue_demo.engine.postgresql.control import literal
    from jobqueue_demo.errors import ServerError

    scratch = pg_embedded.seam.scratch(pg_embedded, confine=True, answer_timeout=10.0, several_statements=True)
    scratch.open()
    try:
        stored = control.value(scratch.admin, f"SELECT rolpassword FROM pg_authid WHERE rolname = {literal(scratch.name)}")
        assert stored.startswith("SCRAM-SHA-256$1:")
        scratch.session_params.connect(database=scratch.name).close()
        with pytest.raises(ServerError, match="password authentication failed"):
            replace(scratch.session_params, password="0" * 32).connect(database=scratch.name)
    finally:
        scratch.close()
