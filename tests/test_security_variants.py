"""Variants of the ways in that tests/test_security_*.py close: each a look-alike of a vector
already handled that the first fix did not see."""

from __future__ import annotations

import secrets
from contextlib import closing

from conftest import cli, dsn_of

# -- the sweep drops only exact run names ----------------------------------------------------


def _newline_look_alike() -> str:
    """jqd_ and 16 hex digits, then a newline: a regular expression's `$` matches before it."""
    return f"jqd_{secrets.token_hex(8)}\n"


def test_postgresql_sweep_keeps_a_database_named_like_a_run_and_a_newline(pg):
    from jobqueue_demo.engine.pg_control import execute, quote

    name = _newline_look_alike()
    with closing(pg.params.connect()) as admin:
        execute(admin, f"CREATE DATABASE {quote(name)}")
        try:
            found = pg.seam.sweep(pg.params, dry_run=True).found
            assert name not in [f.name for f in found], "the sweep would drop somebody's database"
        finally:
            execute(admin, f"DROP DATABASE IF EXISTS {quote(name)}")


def test_mysql_sweep_keeps_a_user_named_like_a_run_and_a_newline(server):
    from jobqueue_demo.engine.control import execute
    from jobqueue_demo.engine.scratch import literal

    account = f"{literal(_newline_look_alike())}@'jqdtest-nowhere'"
    with closing(server.params.connect(database=None)) as admin:
        execute(admin, f"CREATE USER {account}")
        try:
            found = server.seam.sweep(server.params, dry_run=True).found
            assert account not in [f.name for f in found], "the sweep would drop somebody's user"
        finally:
            execute(admin, f"DROP USER IF EXISTS {account}")


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
