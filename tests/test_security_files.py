"""What scenario SQL and the tool's own sweeps may touch: only what the tool made, and files
only inside the run's own directory, even when another local user is hostile."""

from __future__ import annotations

import json
import secrets
import shutil
import tempfile
from contextlib import closing, contextmanager
from pathlib import Path

import pytest

from conftest import LOCAL_DSN, LOCAL_PG_DSN, cli, dsn_env, local_pg_reachable, local_server_reachable

# -- the sweep drops only what the tool made ------------------------------------------------


def _look_alike() -> str:
    """A name the old sweep took for a run's (jqd_ and 16 hex digits, then more): random, so
    no other test's objects collide with it."""
    return f"jqd_{secrets.token_hex(8)}_important"


def _sweep_and_run(dsn: str) -> None:
    swept = cli("cleanup", "--dsn", dsn)
    assert swept.returncode == 0, swept.stderr
    ran = cli("run", "nowait", "--dsn", dsn)
    assert ran.returncode == 0, ran.stderr


@pytest.mark.skipif(not local_pg_reachable(), reason="no PostgreSQL on 127.0.0.1:5432")
def test_postgresql_sweep_keeps_a_look_alike_database():
    from jobqueue_demo.engine.pg_control import execute, quote, value
    from jobqueue_demo.engine.pg_server import parse_dsn

    params, name = parse_dsn(LOCAL_PG_DSN), _look_alike()
    with closing(params.connect()) as admin:
        execute(admin, f"CREATE DATABASE {quote(name)}")
        try:
            with closing(params.connect(database=name)) as inside:
                execute(inside, "CREATE TABLE precious (v int); INSERT INTO precious VALUES (42)")
            _sweep_and_run(LOCAL_PG_DSN)
            with closing(params.connect(database=name)) as inside:
                assert value(inside, "SELECT v FROM precious") == "42"
        finally:
            execute(admin, f"DROP DATABASE IF EXISTS {quote(name)} WITH (FORCE)")


@pytest.mark.skipif(not local_server_reachable(), reason="no server on 127.0.0.1:3306")
def test_mysql_sweep_keeps_a_look_alike_database():
    from jobqueue_demo.engine.control import execute, value
    from jobqueue_demo.engine.scratch import quote
    from jobqueue_demo.engine.server import parse_dsn

    name = _look_alike()
    with closing(parse_dsn(LOCAL_DSN).connect(database=None)) as admin:
        execute(admin, f"CREATE DATABASE {quote(name)}")
        try:
            execute(admin, f"CREATE TABLE {quote(name)}.precious (v INT)")
            execute(admin, f"INSERT INTO {quote(name)}.precious VALUES (42)")
            _sweep_and_run(LOCAL_DSN)
            assert value(admin, f"SELECT v FROM {quote(name)}.precious") == "42"
        finally:
            execute(admin, f"DROP DATABASE IF EXISTS {quote(name)}")


# -- an interrupted cleanup ---------------------------------------------------------------

INTERRUPTED_SWEEP = """
import os, sys
from pathlib import Path
from jobqueue_demo.engine.leftovers import sweep_dirs

files = int(sys.argv[2])
removed = []

def interrupt_before_the_last_file(event, args):
    # Ctrl-C as the sweep is about to remove the last of the run's files.
    if event == "os.remove" and os.path.basename(os.fsdecode(args[0])).startswith("file-"):
        removed.append(args[0])
        if len(removed) == files:
            raise KeyboardInterrupt

sys.addaudithook(interrupt_before_the_last_file)
try:
    sweep_dirs(folder=Path(sys.argv[1]))
except KeyboardInterrupt:
    print("interrupted")
"""


def test_an_interrupted_cleanup_leaves_the_marker_with_the_rest(tmp_path):
    import subprocess
    import sys

    from jobqueue_demo.engine.leftovers import sweep_dirs
    from jobqueue_demo.engine.owner import MARKER, hold

    files = 200
    run = tmp_path / "jobqueue-demo-killed"
    run.mkdir()
    for i in range(files):
        (run / f"file-{i:03}").write_bytes(b"x")
    hold(run).close()  # made last, as a directory's later entries; its run is gone
    done = subprocess.run(
        [sys.executable, "-c", INTERRUPTED_SWEEP, str(tmp_path), str(files)], capture_output=True, text=True, timeout=60
    )
    assert done.stdout == "interrupted\n", done.stderr
    left = {p.name for p in run.iterdir()}
    assert MARKER in left, f"the marker went before {len(left)} other file(s): no sweep would ever take them"
    assert len(left) == 2
    assert [f.name for f in sweep_dirs(folder=tmp_path).found] == [str(run)]
    assert not run.exists()


# -- files only where meant: a table's files -------------------------------------------------


@pytest.mark.parametrize(
    "sql, line",
    [
        ("steps:\n  - A: CREATE TABLE t (v INT) DATA DIRECTORY = '/tmp/x';\n", 5),
        ("steps:\n  - A: SELECT 1;\n  - A: ALTER TABLE t ENGINE=MyISAM index /* hidden */ Directory '/tmp/x';\n", 6),
        ("setup: |\n  CREATE TABLE a (v INT);\n  CREATE TABLE t (v INT)\n    DATA -- a comment\n    DIRECTORY '/x';\nsteps:\n  - A: SELECT 1;\n", 7),
        ("invariants:\n  - name: i\n    sql: SELECT 1 FROM t DATA DIRECTORY\n    expect: [[1]]\nsteps:\n  - A: SELECT 1;\n", 6),
        ("steps:\n  - A: CREATE TABLE t (v INT) ENGINE=MyISAM /*!DATA*/ DIRECTORY = '/tmp/x';\n", 5),
        ("steps:\n  - A: CREATE TABLE t (v INT) ENGINE=MyISAM /*M!100000 INDEX */DIRECTORY = '/tmp/x';\n", 5),
        ("steps:\n  - A: CREATE TABLE t (v INT) ENGINE=MyISAM DATA /*!DIRECTORY*/ = '/tmp/x';\n", 5),
    ],
    ids=["step", "hidden-by-a-comment", "setup", "invariant", "executable-comment", "mariadb-executable-comment", "inside-one"],
)
def test_scenario_sql_naming_a_directory_for_a_table_is_refused_at_its_line(tmp_path, sql, line):
    from jobqueue_demo.errors import ScenarioError
    from jobqueue_demo.scenario.loader import load_scenario

    path = tmp_path / "dir.yaml"
    path.write_text("title: files elsewhere\nsessions:\n  A:\n" + sql)
    with pytest.raises(ScenarioError, match="DIRECTORY would put a table's files outside") as refused:
        load_scenario(str(path))
    assert refused.value.line == line, str(refused.value)


def _elsewhere_scenario(tmp_path, elsewhere: str) -> str:
    """Each way to make the server write where the statement says, the words hidden from a
    reader of the text (PREPARE of a string built at run time), then what the tables became."""
    hidden = {
        "innodb": f"CREATE TABLE t1 (v INT) DATA DIRE' 'CTORY = ''{elsewhere}''",
        "myisam": f"CREATE TABLE t2 (v INT) ENGINE=MyISAM DATA DIRE' 'CTORY = ''{elsewhere}'' INDEX DIRE' 'CTORY = ''{elsewhere}''",
        "aria": f"CREATE TABLE t3 (v INT) ENGINE=Aria DATA DIRE' 'CTORY = ''{elsewhere}'' INDEX DIRE' 'CTORY = ''{elsewhere}''",
        "alter": f"ALTER TABLE t ENGINE=InnoDB DATA DIRE' 'CTORY = ''{elsewhere}''",
    }
    steps = []
    for text in hidden.values():
        steps += [f"SET @s = CONCAT('{text}');", "PREPARE s FROM @s;", "EXECUTE s;"]
    steps += [f"SELECT 1 INTO DUMPFILE '{elsewhere}/dump';", f"LOAD DATA INFILE '{elsewhere}/../x' INTO TABLE t;"]
    steps += [f"SHOW CREATE TABLE {table};" for table in ("t", "t1", "t2", "t3")]
    return _scenario(tmp_path, "", steps)


@pytest.mark.parametrize("shared_user", [False, True], ids=["per-run-user", "shared-user"])
def test_no_table_file_lands_outside_the_server(tmp_path, server, shared_user):
    with _elsewhere(server, shared_user) as (elsewhere, shared):
        results = _statements(*shared, "run", _elsewhere_scenario(tmp_path, str(elsewhere)), env=dsn_env(server))
        created = [r for r in results if r["statement"].startswith("SHOW CREATE")]
        assert len(created) == 4, results
        assert all("DIRECTORY" not in json.dumps(r.get("result")) for r in created), created
        dump, load = results[12:14]
        refused = {1290} if shared_user else {1045, 1227}  # secure_file_priv; no FILE privilege
        assert dump["error"]["errno"] in refused and load["error"]["errno"] in refused, (dump, load)
        assert list(elsewhere.iterdir()) == []


def _scenario(tmp_path, head: str, steps: list[str]) -> str:
    body = "".join(f"  - A: {json.dumps(step)}\n" for step in steps)
    path = tmp_path / "files.yaml"
    path.write_text(f"title: files elsewhere\n{head}sessions:\n  A:\nsetup: CREATE TABLE t (v INT);\nsteps:\n{body}")
    return str(path)


@contextmanager
def _elsewhere(info, shared_user: bool):
    """(a directory outside every run, world-writable as a server running as its own OS user
    could write in it, the global option for the user asked for); removed after."""
    if shared_user and not info.embedded:
        pytest.skip("--allow-shared-user on --dsn runs as the DSN's own account: its privileges are the owner's choice")
    folder = Path(tempfile.mkdtemp(prefix="jqd-test-elsewhere-"))
    folder.chmod(0o777)
    try:
        yield folder, ("--allow-shared-user",) if shared_user else ()
    finally:
        shutil.rmtree(folder)


def _statements(*args: str, env: dict | None = None) -> list[dict]:
    done = cli(*args, "--format", "json", env=env)
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stderr
    return [e for e in map(json.loads, done.stdout.splitlines()) if e["event"] == "statement"]


# -- files only where meant: PostgreSQL -------------------------------------------------------


def _pg_files_scenario(tmp_path, elsewhere: str) -> str:
    """Each way PostgreSQL reads or writes a file, or runs a program, for the role that may."""
    steps = [
        f"COPY (SELECT 1) TO '{elsewhere}/copy';",
        "COPY t FROM '/etc/hostname';",
        f"COPY (SELECT 1) TO PROGRAM 'touch {elsewhere}/program';",
        f"CREATE TABLESPACE jqd_test_ts LOCATION '{elsewhere}';",
        "SELECT pg_read_file('/etc/hostname');",
        f"SELECT lo_export(lo_from_bytea(0, 'x'), '{elsewhere}/lo');",
        "SELECT pg_ls_dir('.');",
        f"DO $$ BEGIN EXECUTE 'COPY (SELECT 1) TO ''' || '{elsewhere}/hidden' || ''''; END $$;",
    ]
    return _scenario(tmp_path, "engines: [postgresql]\n", steps)


@pytest.mark.parametrize("shared_user", [False, True], ids=["per-run-role", "shared-user"])
def test_postgresql_scenario_sql_reaches_no_file(tmp_path, pg, shared_user):
    with _elsewhere(pg, shared_user) as (elsewhere, shared):
        dsn = () if pg.embedded else ("--dsn", LOCAL_PG_DSN)
        results = _statements(*shared, "--engine", "postgresql", "run", _pg_files_scenario(tmp_path, str(elsewhere)), *dsn)
        assert [r.get("error", {}).get("sqlstate") for r in results] == ["42501"] * 8, results
        assert list(elsewhere.iterdir()) == []
