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
    from jobqueue_demo.engine.postgresql.control import execute, quote, value
    from jobqueue_demo.engine.postgresql.server import parse_dsn

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
    from jobqueue_demo.engine.mysql.control import execute, value
    from jobqueue_demo.engine.mysql.scratch import quote
    from jobqueue_demo.engine.mysql.server import parse_dsn

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
    # An executable comment is refused as such, whatever its text: the server runs it.
    reason = "an executable comment .* is refused" if "/*" in sql and "!" in sql else "DIRECTORY would put a table's files outside"
    with pytest.raises(ScenarioError, match=reason) as refused:
        load_scenario(str(path))
    assert refused.value.line == line, str(refused.value)


# Each way round NO_DIR_IN_CREATE on a --dsn server (have_symlink=YES), refused at load: the
# file's line, what is refused.
BYPASSES = {
    "prepare-from-concat": (
        "steps:\n  - A: SET @s = CONCAT('CREATE TABLE t1 (v INT) DATA DIRE', 'CTORY = ''/tmp''');\n"
        "  - A: PREPARE s FROM @s;\n",
        6,
        r"PREPARE \.\.\. FROM anything but one string literal is refused",
    ),
    "execute-immediate-concat": (
        "steps:\n  - A: EXECUTE IMMEDIATE CONCAT('CREATE TABLE t1 (v INT) DATA DIRE', 'CTORY = ''/tmp''');\n",
        5,
        "EXECUTE IMMEDIATE anything but one string literal is refused",
    ),
    "procedure-after-set-sql-mode": (
        "setup: |\n  SET sql_mode = '';\n  CREATE PROCEDURE p() BEGIN\n"
        "    PREPARE s FROM 'CREATE TABLE t1 (v INT) DATA DIRE' 'CTORY = ''/tmp''';\n    EXECUTE s;\n  END;\n"
        "steps:\n  - A: CALL p();\n",
        5,
        "sql_mode is refused",
    ),
    "procedure-body-prepares-a-variable": (
        "setup: |\n  CREATE PROCEDURE p(q TEXT) BEGIN\n    PREPARE s FROM q;\n    EXECUTE s;\n  END;\n"
        "steps:\n  - A: CALL p(CONCAT('CREATE TABLE t1 (v INT) DATA DIRE', 'CTORY = ''/tmp'''));\n",
        6,
        r"PREPARE \.\.\. FROM anything but one string literal is refused",
    ),
    "set-statement": (
        "steps:\n  - A: PREPARE s FROM 'SELECT 1';\n  - A: SET STATEMENT sql_mode = '' FOR EXECUTE s;\n",
        6,
        "sql_mode is refused",
    ),
    "set-session-variable": ("steps:\n  - A: SET @@session.sql_mode = '';\n", 5, "sql_mode is refused"),
    "executable-comment": (
        "steps:\n  - A: SELECT 1;\n  - A: CREATE TABLE t1 (v INT) /*!DATA*/ DIRECTORY = '/tmp';\n",
        6,
        "an executable comment .* is refused",
    ),
    "prepared-literal": (
        "steps:\n  - A: |\n      PREPARE s FROM 'CREATE TABLE t1 (v INT)\n        DATA\\nDIRECTORY = ''/tmp''';\n",
        7,
        "DATA DIRECTORY would put a table's files outside",
    ),
    "sql-mode-spelt-by-an-escape": ("steps:\n  - A: \"EXECUTE IMMEDIATE 'SET sql_\\\\mode = 0'\"\n", 5, "sql_mode is refused"),
    # A captured value is sent as a literal of its own: inside quotes, its quotes end them.
    "capture-inside-quotes": (
        "steps:\n  - A: \"SELECT CONCAT(' , sql', '_mode = 0 #') AS v;\"\n    capture: v\n  - A: SET @a = ':v';\n",
        7,
        "a capture's :name inside quotes or a comment is refused",
    ),
    "capture-in-a-comment": (
        "steps:\n  - A: \"SELECT CONCAT(CHAR(10), ', sql', '_mode = 0 #') AS v;\"\n    capture: v\n  - A: \"SET @a = 1 # :v\"\n",
        7,
        "a capture's :name inside quotes or a comment is refused",
    ),
    "a-backslash-ends-the-quote": (
        "steps:\n  - A: \"SELECT 'a\\\\' /* '; SET sql_mode = ''; -- */\"\n",
        5,
        "sql_mode is refused",
    ),
}


@pytest.mark.parametrize("sql, line, refused", BYPASSES.values(), ids=BYPASSES.keys())
def test_a_way_round_no_dir_in_create_is_refused_at_its_line(tmp_path, sql, line, refused):
    from jobqueue_demo.errors import ScenarioError
    from jobqueue_demo.scenario.loader import load_scenario

    path = tmp_path / "bypass.yaml"
    path.write_text("title: files elsewhere\nsessions:\n  A:\n" + sql)
    with pytest.raises(ScenarioError, match=refused) as caught:
        load_scenario(str(path))
    assert caught.value.line == line, str(caught.value)


SQL_MODE_REFUSAL = (
    "sql_mode is refused, in a string too: the tool owns sql_mode: it keeps NO_DIR_IN_CREATE, "
    "which stops a table's files being put outside the server"
)


def test_the_refusal_is_one_line_exit_2(tmp_path):
    path = tmp_path / "bypass.yaml"
    path.write_text("title: files elsewhere\nsessions:\n  A:\n" + BYPASSES["set-session-variable"][0])
    done = cli("run", str(path))
    assert done.returncode == 2, done.stderr
    assert done.stderr == f"jobqueue-demo: {path}:5: A's statement: {SQL_MODE_REFUSAL}\n"


@pytest.mark.parametrize(
    "sql",
    ["PREPARE s FROM 'SELECT 1';", "EXECUTE IMMEDIATE 'SELECT ?' USING 1;", "XA PREPARE 'x';", "DEALLOCATE PREPARE s;"],
)
def test_plain_dynamic_sql_loads(tmp_path, sql):
    from jobqueue_demo.scenario.loader import load_scenario

    path = tmp_path / "plain.yaml"
    path.write_text(f"title: plain\nsessions:\n  A:\nsteps:\n  - A: {json.dumps(sql)}\n")
    assert load_scenario(str(path)).steps[0].sql == sql


def test_postgresql_scenarios_may_name_sql_mode(tmp_path):
    from jobqueue_demo.scenario.loader import load_scenario

    path = tmp_path / "pg.yaml"
    path.write_text("title: pg\nengines: [postgresql]\nsessions:\n  A:\nsteps:\n  - A: SELECT 'sql_mode' /*! x */;\n")
    assert load_scenario(str(path)).steps[0].sql == "SELECT 'sql_mode' /*! x */;"


def test_the_matrix_keeps_no_dir_in_create(local):
    """--matrix sql_mode=... is the operator's, and still keeps NO_DIR_IN_CREATE."""
    from jobqueue_demo.engine.mysql.control import value
    from jobqueue_demo.run.matrix import classify, combinations, parse_axes, session_settings

    (combination,) = combinations(classify(local, parse_axes(["sql_mode=ANSI"])))
    with closing(local.params.connect(database=None)) as conn:
        conn.query(local.dialect.set_session(list(session_settings(local, combination))).encode())
        modes = value(conn, "SELECT @@SESSION.sql_mode").split(",")
    assert "ANSI" in modes and "NO_DIR_IN_CREATE" in modes, modes


def _elsewhere_scenario(tmp_path, elsewhere: str) -> str:
    """What still loads and asks the server to write where the statement says: a routine the
    server may already have runs the SQL it is handed (sys.execute_prepared_stmt, made with an
    empty sql_mode, so without NO_DIR_IN_CREATE); then files by name, then what the table became."""
    hidden = [
        "CREATE TABLE ', DATABASE(), '.t1 (v INT) ENGINE=MyISAM "
        f"DATA DIRE', 'CTORY = ''{elsewhere}'' INDEX DIRE', 'CTORY = ''{elsewhere}''",
        f"CREATE TABLE ', DATABASE(), '.t2 (v INT) DATA DIRE', 'CTORY = ''{elsewhere}''",
        f"ALTER TABLE ', DATABASE(), '.t ENGINE=InnoDB DATA DIRE', 'CTORY = ''{elsewhere}''",
    ]
    steps = [f"CALL sys.execute_prepared_stmt(CONCAT('{text}'));" for text in hidden]
    steps += [f"SELECT 1 INTO DUMPFILE '{elsewhere}/dump';", f"LOAD DATA INFILE '{elsewhere}/../x' INTO TABLE t;"]
    steps += ["SHOW CREATE TABLE t;"]
    return _scenario(tmp_path, "", steps)


@pytest.mark.parametrize("shared_user", [False, True], ids=["per-run-user", "shared-user"])
def test_no_table_file_lands_outside_the_server(tmp_path, server, shared_user):
    with _elsewhere(server, shared_user) as (elsewhere, shared):
        results = _statements(*shared, "run", _elsewhere_scenario(tmp_path, str(elsewhere)), env=dsn_env(server))
        calls, (dump, load, created) = results[:3], results[3:]
        # The per-run user may not EXECUTE sys's routines (1370), where there is a sys (1305);
        # root's calls run, on the embedded server alone, which ignores the directories.
        errors = {c.get("error", {}).get("errno") for c in calls}
        assert errors <= ({None, 1305} if shared_user else {1370, 1305}), calls
        assert "DIRECTORY" not in json.dumps(created.get("result")), created
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
