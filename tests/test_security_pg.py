"""Scenario SQL is untrusted (lesson files are downloaded and shared): nothing of it may run
with the rights of the DSN's role, which is usually a superuser.

Each scenario below plants a canary: a function that creates a role, which the per-run role
may not do (the error is swallowed, so the run goes on), and then gets some tool statement
to call it: an operator the wait monitor would pick, a CHECK, a RULE or a setval look-alike
fired by explore's restore, a trigger made where explore's survey did not look. The role
exists afterwards only if the canary ran with the DSN's rights. Each runs on the embedded
server (through its socket, so the role can be looked for after the run) and the local one.

Then which steps make explore rebuild (schema_change.py), and MariaDB's counterpart: an
SQL SECURITY INVOKER view made behind a comment, which explore's restore ran as root.
"""

from __future__ import annotations

import os
from contextlib import closing

import pytest
from conftest import LOCAL_PG_DSN, cli, dsn_of

from jobqueue_demo.engine.schema_change import changes_schema, may_write_rows

# Creates the role {canary} when its caller may (once); returns true either way.
CANARY = """
  CREATE FUNCTION public.canary() RETURNS boolean LANGUAGE plpgsql AS $f$
  BEGIN
    EXECUTE 'CREATE ROLE {canary}';
    RETURN true;
  EXCEPTION WHEN insufficient_privilege OR duplicate_object THEN
    RETURN true;
  END $f$;
"""
FIRE = """
  CREATE FUNCTION public.fire() RETURNS trigger LANGUAGE plpgsql AS $f$
  BEGIN PERFORM public.canary(); RETURN NULL; END $f$;
"""
JOBS = """
  CREATE TABLE jobs (id INT PRIMARY KEY);
  INSERT INTO jobs VALUES (1), (2);
"""
ONE_STEP = """
sessions: [A]
steps:
  - A: UPDATE jobs SET id = id + 10 WHERE id = 1;
"""


def _setup(*parts: str) -> str:
    return "setup: |\n" + "".join(parts)


def _steps(*sqls: str) -> str:
    return "sessions: [A]\nsteps:\n" + "".join(f"  - A: |\n      {sql}\n" for sql in sqls)


VECTORS = {
    # pg_blocking_pids(..) || pg_safe_snapshot_blocking_pids(..): an exact int[] || int[]
    # of the scenario's beats pg_catalog's polymorphic one. A plain run with a lock wait.
    "operator picked by the wait monitor": ("run", _setup(CANARY, """
  CREATE FUNCTION public.cat(a int[], b int[]) RETURNS int[] LANGUAGE plpgsql AS $f$
  BEGIN PERFORM public.canary(); RETURN pg_catalog.array_cat(a, b); END $f$;
  CREATE OPERATOR public.|| (LEFTARG = int[], RIGHTARG = int[], FUNCTION = public.cat);
""", JOBS) + """
sessions: [A, B]
steps:
  - A: BEGIN;
  - A: UPDATE jobs SET id = id WHERE id = 1;
  - B: UPDATE jobs SET id = id WHERE id = 1;
  - A: COMMIT;
"""),
    "CHECK fired by explore's restore": ("explore", _setup(CANARY, """
  CREATE TABLE jobs (id INT PRIMARY KEY CHECK (public.canary()));
  INSERT INTO jobs VALUES (1), (2);
""") + ONE_STEP),
    "RULE fired by explore's restore": ("explore", _setup(CANARY, JOBS, """
  CREATE TABLE seen (ok BOOLEAN);
  CREATE RULE canary AS ON INSERT TO jobs DO ALSO INSERT INTO seen SELECT public.canary();
""") + ONE_STEP),
    # setval('public."jobs_id_seq"', 3, true): integer, not pg_catalog's bigint.
    "setval look-alike called by explore's restore": ("explore", _setup(CANARY, """
  CREATE FUNCTION public.setval(s regclass, v integer, c boolean) RETURNS bigint LANGUAGE plpgsql AS $f$
  BEGIN PERFORM public.canary(); RETURN pg_catalog.setval(s, v, c); END $f$;
  CREATE TABLE jobs (id SERIAL PRIMARY KEY, task TEXT);
  INSERT INTO jobs (task) VALUES ('a'), ('b');
""") + _steps("INSERT INTO jobs (task) VALUES ('c');")),
    "trigger made in a DO block, fired by the next reset's TRUNCATE": ("explore", _setup(JOBS) + _steps(
        "DO $d$ BEGIN " + "".join(f"EXECUTE $e${' '.join(f.split()).rstrip(';')}$e$; " for f in (CANARY, FIRE))
        + "EXECUTE 'CREATE TRIGGER canary BEFORE TRUNCATE ON jobs EXECUTE FUNCTION public.fire()'; END $d$;"
    )),
    "trigger made by a function a step calls": ("explore", _setup(CANARY, FIRE, JOBS, """
  CREATE FUNCTION public.arm() RETURNS void LANGUAGE plpgsql AS $f$
  BEGIN EXECUTE 'CREATE TRIGGER canary BEFORE TRUNCATE ON jobs EXECUTE FUNCTION public.fire()'; END $f$;
""") + _steps("SELECT public.arm();")),
    # Without a dollar sign, which alone would make the step count as a change.
    "trigger made by DDL behind a comment": ("explore", _setup(JOBS) + _steps(
        "/* the canary */ CREATE FUNCTION public.fire() RETURNS trigger LANGUAGE plpgsql AS "
        "'BEGIN EXECUTE ''CREATE ROLE {canary}''; RETURN NULL; "
        "EXCEPTION WHEN insufficient_privilege THEN RETURN NULL; END';",
        "-- armed\n      CREATE TRIGGER canary BEFORE TRUNCATE ON jobs EXECUTE FUNCTION public.fire();",
    )),
}


def pg_dsn(info) -> str:
    """The server behind a fixture as a DSN: the embedded one by its socket directory."""
    if info.params.socket_dir:
        return f"postgresql://{info.params.user}@:{info.params.port}/postgres?host={info.params.socket_dir}"
    return LOCAL_PG_DSN


def role_exists(info, name: str) -> bool:
    from jobqueue_demo.engine.postgresql.control import flag, literal

    with closing(info.params.connect()) as conn:
        return flag(conn, f"SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = {literal(name)})")


def drop_role(info, name: str) -> None:
    from jobqueue_demo.engine.postgresql.control import execute, quote

    with closing(info.params.connect()) as conn:
        execute(conn, f"DROP ROLE IF EXISTS {quote(name)}")


@pytest.mark.parametrize("vector", sorted(VECTORS))
def test_scenario_code_never_runs_as_the_dsn_role(pg, tmp_path, vector):
    command, text = VECTORS[vector]
    canary = f"canary_pgconfine_{os.urandom(6).hex()}"  # no sweep of the tool matches it
    path = tmp_path / "vector.yaml"
    path.write_text("title: an untrusted lesson\nengines: [postgresql]\n" + text.replace("{canary}", canary))
    try:
        done = cli(command, str(path), "--dsn", pg_dsn(pg), timeout=60)
        assert done.returncode in (0, 1), done.stderr  # 1: an expectation or invariant failed
        assert not role_exists(pg, canary), f"{vector}: scenario code ran as the DSN's role"
    finally:
        drop_role(pg, canary)


def test_a_spec_whose_setup_makes_a_role_is_refused_and_told_why(pg, tmp_path):
    """PostgreSQL's own specs make roles (CLUSTER's, for one): run as the per-run role the
    setup is refused, the run ends as isolationtester's would, and the error line says what
    runs a spec with the DSN's rights; no role is made."""
    canary = f"canary_pgspec_{os.urandom(6).hex()}"
    spec = tmp_path / "makes-a-role.spec"
    spec.write_text(f"setup {{ CREATE ROLE {canary}; }}\nteardown {{ DROP ROLE {canary}; }}\n"
                    "session s1\nstep s1a { SELECT 1; }\n")
    try:
        told = cli("run", str(spec), "--dsn", pg_dsn(pg), timeout=60)
        assert told.returncode == 2, told.stderr
        assert "setup failed: ERROR:  permission denied to create role" in told.stderr, told.stderr
        assert "--allow-shared-user runs it as the DSN's own account" in told.stderr, told.stderr
        assert len(told.stderr.strip().splitlines()) == 1, told.stderr
        # isolationtester's own words only, as it prints them for a role that may not make roles
        same = cli("run", str(spec), "--dsn", pg_dsn(pg), "--format", "isolationtester", timeout=60)
        assert same.returncode == 1
        assert same.stdout + same.stderr == (
            "Parsed test spec with 1 sessions\n\nstarting permutation: s1a\n"
            "setup failed: ERROR:  permission denied to create role\n"
        ), same.stdout + same.stderr
        assert not role_exists(pg, canary)
    finally:
        drop_role(pg, canary)


def test_the_control_connection_resolves_only_catalog_names(pg):
    scratch = pg.seam.scratch(pg, confine=True, answer_timeout=10.0)
    scratch.open()
    try:
        from jobqueue_demo.engine.postgresql.control import rows

        assert scratch.rows("SHOW search_path") == rows(scratch.admin, "SHOW search_path") == (("",),)
        # A policy of the scenario's is an error there, never run as the DSN's role.
        assert scratch.rows("SHOW row_security") == (("off",),)
    finally:
        scratch.close()


def test_the_restore_runs_as_the_per_run_role(pg_embedded):
    """Whatever the survey says, the restore's writes fire the scenario's code with the
    scenario's rights: here a trigger that records who wrote the row."""
    from jobqueue_demo.engine.postgresql.session import answer

    scratch = pg_embedded.seam.scratch(pg_embedded, confine=True, answer_timeout=10.0)
    scratch.open()
    try:
        user = pg_embedded.seam.user_connection(scratch, 10.0)
        answer(user, "CREATE TABLE writers (who TEXT); CREATE TABLE jobs (id INT PRIMARY KEY); INSERT INTO jobs VALUES (1)")
        snapshot = pg_embedded.seam.snapshot(scratch, ("jobs",), user)
        answer(user, "CREATE FUNCTION note() RETURNS trigger LANGUAGE plpgsql AS $f$ BEGIN "
                     "INSERT INTO public.writers VALUES (current_user); RETURN NEW; END $f$")
        answer(user, "CREATE TRIGGER note BEFORE INSERT ON jobs FOR EACH ROW EXECUTE FUNCTION note()")
        snapshot.restore()
        assert answer(user, "SELECT DISTINCT who FROM writers").rows == ((scratch.name,),)
        user.close()
    finally:
        scratch.close()


# Steps that may change the schema, as each engine reads them: explore must rebuild.
SCHEMA_CHANGES = {
    "postgresql": (
        "/* a comment */ CREATE TRIGGER t BEFORE TRUNCATE ON jobs EXECUTE FUNCTION f()",
        "-- a comment\nALTER TABLE jobs ADD COLUMN x INT",
        "/* nested /* comments */ still */ DROP TABLE jobs",
        "DO $$ BEGIN EXECUTE 'CREATE TABLE x ()'; END $$",
        "CALL make_things()",
        "SELECT 1; CREATE TABLE x (id INT)",
        "SELECT ';' AS semicolon; CREATE TABLE x (id INT)",
        "SELECT * INTO copy FROM jobs",
        "EXPLAIN ANALYZE CREATE TABLE x AS SELECT 1",
        "SELECT E'\\''; CREATE TABLE x (id INT); --'",
        "(SELECT 1); TRUNCATE jobs",
        "SELECT 1 -- a comment\r; CREATE TABLE x (id INT)",
    ),
    "mysql": (
        "/*! CREATE TABLE x (id INT) */",
        "/*M! CREATE TABLE x (id INT) */",
        "/* a comment */ RENAME TABLE jobs TO j",
        "# a comment\nCREATE VIEW v AS SELECT 1",
        "SELECT 1--1; CREATE TABLE x (id INT)",
        "SELECT '\\''; CREATE TABLE x (id INT); #'",
        "PREPARE s FROM @text",
        "CALL p()",
        "DO f()",
        "SET STATEMENT max_statement_time = 0 FOR CREATE TABLE x (id INT)",
        "SET STATEMENT a = 1 FOR SET STATEMENT b = 2 FOR DROP TABLE jobs",
        "BEGIN NOT ATOMIC EXECUTE IMMEDIATE 'CREATE TABLE x (id INT)'; END",
    ),
}


@pytest.mark.parametrize("engine, sql", [(engine, sql) for engine, sqls in SCHEMA_CHANGES.items() for sql in sqls])
def test_a_step_that_may_change_the_schema_is_seen(engine, sql):
    assert changes_schema(sql, mysql=engine == "mysql")


@pytest.mark.parametrize("sql", [
    "SELECT id, task FROM jobs WHERE state = 'queued' -- the claim\nORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED;",
    "/* claim */ UPDATE jobs SET state = 'done' WHERE id = 1;",
    "INSERT INTO jobs (id) VALUES (3);",
    "WITH c AS (SELECT id FROM jobs) INSERT INTO done SELECT id FROM c",
    "BEGIN; SELECT 1; COMMIT;",
    "SELECT 'it''s; CREATE' AS text",
    "SET STATEMENT max_statement_time = 1 FOR SELECT id FROM jobs FOR UPDATE",
])
def test_rows_only_steps_keep_the_snapshot(sql):
    assert not changes_schema(sql, mysql=False) and not changes_schema(sql, mysql=True)


@pytest.mark.parametrize("sql", [
    "/* claim */ UPDATE jobs SET state = 'done' WHERE id = 1;",
    "INSERT INTO jobs (id) VALUES (3)",
    "delete from jobs",
    "SELECT 1; UPDATE jobs SET state = 'x'",
    "WITH gone AS (DELETE FROM jobs RETURNING id) SELECT id FROM gone",
    "SELECT * INTO copy FROM jobs",
    "COPY jobs FROM STDIN",
    "EXPLAIN ANALYZE UPDATE jobs SET state = 'x'",
    "MERGE INTO jobs USING done ON jobs.id = done.id WHEN MATCHED THEN DELETE",
    "(SELECT 1); TRUNCATE jobs",
    "SELECT $$x$$; -- dollar quoting: read as unclear",
])
def test_a_step_that_may_write_a_row_is_seen(sql):
    assert may_write_rows(sql, mysql=False)


@pytest.mark.parametrize("sql", [
    "SELECT id, task FROM jobs WHERE state = 'queued' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED;",
    "BEGIN; SELECT 1; COMMIT;",
    "ROLLBACK;",
    "SELECT 'UPDATE jobs' AS text",
    "LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE",
    "SET lock_timeout = '1s'",
    "-- UPDATE in a comment\nTABLE jobs",
])
def test_a_step_that_writes_no_row_is_told_apart(sql):
    assert not may_write_rows(sql, mysql=False)


# -- MariaDB ---------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["embedded", "local"])
def test_an_invoker_view_made_behind_a_comment_never_runs_as_root(request, tmp_path, where):
    """A view and a function of SQL SECURITY INVOKER run with the rights of whoever reads or
    writes through them: the restore's DELETE must not be root's, nor take a view for the table."""
    from jobqueue_demo.engine.mysql.control import execute, value

    info = request.getfixturevalue(where)
    canary = f"canary_pgconfine_{os.urandom(6).hex()}"
    path = tmp_path / "vector.yaml"
    path.write_text(f"""title: an untrusted lesson
setup: |
  CREATE TABLE jobs (id INT PRIMARY KEY);
  INSERT INTO jobs VALUES (1), (2);
  CREATE FUNCTION canary() RETURNS INT SQL SECURITY INVOKER MODIFIES SQL DATA
  BEGIN
    DECLARE CONTINUE HANDLER FOR SQLEXCEPTION BEGIN END;
    INSERT INTO {canary}.hits VALUES (1);
    RETURN 1;
  END;
sessions: [A]
steps:
  - A: /* hidden */ RENAME TABLE jobs TO jobs_real;
  - A: /* hidden */ CREATE SQL SECURITY INVOKER VIEW jobs AS SELECT * FROM jobs_real WHERE canary() = 1;
""")
    with closing(info.params.connect(database=None, multi_statements=True)) as conn:
        # MyISAM: a row written inside the restore's transaction stays, whatever follows.
        execute(conn, f"CREATE DATABASE {canary}; CREATE TABLE {canary}.hits (n INT) ENGINE=MyISAM")
        try:
            cli("explore", str(path), "--dsn", dsn_of(info), timeout=60)
            assert value(conn, f"SELECT COUNT(*) FROM {canary}.hits") == "0"
        finally:
            execute(conn, f"DROP DATABASE {canary}")
