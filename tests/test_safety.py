"""Safety on a shared server: leftovers of killed runs swept, bounded drops, confinement, one-line errors."""

from __future__ import annotations

import json
import os
import re
import secrets
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import LOCAL_DSN, ROOT, cli, dsn_of, local_server_reachable

NEW_RUN = re.compile(r"^jqd_[0-9a-f]{16}$")
HELD = "scenarios/skip-locked.yaml"
needs_local = pytest.mark.skipif(not local_server_reachable(), reason="no server on 127.0.0.1:3306")


class HeldRun:
    """A `run --step` kept waiting for Enter: alive, with its scratch database made."""

    def __init__(self, *args: str, env: dict | None = None, scenario: str = HELD):
        full_env = {k: v for k, v in os.environ.items() if k != "JOBQUEUE_DEMO_DSN"}
        full_env.update(env or {})
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jobqueue_demo", *args, "run", scenario, "--step", "--format", "json"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=full_env, cwd=ROOT,
        )
        self.database = json.loads(self._line())["database"]

    def _line(self, timeout: float = 30) -> str:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            self.proc.kill()
            raise AssertionError("the run did not start: " + self.proc.stderr.read().decode())
        return self.proc.stdout.readline().decode()

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def finish(self, keys: bytes = b"", timeout: float = 60) -> tuple[int, str]:
        if keys:
            self.proc.stdin.write(keys)
        self.proc.stdin.close()
        self.proc.stdout.read()
        err = self.proc.stderr.read().decode()
        return self.proc.wait(timeout), err

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            stream.close()


def _root():
    from jobqueue_demo.engine.mysql.server import parse_dsn

    return parse_dsn(LOCAL_DSN).connect(database=None)


def _query(conn, sql: str) -> tuple:
    conn.query(sql.encode())
    stored = conn.store_result()
    rows = stored.fetch_row(0) if stored is not None else ()
    return tuple(tuple(v.decode() if isinstance(v, bytes) else v for v in row) for row in rows)


def _exists(conn, name: str) -> tuple[bool, bool]:
    """(database exists, per-run user exists) for a run's name."""
    database = bool(_query(conn, f"SELECT 1 FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = '{name}'"))
    user = bool(_query(conn, f"SELECT 1 FROM mysql.user WHERE User = '{name}'"))
    return database, user


def _until_its_run_is_gone(conn, name: str) -> None:
    """Wait (10 s at most) for the server to free a finished run's named lock. The run's DROP
    may still wait on the server for its lock_wait_timeout after the client gave up and left,
    and until it ends the run's connection, its lock with it, is alive to a sweep."""
    deadline = time.monotonic() + 10
    while _query(conn, f"SELECT IS_FREE_LOCK('{name}')") != (("1",),) and time.monotonic() < deadline:
        time.sleep(0.05)


# -- leftovers of killed runs ---------------------------------------------------------


def test_killed_embedded_run_leaves_a_dir_the_next_run_sweeps(server_tmp):
    env = {"TMPDIR": str(server_tmp)}
    dead, live = HeldRun(env=env), HeldRun(env=env)
    assert NEW_RUN.match(dead.database)
    dirs = set(server_tmp.glob("jobqueue-demo-*"))
    assert len(dirs) == 2
    dead.kill()
    dry = cli("cleanup", "--dry-run", env=env)
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.count("would remove directory") == 1
    swept = cli("cleanup", env=env)
    assert swept.returncode == 0, swept.stderr
    left = set(server_tmp.glob("jobqueue-demo-*"))
    assert len(left) == 1 and left < dirs, swept.stdout
    code, err = live.finish(b"q")
    assert code == 0, err
    assert not list(server_tmp.glob("jobqueue-demo-*"))


def test_a_killed_processes_marked_dir_is_swept_and_unmarked_ones_are_not(tmp_path):
    from jobqueue_demo.engine.leftovers import sweep_dirs

    ours, foreign = tmp_path / "pymp-ours", tmp_path / "pymp-foreign"
    ours.mkdir()
    foreign.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", f"import time; from pathlib import Path; from jobqueue_demo.engine.owner import hold; "
         f"h = hold(Path({str(ours)!r})); print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, cwd=ROOT,
    )
    assert holder.stdout.readline() == b"held\n"
    assert sweep_dirs(folder=tmp_path).found == []  # alive
    holder.kill()
    holder.wait()
    holder.stdout.close()
    found = sweep_dirs(folder=tmp_path).found
    assert [f.name for f in found] == [str(ours)]
    assert not ours.exists() and foreign.exists()


@pytest.mark.fast
def test_a_directory_its_run_died_before_marking_is_swept_once_stale(tmp_path):
    """A run killed between making its directory and marking it (a probe found an empty
    `jobqueue-demo-*` in /tmp): no marker would ever say whose it was, and it stayed for good.
    Only ours, untouched for a minute, holding at most a marker never renamed into place."""
    from jobqueue_demo.engine.leftovers import MARKER, UNMARKED_STALE_S, sweep_dirs

    empty, pending, busy, fresh = (tmp_path / f"jobqueue-demo-{n}" for n in ("empty", "pending", "busy", "fresh"))
    for folder in (empty, pending, busy, fresh):
        folder.mkdir()
    (pending / f"{MARKER}.12345").write_bytes(b"")
    (busy / "data").write_bytes(b"x")
    old = time.time() - UNMARKED_STALE_S - 5
    for folder in (empty, pending, busy):
        os.utime(folder, (old, old))
    found = sweep_dirs(folder=tmp_path).found
    assert sorted(f.name for f in found) == sorted([str(empty), str(pending)])
    assert not empty.exists() and not pending.exists() and busy.exists() and fresh.exists()


def _wait_lock_free(conn, name: str) -> None:
    """The server frees a killed client's named lock once it notices the closed socket: on a
    loaded machine that can take a moment."""
    deadline = time.monotonic() + 10
    while _query(conn, f"SELECT IS_FREE_LOCK('{name}')") != (("1",),) and time.monotonic() < deadline:
        time.sleep(0.05)


@pytest.mark.sweeps
@needs_local
def test_killed_dsn_run_is_swept_by_the_next_run_and_a_live_one_is_not():
    dsn = ("--dsn", LOCAL_DSN)
    conn = _root()
    try:
        dead = HeldRun(env={"JOBQUEUE_DEMO_DSN": LOCAL_DSN})
        live = HeldRun(env={"JOBQUEUE_DEMO_DSN": LOCAL_DSN})
        dead.kill()
        assert _exists(conn, dead.database) == (True, True)
        _wait_lock_free(conn, dead.database)
        dry = cli("cleanup", "--dry-run", *dsn)
        assert f"would remove database {dead.database}" in dry.stdout
        assert f"kept database {live.database} (its run is alive)" in dry.stdout
        assert _exists(conn, dead.database) == (True, True)
        # The next run on the server sweeps it.
        nxt = cli("run", "nowait", *dsn)
        assert nxt.returncode == 0, nxt.stderr
        assert _exists(conn, dead.database) == (False, False)
        assert _exists(conn, live.database) == (True, True)
        code, err = live.finish(b"q")
        assert code == 0, err
        assert _exists(conn, live.database) == (False, False)
    finally:
        conn.close()


@needs_local
@pytest.mark.parametrize(
    "signals", [(signal.SIGHUP,), (signal.SIGTERM,), (signal.SIGINT, signal.SIGINT)], ids=["hup", "term", "int-twice"]
)
def test_stop_signals_clean_up(signals):
    """SIGHUP and SIGTERM clean up as Ctrl-C does. For a second Ctrl-C to land during the clean-up, another
    client holds a table open for a second, which holds up the drop."""
    conn = _root()
    try:
        run = HeldRun(env={"JOBQUEUE_DEMO_DSN": LOCAL_DSN})
        assert _exists(conn, run.database) == (True, True)
        twice = len(signals) > 1
        if twice:
            _hold_table(conn, run.database)
        for signum in signals:
            run.signal(signum)
            time.sleep(0.3 if twice else 0)
        if twice:
            time.sleep(0.7)
            _query(conn, "COMMIT")
        code, err = run.finish()
        # Each signal named as itself, with the shell's code for it (128 + its number).
        assert code == 128 + signals[0], err
        said = {signal.SIGHUP: "hung up (SIGHUP", signal.SIGTERM: "terminated by SIGTERM", signal.SIGINT: "interrupted (Ctrl-C)"}
        assert said[signals[0]] in err, err
        assert signals[0] == signal.SIGINT or "Ctrl-C" not in err, err
        assert "Traceback" not in err
        assert _exists(conn, run.database) == (False, False)
    finally:
        conn.close()


def _hold_table(conn, database: str) -> None:
    """An open transaction that read a table keeps its metadata lock, which DROP DATABASE waits for."""
    _query(conn, "BEGIN")
    _query(conn, f"SELECT * FROM `{database}`.jobs")


# -- a bounded drop ---------------------------------------------------------------------


@pytest.mark.sweeps
def test_drop_blocked_by_another_client_is_bounded_and_names_it(server):
    """Named from the metadata lock table (embedded: MariaDB's plugin), else among open transactions."""
    conn = server.params.connect(database=None)
    dsn = dsn_of(server)
    try:
        run = HeldRun(env={"JOBQUEUE_DEMO_DSN": dsn})
        _hold_table(conn, run.database)
        me = conn.thread_id()
        began = time.monotonic()
        code, err = run.finish(b"\n" * 40)
        took = time.monotonic() - began
        assert code == 3, err
        lines = [line for line in err.splitlines() if line.startswith("jobqueue-demo:")]
        assert len(lines) == 1, err
        assert f"could not drop {run.database} within 3 s: " in lines[0]
        named = "held by" if server.embedded else "connections with an open transaction:"
        assert re.search(rf"{named} .*connection {me} \(root@", lines[0]), lines[0]
        assert took < 15
        if not server.embedded:  # a sweep meanwhile is bounded the same way (once is enough: 3 s)
            _until_its_run_is_gone(conn, run.database)
            blocked = cli("cleanup", "--dsn", dsn)
            assert blocked.returncode == 3 and f"could not drop {run.database} within 3 s" in blocked.stderr
        _query(conn, "COMMIT")
        _until_its_run_is_gone(conn, run.database)
        # Its lock is free: cleanup drops it now.
        swept = cli("cleanup", "--dsn", dsn)
        assert f"removed database {run.database}" in swept.stdout, swept.stdout + swept.stderr
        assert _exists(conn, run.database) == (False, False)
    finally:
        conn.close()


@pytest.mark.sweeps
@needs_local
def test_interrupted_run_says_which_connection_keeps_its_database():
    conn = _root()
    try:
        run = HeldRun(env={"JOBQUEUE_DEMO_DSN": LOCAL_DSN})
        _hold_table(conn, run.database)
        run.signal(signal.SIGINT)
        code, err = run.finish()
        assert code == 130, err
        assert f"could not drop {run.database} within 3 s" in err and f"connection {conn.thread_id()} (root@" in err
        _query(conn, "COMMIT")
        _until_its_run_is_gone(conn, run.database)
        assert f"removed database {run.database}" in cli("cleanup", "--dsn", LOCAL_DSN).stdout
    finally:
        conn.close()


# -- confinement ------------------------------------------------------------------------


def _escape_scenario(tmp_path: Path, canary: str, victim: int, extra: list[str]) -> Path:
    steps = [
        f"DROP DATABASE {canary};",
        f"UPDATE {canary}.t SET v = v + 1;",
        f"USE {canary};",
        f"DELETE FROM {canary}.t;",
        f"CREATE DATABASE {canary}_x;",
        "SET GLOBAL max_connections = @@global.max_connections;",
        f"KILL {victim};",
        "SELECT User FROM mysql.user;",
        "LOAD DATA LOCAL INFILE '/etc/hostname' INTO TABLE t;",
        "SELECT 1 INTO OUTFILE '/tmp/jqd-escape-test';",
        *extra,
    ]
    body = "\n".join(f"  - A: {json.dumps(s)}" for s in steps)
    path = tmp_path / "escape.yaml"
    path.write_text(
        "title: Scenario SQL tries to leave its scratch database\nsessions:\n  A:\n"
        "setup: |\n  CREATE TABLE t (v INT);\n"
        f"steps:\n{body}\n  - A: SELECT LOAD_FILE('/etc/hostname') AS f;\n"
    )
    return path


def _results(stdout: str) -> list[dict]:
    return [e for e in map(json.loads, stdout.splitlines()) if e["event"] == "statement"]


@needs_local
def test_scenario_sql_cannot_reach_outside_its_scratch_database(tmp_path):
    canary = f"jqdcanary_{secrets.token_hex(4)}"
    conn, victim = _root(), _root()
    try:
        _query(conn, f"CREATE DATABASE {canary}")
        _query(conn, f"CREATE TABLE {canary}.t (v INT)")
        _query(conn, f"INSERT INTO {canary}.t VALUES (1), (2), (3)")
        before = _query(conn, f"CHECKSUM TABLE {canary}.t")
        scenario = _escape_scenario(tmp_path, canary, victim.thread_id(), [])
        done = cli("run", str(scenario), "--format", "json", "--dsn", LOCAL_DSN)
        # Each refusal is an error where the scenario wrote no expectation: exit 1.
        assert done.returncode == 1, done.stderr
        results = _results(done.stdout)
        errors = [r.get("error", {}).get("errno") for r in results]
        assert errors[:8] == [1044, 1142, 1044, 1142, 1044, 1227, 1095, 1142], done.stdout
        assert errors[8] in (4166, 2068, 3948)  # LOAD DATA LOCAL: the client has it off
        assert errors[9] in (1045, 1227)  # no FILE privilege
        assert results[-1]["result"]["rows"] == [[None]]
        assert _query(conn, f"CHECKSUM TABLE {canary}.t") == before
        assert not _query(conn, f"SHOW DATABASES LIKE '{canary}\\_x'")
        victim.ping()
    finally:
        _query(conn, f"DROP DATABASE IF EXISTS {canary}")
        victim.close()
        conn.close()


def test_embedded_server_files_stay_in_its_own_directory(tmp_path):
    scenario = _escape_scenario(tmp_path, "mysql", 1, ["SHUTDOWN;"])
    confined = cli("run", str(scenario), "--format", "json")
    assert confined.returncode == 1, confined.stderr
    assert _results(confined.stdout)[10]["error"]["errno"] == 1227  # SHUTDOWN
    # Even with --allow-shared-user, which runs as the per-run user there too.
    files = tmp_path / "files.yaml"
    files.write_text(
        "title: files\nsessions:\n  A:\nsteps:\n  - A: SELECT 1 INTO OUTFILE '/tmp/jqd-escape-test';\n"
        "  - A: SELECT LOAD_FILE('/etc/hostname') AS f;\n  - A: SELECT CURRENT_USER() AS u;\n"
    )
    shared = cli("--allow-shared-user", "run", str(files), "--format", "json")
    results = _results(shared.stdout)
    assert results[0]["error"]["errno"] == 1227, shared.stdout  # no FILE privilege
    assert results[1]["result"]["rows"] == [[None]]
    assert results[2]["result"]["rows"][0][0].startswith("jqd_")
    assert not Path("/tmp/jqd-escape-test").exists()


# -- privileges the DSN's user lacks ----------------------------------------------------


@pytest.fixture
def limited():
    """A user of the test's own on 127.0.0.1:3306, dropped after; yields (conn as root, DSN, account)."""
    if not local_server_reachable():
        pytest.skip("no server on 127.0.0.1:3306")
    conn = _root()
    name, password = f"jqdt_{secrets.token_hex(4)}", secrets.token_hex(8)
    account = f"'{name}'@'127.0.0.1'"
    _query(conn, f"CREATE USER {account} IDENTIFIED BY '{password}'")
    try:
        yield conn, f"mysql://{name}:{password}@127.0.0.1:3306/", account
    finally:
        _query(conn, f"DROP USER IF EXISTS {account}")
        conn.close()


def _one_line(done: subprocess.CompletedProcess, code: int, *needles: str) -> None:
    assert done.returncode == code, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("jobqueue-demo:")]
    assert len(lines) == 1, done.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_missing_privileges_are_one_line_exit_3(limited):
    conn, dsn, account = limited
    # No CREATE USER: told so, and offered the way to run as before.
    _one_line(cli("run", "skip-locked", "--dsn", dsn), 3, "per-run user", "--allow-shared-user")
    # No CREATE on databases, for each command that makes a scratch database.
    for command in (["run", "skip-locked"], ["verify", "skip-locked"], ["export", "skip-locked"],
                    ["explore", "skip-locked-explore", "--max-schedules", "1"]):
        _one_line(cli("--allow-shared-user", *command, "--dsn", dsn), 3, "ERROR 1044")
    # Everything but PROCESS, with the per-run user: a lesson with a wait needs it.
    _query(conn, f"GRANT CREATE USER ON *.* TO {account}")
    _query(conn, f"GRANT ALL ON `jqd\\_%`.* TO {account} WITH GRANT OPTION")
    _one_line(cli("run", "for-update-waits", "--dsn", dsn), 3, "ERROR 1227", "PROCESS")
    before = {n for (n,) in _query(conn, "SELECT User FROM mysql.user WHERE User LIKE 'jqd\\_%'")}
    _query(conn, f"GRANT PROCESS ON *.* TO {account}")
    ok = cli("verify", "for-update-waits", "--dsn", dsn)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    after = {n for (n,) in _query(conn, "SELECT User FROM mysql.user WHERE User LIKE 'jqd\\_%'")}
    # Its per-run user was dropped. Another test's run at the same time holds its run's named
    # lock until it has dropped its own: a user left behind is one whose lock is free.
    assert not {n for n in after - before if NEW_RUN.match(n) and _query(conn, f"SELECT IS_FREE_LOCK('{n}')") == (("1",),)}


# -- bad values ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["--step-timeout", "inf"],
        ["--step-timeout", "nan"],
        ["--step-timeout", "1e20"],
        ["--pace", "nan"],
        ["--pace", "inf"],
        ["--dsn", "mysql://ro%00ot@127.0.0.1:3306/test"],
    ],
)
def test_bad_values_are_usage_errors(args):
    done = cli("run", "skip-locked", *args)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert len([line for line in done.stderr.splitlines() if line.strip()]) <= 6  # click's usage box


def test_cleanup_cache_removes_templates(tmp_path):
    """A damaged template is rebuilt by the next run (test_template_recovery.py); cleanup
    --cache removes templates on demand."""
    from jobqueue_demo.engine.mysql.embedded import TEMPLATE_META, find_server_binary
    from jobqueue_demo.engine.throwaway import CACHE_DIR_NAME

    template = tmp_path / CACHE_DIR_NAME / find_server_binary().template_key
    template.mkdir(parents=True)
    (template / TEMPLATE_META).write_text("{}")
    cleaned = cli("cleanup", "--cache", env={"XDG_CACHE_HOME": str(tmp_path)})
    assert cleaned.returncode == 0 and not template.exists(), cleaned.stdout + cleaned.stderr


def test_debug_keeps_the_exit_code():
    done = cli("--debug", "run", "skip-locked", "--dsn", "mysql://root@127.0.0.1:1/test")
    assert done.returncode == 3, done.stderr
    assert "Traceback" in done.stderr
