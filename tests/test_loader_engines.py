"""The per-engine forms of a scenario: `engines`, and setup, SQL, comment, narrate, expect,
verified and an invariant's sql written once or by engine; each bad form fails as one line
with file:line:column, before any connection."""

from __future__ import annotations

import pytest
from test_loader import load_fails, write

from jobqueue_demo.engine.mysql.errors import MySqlError
from jobqueue_demo.engine.postgresql.errors import PgError
from jobqueue_demo.errors import UsageError
from jobqueue_demo.scenario.loader import load_scenario
from jobqueue_demo.scenario.model import Narration

BOTH = "title: t\nengines: [mysql, postgresql]\nsessions: [A, B]\n"

GOOD = BOTH + """\
setup:
  mysql: CREATE TABLE jobs (id INT PRIMARY KEY) ENGINE=InnoDB;
  postgresql: CREATE TABLE jobs (id INT PRIMARY KEY);
steps:
  - narrate: {mysql: InnoDB says so., postgresql: PostgreSQL says so.}
  - A: BEGIN;
    expect: ok
  - A: {mysql: "LOCK TABLES jobs WRITE;", postgresql: "LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE;"}
    comment: {postgresql: the whole table}
  - B: SELECT id FROM jobs FOR UPDATE NOWAIT;
    expect: {error: lock-not-available}
  - B: SELECT 1;
    expect:
      mysql: {waits: true, error: ER_LOCK_WAIT_TIMEOUT}
      postgresql: {error: 55P03}
  - B: SELECT 2;
    expect: {postgresql: {error: lock_not_available}}
invariants:
  - name: none
    sql: {mysql: SELECT 1 FROM DUAL WHERE 0, postgresql: SELECT 1 WHERE false}
    expect: []
verified: {mysql: MariaDB 10.11.19 on 2026-12-03, postgresql: PostgreSQL 15.20 on 2026-12-04}
"""

NOWAIT_MYSQL = MySqlError(1205, "HY000", "Lock wait timeout exceeded")
NOWAIT_PG = PgError(0, "55P03", 'could not obtain lock on row in relation "jobs"')
# MySQL's deadlock carries SQLSTATE 40001, PostgreSQL's serialization failure.
DEADLOCK_MYSQL = MySqlError(1213, "40001", "Deadlock found when trying to get lock")


@pytest.fixture
def both(tmp_path):
    return load_scenario(write(tmp_path, GOOD))


def test_without_engines_a_lesson_is_for_mysql_only(tmp_path):
    scenario = load_scenario(write(tmp_path, "title: t\nsessions: [A]\nsteps:\n  - A: BEGIN;\nverified: MariaDB 10.11.19 on 2026-12-02\n"))
    assert scenario.engines == ("mysql",) and scenario.engine == "mysql"
    assert scenario.for_engine("mysql") is scenario
    assert scenario.stamps == (("mysql", "MariaDB 10.11.19 on 2026-12-02"),)
    with pytest.raises(UsageError, match=r"^lesson: written for mysql only; engines: \[mysql\]"):
        scenario.for_engine("postgresql")


def test_each_engine_gets_its_own_plain_scenario(both):
    mysql, pg = both.for_engine("mysql"), both.for_engine("postgresql")
    assert both is mysql and pg.engine == "postgresql" and pg.engines == ("mysql", "postgresql")
    assert pg.for_engine("mysql") is mysql
    assert mysql.setup.endswith("ENGINE=InnoDB;") and "ENGINE" not in pg.setup
    assert mysql.steps[0] == Narration("InnoDB says so.", 8) and pg.steps[0].text == "PostgreSQL says so."
    assert mysql.steps[2].sql == "LOCK TABLES jobs WRITE;" and pg.steps[2].sql.startswith("LOCK TABLE jobs IN")
    assert mysql.steps[2].comment is None and pg.steps[2].comment == "the whole table"
    assert mysql.invariants[0].sql.endswith("DUAL WHERE 0") and pg.invariants[0].sql.endswith("WHERE false")
    assert mysql.verified.startswith("MariaDB") and pg.verified == "PostgreSQL 15.20 on 2026-12-04"
    assert dict(pg.stamps) == dict(mysql.stamps) and len(pg.stamps) == 2


def test_an_error_is_resolved_for_each_engine(both):
    mysql, pg = both.for_engine("mysql"), both.for_engine("postgresql")
    shared_m, shared_p = mysql.steps[3].expect.error, pg.steps[3].expect.error
    assert shared_m.matches(NOWAIT_MYSQL) and not shared_m.matches(NOWAIT_PG)
    assert shared_p.matches(NOWAIT_PG) and not shared_p.matches(NOWAIT_MYSQL)
    assert mysql.steps[4].expect.waits and pg.steps[4].expect.waits is None
    assert pg.steps[4].expect.error.matches(NOWAIT_PG) and pg.steps[5].expect.error.matches(NOWAIT_PG)
    assert mysql.steps[5].expect is None  # written for postgresql only


def test_a_mysql_expectation_never_matches_by_sqlstate(tmp_path):
    path = write(tmp_path, BOTH + "steps:\n  - A: SELECT 1;\n    expect: {mysql: {error: 1205}, postgresql: {error: 40001}}\n")
    mysql, pg = load_scenario(path).for_engine("mysql"), load_scenario(path).for_engine("postgresql")
    assert not mysql.steps[0].expect.error.matches(DEADLOCK_MYSQL)  # 1213 carries SQLSTATE 40001
    assert pg.steps[0].expect.error.matches(PgError(0, "40001", "could not serialize access"))


def test_record_sees_the_other_engines_expectations(both):
    pg = both.for_engine("postgresql")
    step = pg.steps[4]
    assert not step.expect_shared and [e for e, _ in step.expect_others] == ["mysql"]
    assert step.expect_others[0][1].waits is True
    assert pg.steps[3].expect_shared


BAD = [
    ("unknown engine", "title: t\nengines: [mysql, oracle]\nsessions: [A]\nsteps:\n  - A: BEGIN;\n", 2, 18, "unknown engine 'oracle'"),
    ("engine twice", "title: t\nengines: [mysql, mysql]\nsessions: [A]\nsteps:\n  - A: BEGIN;\n", 2, 18, "named twice"),
    ("engines not a list", "title: t\nengines: mysql\nsessions: [A]\nsteps:\n  - A: BEGIN;\n", 2, 10, "must be a list"),
    ("setup missing an engine", BOTH + "setup: {mysql: SELECT 1}\nsteps:\n  - A: BEGIN;\n", 4, 8, "no value for postgresql"),
    ("engine not of the lesson", "title: t\nsessions: [A]\nsteps:\n  - A: {mysql: BEGIN, postgresql: BEGIN}\n",
     4, 23, "postgresql is not an engine of this lesson"),
    ("not an engine", BOTH + "steps:\n  - A: {mysql: BEGIN, oracle: BEGIN}\n", 5, 23, "'oracle' is not an engine"),
    ("sql missing an engine", BOTH + "steps:\n  - A: {mysql: BEGIN}\n", 5, 8, "no value for postgresql"),
    ("narrate missing an engine", BOTH + "steps:\n  - narrate: {postgresql: x}\n  - A: BEGIN;\n", 5, 14, "no value for mysql"),
    ("mysql number shared", BOTH + "steps:\n  - A: BEGIN;\n    expect: {error: 1205}\n", 6, 21,
     "unknown error '1205' on postgresql"),
    ("mysql name for postgresql", BOTH + "steps:\n  - A: BEGIN;\n    expect: {postgresql: {error: ER_LOCK_DEADLOCK}}\n",
     6, 34, "unknown error 'ER_LOCK_DEADLOCK' on postgresql"),
    ("sqlstate for mysql", "title: t\nsessions: [A]\nsteps:\n  - A: BEGIN;\n    expect: {error: 55P03}\n", 5, 21,
     "unknown error '55P03' on mysql"),
    ("engines mixed with expect keys", BOTH + "steps:\n  - A: BEGIN;\n    expect: {mysql: ok, rows: []}\n", 6, 25,
     "'rows' is not an engine"),
    ("verified for another engine", "title: t\nsessions: [A]\nsteps:\n  - A: BEGIN;\nverified: {postgresql: x}\n", 5, 12,
     "postgresql is not an engine of this lesson"),
    ("empty sql for one engine", BOTH + "steps:\n  - A: {mysql: BEGIN, postgresql: ''}\n", 5, 35, "is empty"),
]


@pytest.mark.parametrize("content, line, column, words", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_per_engine_form(tmp_path, content, line, column, words):
    err = load_fails(write(tmp_path, content), line, column)
    assert words in err.detail, err.detail


def test_a_shared_mysql_number_suggests_writing_it_per_engine(tmp_path):
    err = load_fails(write(tmp_path, BOTH + "steps:\n  - A: BEGIN;\n    expect: {error: 1205}\n"))
    assert "{mysql: {error: 1205}, postgresql: {error: 55P03}}" in err.detail
