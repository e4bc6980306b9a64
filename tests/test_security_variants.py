"""Variants of the ways in that tests/test_security_*.py close: each a look-alike of a vector
already handled that the first fix did not see."""

from __future__ import annotations

import secrets
from contextlib import closing

import pytest
from conftest import cli, dsn_of
from test_security_pg import CANARY, drop_role, pg_dsn, role_exists

# -- the sweep drops only exact run names ----------------------------------------------------


def _newline_look_alike() -> str:
    """jqd_ and 16 hex digits, then a newline: a regular expression's `$` matches before it."""
    return f"jqd_{secrets.token_hex(8)}\n"


def _dry_sweep_with(info, admin, execute, make: str, remove: str) -> list[str]:
    """What a dry-run sweep of the server names while the object `make` makes exists."""
    execute(admin, make)
    try:
        return [f.name for f in info.seam.sweep(info.params, dry_run=True).found]
    finally:
        execute(admin, remove)


def test_postgresql_sweep_keeps_a_database_named_like_a_run_and_a_newline(pg):
    from jobqueue_demo.engine.postgresql.control import execute, quote

    name = quote(_newline_look_alike())
    with closing(pg.params.connect()) as admin:
        found = _dry_sweep_with(pg, admin, execute, f"CREATE DATABASE {name}", f"DROP DATABASE IF EXISTS {name}")
    assert name.strip('"') not in found, "the sweep would drop somebody's database"


def test_mysql_sweep_keeps_a_user_named_like_a_run_and_a_newline(server):
    from jobqueue_demo.engine.mysql.control import execute
    from jobqueue_demo.engine.mysql.scratch import literal

    account = f"{literal(_newline_look_alike())}@'jqdtest-nowhere'"
    with closing(server.params.connect(database=None)) as admin:
        found = _dry_sweep_with(server, admin, execute, f"CREATE USER {account}", f"DROP USER IF EXISTS {account}")
    assert account not in found, "the sweep would drop somebody's user"


# -- explore rebuilds when the scenario's SQL may change the schema --------------------------


def test_an_invariant_that_changes_the_schema_makes_explore_rebuild(embedded, tmp_path):
    """Invariants run between schedules, several statements a query: one that makes a trigger
    would have it fire inside the next restore, as a step's would."""
    path = tmp_path / "invariant.yaml"
    path.write_text("""title: an invariant that arms a trigger
setup: |
  CREATE TABLE jobs (id INT PRIMARY KEY);
  CREATE TABLE hits (n INT);
  INSERT INTO jobs VALUES (1), (2);
sessions: [A, B]
steps:
  - A: UPDATE jobs SET id = id + 10 WHERE id = 1;
  - B: UPDATE jobs SET id = id + 20 WHERE id = 2;
invariants:
  - name: arms a trigger
    sql: CREATE TRIGGER IF NOT EXISTS armed AFTER INSERT ON jobs FOR EACH ROW INSERT INTO hits VALUES (1); SELECT 1
    expect: [[1]]
""")
    done = cli("explore", str(path), "--dsn", dsn_of(embedded), timeout=60)
    reset = next(line for line in done.stdout.splitlines() if line.startswith("reset:"))
    assert "rebuilt" in reset, reset


# -- PostgreSQL: a DSN role that is not a superuser -----------------------------------------


@pytest.fixture
def creatrole_dsn(pg_local):
    """A DSN whose role may create roles and databases but is no superuser: it becomes a
    member of each run's role, so it owns the scenario's tables as far as PostgreSQL cares."""
    from jobqueue_demo.engine.postgresql.control import execute, quote

    name = f"jqdtest_{secrets.token_hex(8)}"  # no run's name: no sweep takes it
    with closing(pg_local.params.connect()) as admin:
        execute(admin, f"CREATE ROLE {quote(name)} LOGIN CREATEDB CREATEROLE")
        try:
            yield f"postgresql://{name}@127.0.0.1:5432/postgres"
        finally:
            execute(admin, f"DROP ROLE {quote(name)}")


POLICY_SETUP = """title: a policy on the jobs
engines: [postgresql]
setup: |
{functions}  CREATE TABLE jobs (id INT PRIMARY KEY);
  INSERT INTO jobs VALUES (1), (2);
  ALTER TABLE jobs ENABLE ROW LEVEL SECURITY;
  ALTER TABLE jobs FORCE ROW LEVEL SECURITY;
  CREATE POLICY everyone ON jobs USING ({policy});
sessions: [A, B]
steps:
  - A: UPDATE jobs SET id = id + 10 WHERE id = 1;
  - B: UPDATE jobs SET id = id + 20 WHERE id = 2;
"""
# In setup's connection's temporary schema, which lives as long as the run: no survey of
# `public` sees it. Creates a role when its caller may; the per-run role may not.
TEMP_CANARY = CANARY.replace("CREATE FUNCTION public.", "CREATE OR REPLACE FUNCTION pg_temp.")


def test_a_policy_never_runs_as_a_dsn_role_that_is_no_superuser(pg_local, creatrole_dsn, tmp_path):
    """Explore's copy of the tables reads them as the DSN's role, where a policy runs as its
    reader: here one calling a temporary function that makes a role."""
    canary = f"canary_pgconfine_{secrets.token_hex(6)}"
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY_SETUP.format(functions=TEMP_CANARY.format(canary=canary), policy="pg_temp.canary()"))
    try:
        done = cli("explore", str(path), "--dsn", creatrole_dsn, timeout=60)
        assert done.returncode in (0, 1), done.stderr
        assert not role_exists(pg_local, canary), "scenario code ran as the DSN's role"
    finally:
        drop_role(pg_local, canary)


def test_a_policy_makes_explore_rebuild(creatrole_dsn, tmp_path):
    """A policy of built-in functions only: it filtered the DSN role's copy (none of the rows
    the per-run role sees), so a restore emptied the table."""
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY_SETUP.format(functions="", policy="current_user::text NOT LIKE 'jqdtest%'"))
    done = cli("explore", str(path), "--dsn", creatrole_dsn, timeout=60)
    reset = next(line for line in done.stdout.splitlines() if line.startswith("reset:"))
    assert "rebuilt" in reset and "row-level security" in reset, reset


def test_postgresql_sweep_keeps_a_role_named_like_a_run_that_owns_a_database(pg_embedded):
    """A run drops its database before its role, so a role of a run's name that still owns
    something elsewhere is not a run's leftover: kept and told, and no run fails for it (the
    sweep starts every run on the server). On the embedded server: on a shared one every other
    suite's runs would meet it too."""
    from jobqueue_demo.engine.postgresql.control import execute, quote

    role, database = f"jqd_{secrets.token_hex(8)}", f"jqdtest_{secrets.token_hex(8)}"
    with closing(pg_embedded.params.connect()) as admin:
        execute(admin, f"CREATE ROLE {quote(role)}")
        execute(admin, f"CREATE DATABASE {quote(database)} OWNER {quote(role)}")
        try:
            swept = pg_embedded.seam.sweep(pg_embedded.params)
            assert role in " ".join(swept.problems), swept
            assert role not in [f.name for f in swept.found if f.action == "removed"]
        finally:
            execute(admin, f"DROP DATABASE IF EXISTS {quote(database)}")
            execute(admin, f"DROP ROLE IF EXISTS {quote(role)}")


def test_an_event_makes_explore_rebuild(server):
    """An event setup made runs its DDL on the server's schedule, between any two steps, where
    no step's text shows it (a shared server may have the event scheduler on)."""
    from jobqueue_demo.engine.mysql.control import execute

    scratch = server.seam.scratch(server, several_statements=True)
    scratch.open()
    try:
        with closing(server.seam.user_connection(scratch, 10.0)) as user:
            execute(user, "CREATE TABLE jobs (id INT PRIMARY KEY); "
                          "CREATE EVENT rename_jobs ON SCHEDULE EVERY 1 SECOND DO RENAME TABLE jobs TO gone")
            assert server.seam.survey(scratch).obstacle == "events could change the schema between steps"
    finally:
        scratch.close()


# -- the sweep of temporary directories ------------------------------------------------------

# Another local user's move in /tmp, made as the sweep takes a dead run's marker lock:
# the directory renamed away and a symlink to the victim's folder put in its place.
SWAPPED_SWEEP = """
import os, sys
from pathlib import Path
from jobqueue_demo.engine.leftovers import sweep_dirs

shared, victim = Path(sys.argv[1]), sys.argv[2]
run = shared / "jobqueue-demo-bait"

def swap(event, args):
    if event == "fcntl.flock" and not (shared / "moved").exists():
        os.rename(run, shared / "moved")
        os.symlink(victim, run)

sys.addaudithook(swap)
sweep_dirs(folder=shared)
"""


def test_the_directory_sweep_follows_no_symlink_swapped_in(tmp_path):
    import subprocess
    import sys

    from jobqueue_demo.engine.owner import hold

    shared, victim = tmp_path / "shared", tmp_path / "victim"
    shared.mkdir()
    victim.mkdir()
    (victim / "precious").write_text("42")
    (victim / "folder").mkdir()
    run = shared / "jobqueue-demo-bait"
    run.mkdir()
    hold(run).close()  # a marker whose lock is free: a run that is gone
    done = subprocess.run(
        [sys.executable, "-c", SWAPPED_SWEEP, str(shared), str(victim)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in victim.iterdir()) == ["folder", "precious"], "the sweep emptied the victim's folder"


# -- files: --allow-shared-user on the embedded server --------------------------------------


def test_shared_user_on_the_embedded_server_writes_no_log_file(tmp_path):
    """As root, SET GLOBAL general_log_file appends every statement to any file the server's OS
    user may write (a shell's start-up file, say): secure_file_priv does not cover it."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    elsewhere.chmod(0o777)
    path = tmp_path / "log.yaml"
    path.write_text(f"""title: the general log elsewhere
sessions: [A]
steps:
  - A: SET GLOBAL general_log_file = '{elsewhere}/log';
  - A: SET GLOBAL general_log = 1;
  - A: SELECT 'appended';
  - A: SET GLOBAL general_log = 0;
""")
    done = cli("--allow-shared-user", "run", str(path), timeout=60)
    assert done.returncode in (0, 1), done.stderr
    assert list(elsewhere.iterdir()) == []


# -- explore's reset on PostgreSQL: the rows setup made, no more ------------------------------


def test_a_restore_copies_an_inherited_tables_rows_once(pg_embedded, tmp_path):
    """`TABLE jobs` reads the rows of the tables that inherit from jobs too: copied into the
    snapshot of jobs as well as their own, every restore after the first doubled them."""
    path = tmp_path / "inherits.yaml"
    path.write_text("""title: inherited rows
engines: [postgresql]
setup: |
  CREATE TABLE jobs (id INT, task TEXT);
  CREATE TABLE urgent_jobs () INHERITS (jobs);
  INSERT INTO jobs VALUES (1, 'a');
  INSERT INTO urgent_jobs VALUES (2, 'b');
sessions: [A, B]
steps:
  - A: UPDATE jobs SET task = 'x' WHERE id = 1;
  - B: UPDATE jobs SET task = 'y' WHERE id = 2;
invariants:
  - name: two jobs
    sql: SELECT count(*) FROM jobs
    expect: [[2]]
""")
    done = cli("explore", str(path), "--dsn", pg_dsn(pg_embedded), timeout=60)
    assert "snapshot" in done.stdout and "invariant violated 0" in done.stdout, done.stdout


# -- a lesson page from somebody's lesson ----------------------------------------------------

HOSTILE_PROSE = """title: "<script>alert('title')</script>"
summary: "<img src=x onerror=alert('summary')>"
description: "</p><script>alert('description')</script> [a link](javascript:alert('link')) and `<b>code</b>`"
why: "<svg onload=alert('why')>"
sessions: [A]
steps:
  - narrate: "<iframe src=javascript:alert('narration')></iframe>"
  - A: SELECT 1;
"""


def test_a_markdown_page_shows_a_lessons_prose_as_text(embedded, tmp_path):
    """The HTML page escapes a lesson's prose; the Markdown page put it there raw, so a site
    publishing it ran the lesson author's script."""
    from markdown_it import MarkdownIt

    from jobqueue_demo import api

    path = tmp_path / "hostile.yaml"
    path.write_text(HOSTILE_PROSE)
    page = api.lesson_page(api.load(str(path)), embedded, 10.0, "md")
    rendered = MarkdownIt("commonmark").render(page)
    for active in ("<script", "<img", "<svg", "<iframe", 'href="javascript'):
        assert active not in rendered, active
    assert "&lt;script&gt;alert('title')&lt;/script&gt;" in rendered.replace("&#x27;", "'")
    assert "<code>&lt;b&gt;code&lt;/b&gt;</code>" in rendered  # a code span stays one


# -- the terminal: a lesson's text is shown, never acted on -----------------------------------


@pytest.mark.parametrize("text, line", [
    ('title: "a title \\e]0;renamed\\a"\nsessions: [A]\nsteps:\n  - A: SELECT 1;\n', 1),
    ('title: t\nsessions: [A]\nsteps:\n  - narrate: "\\e[2J the screen cleared"\n  - A: SELECT 1;\n', 4),
    ('title: t\nsessions: [A]\nsteps:\n  - A: "DELETE FROM jobs; -- \\rSELECT 1; -- what the screen shows"\n', 4),
    ('title: t\nsessions: [A]\nsteps:\n  - A: "SELECT 1; -- \\x9b2J, a C1 control"\n', 4),
], ids=["osc-title", "csi-narration", "carriage-return-hiding-sql", "c1"])
def test_a_control_character_in_a_scenario_is_refused_at_its_line(tmp_path, text, line):
    """YAML's double-quoted escapes make them; the transcript printed them raw, so a lesson
    could retitle the terminal, clear it, or hide a statement behind another."""
    from jobqueue_demo.errors import ScenarioError
    from jobqueue_demo.scenario.loader import load_scenario

    path = tmp_path / "control.yaml"
    path.write_text(text)
    with pytest.raises(ScenarioError, match="control character") as refused:
        load_scenario(str(path))
    assert refused.value.line == line, str(refused.value)


def test_a_servers_message_built_by_the_scenario_is_shown_not_acted_on(pg_embedded, tmp_path):
    """Values were written out (\\x1B), but an error's message and a notice went to the
    terminal as the scenario's SQL made them."""
    path = tmp_path / "messages.yaml"
    path.write_text("""title: escapes made at run time
engines: [postgresql]
sessions: [A]
steps:
  - A: DO $$ BEGIN RAISE NOTICE '%', chr(27) || ']0;retitled' || chr(7); END $$;
  - A: DO $$ BEGIN RAISE EXCEPTION '%', chr(27) || '[2J' || chr(155) || 'cleared'; END $$;
""")
    done = cli("run", str(path), "--dsn", pg_dsn(pg_embedded), timeout=60)
    assert "NOTICE:  \\x1B]0;retitled\\x07" in done.stdout, done.stdout
    assert "ERROR:  \\x1B[2J\\u009Bcleared" in done.stdout, done.stdout


def test_verify_shows_a_value_it_did_not_expect_written_out(pg_embedded, tmp_path):
    path = tmp_path / "value.yaml"
    path.write_text("""title: a value made at run time
engines: [postgresql]
sessions: [A]
steps:
  - A: SELECT chr(27) || ']0;retitled' || chr(7) AS v;
    expect:
      rows: [[x]]
""")
    done = cli("verify", str(path), "--dsn", pg_dsn(pg_embedded), timeout=60)
    assert "rows [[\\x1B]0;retitled\\x07]]" in done.stdout, done.stdout


def test_a_deadlocks_key_value_is_shown_written_out(embedded, tmp_path):
    """The cycle names each record by its key, read from InnoDB's status in hex: the
    scenario's own data, and it went to the terminal as it was."""
    path = tmp_path / "deadlock.yaml"
    path.write_text("""title: a deadlock on a key holding an escape
setup: |
  CREATE TABLE t (k VARCHAR(10) PRIMARY KEY, v INT);
  INSERT INTO t VALUES (CONCAT(CHAR(27), '[2Ja'), 1), ('b', 2);
sessions: [A, B]
steps:
  - A: BEGIN;
  - B: BEGIN;
  - A: UPDATE t SET v = v + 1 WHERE k = CONCAT(CHAR(27), '[2Ja');
  - B: UPDATE t SET v = v + 1 WHERE k = 'b';
  - A: UPDATE t SET v = v + 1 WHERE k = 'b';
  - B: UPDATE t SET v = v + 1 WHERE k = CONCAT(CHAR(27), '[2Ja');
""")
    done = cli("run", str(path), "--dsn", dsn_of(embedded), timeout=60)
    assert "PRIMARY ('\\x1B[2Ja')" in done.stdout and "\x1b" not in done.stdout, done.stdout


def test_a_captured_value_is_shown_written_out_in_the_statement_it_joins(embedded, tmp_path):
    path = tmp_path / "capture.yaml"
    path.write_text("""title: a captured escape
sessions: [A]
steps:
  - A: SELECT CONCAT(CHAR(27), '[2J') AS k;
    capture: k
  - A: SELECT :k AS again;
""")
    done = cli("run", str(path), "--dsn", dsn_of(embedded), timeout=60)
    assert "A> SELECT '\\x1B[2J' AS again;" in done.stdout and "\x1b" not in done.stdout, done.stdout


def test_a_captured_backslash_reaches_postgresql_unchanged(pg_embedded, tmp_path):
    """A captured value is sent as the engine's literal: MySQL's doubled the backslash, which
    PostgreSQL (standard_conforming_strings) keeps as two."""
    path = tmp_path / "backslash.yaml"
    path.write_text("""title: a captured backslash
engines: [postgresql]
sessions: [A]
steps:
  - A: SELECT 'a\\b' AS k;
    capture: k
  - A: SELECT length(:k) AS n;
    expect:
      rows: [[3]]
""")
    done = cli("verify", str(path), "--dsn", pg_dsn(pg_embedded), timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
