"""The PostgreSQL engine on real servers: the embedded one each test session starts, and the
local cluster on 127.0.0.1:5432 when it answers. Skipped only where no PostgreSQL server
binaries are installed (make install installs them)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import ROOT, cli
from jobqueue_demo import api as core
from jobqueue_demo.errors import ServerError
from jobqueue_demo.run import events as ev
from test_interrupt import interrupt_while_waiting, start

DATA = ROOT / "tests" / "data" / "postgresql"
LOCAL_PG_DSN = os.environ.get("JOBQUEUE_DEMO_TEST_PG_DSN", "postgresql://root@127.0.0.1:5432/test")


def _binaries_missing() -> str | None:
    from jobqueue_demo.engine.pg_server import find_binaries

    try:
        find_binaries()
    except ServerError as e:
        return str(e)
    return None


MISSING = _binaries_missing()
pytestmark = pytest.mark.skipif(MISSING is not None, reason=f"no PostgreSQL server binaries: {MISSING}")


def local_pg_reachable() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 5432), timeout=1):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def pg_embedded():
    from jobqueue_demo.engine.server import open_server

    with open_server(None, engine="postgresql") as info:
        yield info


@pytest.fixture(scope="module")
def pg_local():
    if not local_pg_reachable():
        pytest.skip("no PostgreSQL on 127.0.0.1:5432")
    from jobqueue_demo.engine.server import open_server

    with open_server(LOCAL_PG_DSN) as info:
        yield info


@pytest.fixture(params=["pg_embedded", "pg_local"])
def pg(request):
    return request.getfixturevalue(request.param)


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
    assert first.lock.startswith("jobs tuple (0,1)")
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


def test_kill_terminates_the_backend_and_its_claim_comes_back(pg):
    report = run("kill-worker", pg)
    fault = next(e for e in report.events if isinstance(e, ev.FaultApplied))
    assert fault.detail == "the server ended the session and rolled back its transaction"
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
    report = run("deadlock", pg)
    (shown,) = [e for e in report.events if isinstance(e, ev.LocksShown)]
    assert shown.columns[0] == "session" and "pg_locks" in shown.note


def test_the_scratch_database_and_role_are_dropped(pg):
    report = run("skip-locked", pg)
    assert report.mismatches == []
    database = next(e for e in report.events if isinstance(e, ev.RunStarted)).database
    conn = pg.params.connect()
    try:
        left = conn.execute("SELECT datname FROM pg_database UNION ALL SELECT rolname FROM pg_roles").fetchall()
    finally:
        conn.close()
    assert database.startswith("jqd_") and database not in {r[0] for r in left}


def test_snapshot_restores_rows_and_sequences(pg_embedded):
    from jobqueue_demo.engine.pg_session import answer

    scratch = pg_embedded.seam.scratch(pg_embedded)
    scratch.open()
    try:
        user = scratch.session_params.connect()
        answer(user, "CREATE TABLE jobs (id SERIAL PRIMARY KEY, state TEXT, twice INT GENERATED ALWAYS AS (id * 2) STORED)")
        answer(user, "INSERT INTO jobs (state) VALUES ('queued'), ('queued')")
        survey = pg_embedded.seam.survey(scratch)
        assert (survey.tables, survey.obstacle) == (("jobs",), None)
        snapshot = pg_embedded.seam.snapshot(scratch, survey.tables)
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


def _private_tmp() -> Path:
    # Not pytest's tmp_path: as root the server runs as postgres, which cannot enter /tmp/pytest-of-root.
    folder = Path(tempfile.mkdtemp(prefix="jqd-test-"))
    folder.chmod(0o755)
    return folder


def _left_in(folder: Path) -> tuple[list[str], str]:
    dirs = [p.name for p in folder.iterdir() if p.name.startswith("jobqueue-demo-")]
    alive = subprocess.run(["pgrep", "-f", str(folder)], capture_output=True, text=True).stdout.strip()
    return dirs, alive


def test_ctrl_c_stops_and_removes_the_embedded_postgresql():
    folder = _private_tmp()
    try:
        proc = start("--engine", "postgresql", "run", "tests/data/long-wait.yaml", "--step-timeout", "60", env={"TMPDIR": str(folder)})
        code, out, err = interrupt_while_waiting(proc)
        assert code == 130, err
        assert "waiting for a row lock held by A" in out and "Traceback" not in err
        assert _left_in(folder) == ([], "")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_sigkill_of_the_cli_takes_the_server_with_it_and_the_next_run_sweeps(tmp_path):
    folder = _private_tmp()
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
    from jobqueue_demo.engine.pg_session import answer

    scratch = pg.seam.scratch(pg)
    scratch.open()
    try:
        user = pg.seam.user_connection(scratch, 10.0)
        assert answer(user, "SELECT current_user").rows == ((scratch.name,),)
        refused = answer(user, "CREATE DATABASE jqd_should_not_exist").error
        assert refused.code == "42501" and str(refused).startswith("ERROR:  permission denied")
        user.close()
    finally:
        scratch.close()


def test_cleanup_drops_a_dead_runs_database_and_role_only(pg_local):
    from jobqueue_demo.engine.pg_control import execute, flag, quote
    from jobqueue_demo.engine.scratch import new_name

    dead, alive = new_name(), new_name()
    admin, holder = pg_local.params.connect(), pg_local.params.connect()
    try:
        for name in (dead, alive):
            execute(admin, f"CREATE DATABASE {quote(name)}")
            execute(admin, f"CREATE ROLE {quote(name)}")
        assert flag(holder, f"SELECT pg_try_advisory_lock(hashtext('{alive}'))")  # as a live run holds it
        done = cli("cleanup", "--dsn", LOCAL_PG_DSN)
        assert done.returncode == 0, done.stderr
        assert f"removed database {dead}" in done.stdout and f"removed user {dead}" in done.stdout
        left = {r[0] for r in admin.execute("SELECT datname FROM pg_database UNION ALL SELECT rolname FROM pg_roles").fetchall()}
        assert dead not in left and alive in left
        assert f"kept database {alive} (its run is alive)" in done.stdout
    finally:
        holder.close()
        execute(admin, f"DROP DATABASE IF EXISTS {quote(alive)}")
        execute(admin, f"DROP ROLE IF EXISTS {quote(alive)}")
        admin.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="the server runs as the postgres user only when we are root")
def test_a_run_dir_the_postgres_user_cannot_reach_is_one_line_and_left_clean():
    folder = Path(tempfile.mkdtemp(prefix="jqd-test-private-"))  # mode 0700, root's
    try:
        done = cli("--engine", "postgresql", "run", "tests/data/postgresql/skip-locked.yaml", env={"TMPDIR": str(folder)})
        assert done.returncode == 3 and "point TMPDIR at a directory it can enter" in done.stderr
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
