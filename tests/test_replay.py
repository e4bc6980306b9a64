"""`replay`: deadlock reports made here from real queue deadlocks (reports/, tests/reports/,
tests/reports/make_reports.py) read into their cycle, replayed into lessons that verify and
that explore finds the deadlock in; bad and hostile reports refused with one line."""

from __future__ import annotations

import json
import secrets
from contextlib import closing, contextmanager
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, cli, local_pg_reachable, local_server_reachable

from jobqueue_demo.errors import ReportError
from jobqueue_demo.replay.keys import Undecodable, literal
from jobqueue_demo.replay.readers import read_report
from jobqueue_demo.replay.report import Field
from jobqueue_demo.replay.schema import Column, read_schema

SHIPPED = ROOT / "reports"
FORMS = ROOT / "tests" / "reports"


def read(path: Path):
    return read_report(path.name, path.read_bytes())


def told(report) -> list[tuple]:
    return [(p.number, p.statement.split()[0], p.waits.text(), p.holds.text() if p.holds else None, p.blocked_by)
            for p in report.parties]


# -- reading -------------------------------------------------------------------------------


def test_claim_vs_enqueue_is_two_inserts_into_the_supremum_gap_each_holds():
    report = read(SHIPPED / "claim-vs-enqueue.txt")
    assert (report.form, report.victim) == ("MariaDB 10.6+", 1)
    gap = "X gap lock on jobs state_id (supremum)"
    intention = "X insert intention lock on jobs state_id (supremum)"
    assert told(report) == [(1, "INSERT", intention, gap, 2), (2, "INSERT", intention, gap, 1)]


@pytest.mark.parametrize("path", [SHIPPED / "reserve-vs-delete.txt", FORMS / "mariadb-reserve-vs-delete.errorlog.txt"],
                         ids=lambda p: p.name)
def test_reserve_vs_delete_reads_alike_from_the_monitor_and_the_error_log(path):
    report = read(path)
    assert report.victim == 2
    assert told(report) == [
        (1, "DELETE", "X record lock on jobs state_id", "X record lock on jobs PRIMARY", 2),
        (2, "UPDATE", "X record lock on jobs PRIMARY", "X next-key lock on jobs state_id", 1),
    ]
    fields = report.parties[0].waits.record.fields
    assert [f.data for f in fields] == [b"queued", bytes.fromhex("80000004")]


def test_the_mysql_8_form_reads_each_transactions_holds_list():
    report = read(FORMS / "mysql8-manual.txt")
    assert (report.form, report.victim) == ("MySQL 8.0/8.4", 2)
    assert told(report) == [
        (1, "UPDATE", "X record lock on Birds PRIMARY", "S record lock on Animals PRIMARY", 2),
        (2, "UPDATE", "X record lock on Animals PRIMARY", "S record lock on Birds PRIMARY", 1),
    ]


def test_a_postgresql_log_names_each_process_its_statement_and_the_tuples():
    report = read(SHIPPED / "sharelock.log")
    assert (report.form, report.victim) == ("PostgreSQL server log", 1)
    assert [(p.thread_id, p.waits.record.tuple_id, p.holds.record.tuple_id, p.trx_id) for p in report.parties] == [
        ("11785", "(0,1)", "(0,2)", "727"), ("11784", "(0,2)", "(0,1)", "726"),
    ]
    assert report.parties[0].waits.text() == "ShareLock on the transaction holding jobs (0,1)"


@pytest.mark.parametrize("data, column, expected", [
    ("80000004", Column("id", "int"), "4"),
    ("7fffffff", Column("id", "int"), "-1"),
    ("ffffffff", Column("id", "int", unsigned=True), "4294967295"),
    ("8000000000000001", Column("id", "bigint"), "1"),
    ("02", Column("state", "enum", values=("queued", "done")), "'done'"),
    ("6974277320", Column("t", "char"), "'it''s'"),
    ("615c62", Column("t", "varchar"), "X'615c62'"),
    ("99bb8a1083", Column("at", "datetime"), "'2026-12-05 01:02:03'"),  # as MariaDB 10.11 printed it
    ("5f5e1000", Column("at", "timestamp"), "FROM_UNIXTIME(1600000000)"),
])
def test_a_record_field_is_decoded_by_its_column_type(data, column, expected):
    assert literal(Field(bytes.fromhex(data)), column) == expected


def test_a_field_innodb_cut_or_of_an_unknown_type_is_refused():
    with pytest.raises(Undecodable, match="first 2 bytes"):
        literal(Field(b"ab", truncated=True), Column("t", "varchar"))
    with pytest.raises(Undecodable, match="DECIMAL"):
        literal(Field(b"\x80\x01"), Column("n", "decimal"))


def test_the_schema_reader_knows_innodbs_record_order():
    tables = read_schema("s.sql", (SHIPPED / "reserve-vs-delete.schema.sql").read_text(), True)
    jobs = tables["jobs"]
    assert jobs.record_fields(jobs.index("state_id")) == ["state", "id"]
    assert jobs.record_fields(jobs.primary) == ["id", None, None, "task", "state"]


# -- bad and hostile reports: one line, exit 2, before any server ---------------------------


def refused(*args: str) -> str:
    """The one line `replay` ends with, exit 2, before any server starts."""
    done = cli("replay", *args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    return done.stderr


def with_text(tmp_path: Path, text: str, name: str = "report.txt") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


SCHEMA = str(SHIPPED / "reserve-vs-delete.schema.sql")
RESERVE = (SHIPPED / "reserve-vs-delete.txt").read_text()


def test_a_truncated_report_says_what_is_missing(tmp_path):
    cut = RESERVE[: RESERVE.index("*** WE ROLL BACK")]
    assert "cut short" in refused(with_text(tmp_path, cut), "--schema", SCHEMA)
    cut = RESERVE[: RESERVE.index("*** (2) TRANSACTION:") + 100]
    assert "cut short" in refused(with_text(tmp_path, cut), "--schema", SCHEMA)


def test_a_report_of_an_unknown_version_is_named_so(tmp_path):
    """MySQL 5.7 and MariaDB before 10.6 print what only the second transaction holds."""
    old = RESERVE.replace("*** CONFLICTING WITH:", "*** (2) HOLDS THE LOCK(S):", 1).replace("*** CONFLICTING WITH:", "")
    assert "version this does not read" in refused(with_text(tmp_path, old), "--schema", SCHEMA)


def test_a_schema_without_the_named_index_is_refused(tmp_path):
    schema = with_text(tmp_path, "CREATE TABLE jobs (id INT PRIMARY KEY, task VARCHAR(100), state VARCHAR(8));", "s.sql")
    assert "'state_id' of jobs, which the schema lacks" in refused(str(SHIPPED / "reserve-vs-delete.txt"), "--schema", schema)


def test_a_report_over_one_mebibyte_is_refused(tmp_path):
    assert "at most 1 MiB" in refused(with_text(tmp_path, RESERVE + "x" * (1 << 20)), "--schema", SCHEMA)


def test_text_that_is_no_report_is_refused(tmp_path):
    assert "not a deadlock report" in refused(with_text(tmp_path, "hello\n" * 100), "--schema", SCHEMA)


def test_hostile_text_built_to_make_a_parser_backtrack_is_refused_in_one_pass(tmp_path):
    """Lines that open every construct and close none, to the size bound."""
    hostile = "*** (1) TRANSACTION:\n*** WAITING FOR THIS LOCK TO BE GRANTED:\n"
    hostile += ("RECORD LOCKS " + "`" * 2000 + " trx id lock_mode \n") * 400
    assert "without its table" in refused(with_text(tmp_path, hostile + "*** WE ROLL BACK TRANSACTION (1)\n"), "--schema", SCHEMA)
    message = refused(with_text(tmp_path, "*** (1) TRANSACTION:\n" + "*** (" * 200000), "--schema", SCHEMA)
    assert "a part of a transaction this does not know" in message


def test_the_client_error_alone_asks_for_the_server_log(tmp_path):
    message = refused(str(FORMS / "postgresql-sharelock.client.txt"), "--schema", str(SHIPPED / "sharelock.schema.sql"))
    assert "server log" in message


@pytest.mark.parametrize("statement, says", [
    ("UPDATE jobs SET state = 'running' WHERE id = 4; DROP TABLE jobs", "several statements"),
    ("CALL purge_jobs()", "starts with CALL"),
    ("UPDATE jobs SET task = 'cut short", "cut it short"),
    ("DELETE FROM jobs WHERE task = '\x1b[2J'", "control character"),
    ("DELETE /*!99999 FROM jobs; DROP TABLE jobs */ FROM jobs WHERE id = 4", "executable comment"),
])
def test_only_the_one_row_locking_statement_a_transaction_ran_is_replayed(tmp_path, statement, says):
    hostile = RESERVE.replace("DELETE FROM jobs WHERE id = 4", statement)
    assert says in refused(with_text(tmp_path, hostile), "--schema", SCHEMA)


def test_a_postgresql_statement_with_parameters_is_refused(tmp_path):
    log = (SHIPPED / "sharelock.log").read_text().replace("WHERE task = 'resize avatar of user 7'", "WHERE id = $1")
    args = ("--schema", str(SHIPPED / "sharelock.schema.sql"), "--rows", str(SHIPPED / "sharelock.rows.sql"))
    assert "$" in refused(with_text(tmp_path, log, "r.log"), *args)


def test_ids_that_are_no_numbers_are_refused(tmp_path):
    hostile = RESERVE.replace("MariaDB thread id 7,", "MariaDB thread id \x1b]0;pwned\x07,")
    assert "not a number" in refused(with_text(tmp_path, hostile), "--schema", SCHEMA)


def test_a_table_the_report_names_must_be_the_schemas(tmp_path):
    hostile = RESERVE.replace("`shop`.`jobs`", "`shop`.`jobs; DROP TABLE x`")
    assert "does not create" in refused(with_text(tmp_path, hostile), "--schema", SCHEMA)


def test_a_users_report_needs_a_schema(tmp_path):
    assert "--schema" in refused(with_text(tmp_path, RESERVE))


def test_reading_raises_report_errors_with_the_file():
    with pytest.raises(ReportError, match="^x.txt: no deadlock"):
        read_report("x.txt", b"*** WE ROLL BACK TRANSACTION (1)\nLATEST DETECTED DEADLOCK\n")


# -- replayed on real servers ---------------------------------------------------------------


def replayed(tmp_path: Path, *args: str, engine: str = "mysql"):
    lesson = tmp_path / "my-lesson.yaml"
    done = cli("replay", *args, "-o", str(lesson), timeout=300)
    return done, lesson


@pytest.mark.parametrize("name, engine", [("claim-vs-enqueue", "mysql"), ("reserve-vs-delete", "mysql"),
                                          ("sharelock", "postgresql")])
def test_the_acceptance_reports_replay_into_lessons_that_verify_and_explore_finds_the_deadlock(tmp_path, name, engine):
    done, lesson = replayed(tmp_path, name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "-- reproduced on" in done.stdout and "the same cycle" in done.stdout
    steps = yaml.safe_load(lesson.read_text())["steps"]
    assert any(step.get("comment", "").startswith("inferred:") for step in steps)
    assert any(str(step.get("narrate", "")).startswith("The same cycle as the report's") for step in steps)
    verified = cli("--engine", engine, "verify", str(lesson))
    assert verified.returncode == 0 and "ok (" in verified.stdout, verified.stdout + verified.stderr
    explored = cli("--engine", engine, "explore", str(lesson), "--json", timeout=300)
    assert explored.returncode == 0, explored.stderr
    assert json.loads(explored.stdout)["outcomes"]["deadlock"] > 0


@pytest.mark.parametrize("report, schema", [
    (FORMS / "mariadb-claim-vs-enqueue.errorlog.txt", SHIPPED / "claim-vs-enqueue.schema.sql"),
    (FORMS / "mysql8-manual.txt", FORMS / "mysql8-manual.schema.sql"),
    (FORMS / "mariadb-three-way.txt", SHIPPED / "reserve-vs-delete.schema.sql"),
    (FORMS / "mariadb-claim-vs-insert.txt", SHIPPED / "reserve-vs-delete.schema.sql"),
    (FORMS / "mariadb-range-vs-insert.txt", SHIPPED / "reserve-vs-delete.schema.sql"),
    (FORMS / "postgresql-lock-vs-update.log", FORMS / "postgresql-lock-vs-update.schema.sql"),
], ids=lambda p: p.name)
def test_the_other_forms_replay_too(tmp_path, report, schema):
    done, lesson = replayed(tmp_path, str(report), "--schema", str(schema))
    assert done.returncode == 0, done.stdout + done.stderr
    engine = yaml.safe_load(lesson.read_text())["engines"][0]
    assert cli("--engine", engine, "verify", str(lesson)).returncode == 0


def test_a_postgresql_report_without_rows_gets_the_rows_its_statements_ask_for(tmp_path):
    done, lesson = replayed(tmp_path, str(SHIPPED / "sharelock.log"), "--schema", str(SHIPPED / "sharelock.schema.sql"))
    assert done.returncode == 0, done.stdout + done.stderr
    setup = yaml.safe_load(lesson.read_text())["setup"]
    assert "(1, 'resize avatar of user 7', DEFAULT),\n  (2, 'resize avatar of user 7', DEFAULT);" in setup


def test_a_postgresql_index_tuple_is_not_taken_for_a_row_of_the_table():
    log = (SHIPPED / "sharelock.log").read_text().replace(
        'while updating tuple (0,1) in relation "jobs"', 'while inserting index tuple (0,5) in relation "jobs_pkey"')
    report = read_report("r.log", log.encode())
    assert report.parties[0].waits.record is None and report.parties[0].waits.table == ""


def test_a_postgresql_tuple_past_the_first_page_asks_for_rows(tmp_path):
    log = (SHIPPED / "sharelock.log").read_text().replace("tuple (0,1)", "tuple (7,1)")
    assert "--rows" in refused(with_text(tmp_path, log, "r.log"), "--schema", str(SHIPPED / "sharelock.schema.sql"))


def test_the_reports_database_name_is_left_out_of_its_statements(tmp_path):
    qualified = RESERVE.replace("DELETE FROM jobs WHERE id = 4", "DELETE FROM `shop`.jobs WHERE id = 4 AND 'shop.' <> ''")
    done, lesson = replayed(tmp_path, with_text(tmp_path, qualified), "--schema", SCHEMA)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "DELETE FROM jobs WHERE id = 4 AND 'shop.' <> '';" in [s.get("A") for s in yaml.safe_load(lesson.read_text())["steps"]]


def test_a_hostile_record_value_is_a_value_in_the_lesson_never_sql(tmp_path):
    """The task field of the locked row decodes to text that would end the INSERT's quotes."""
    evil = "x'); DROP TABLE jobs; --"
    hostile = RESERVE.replace("len 13; hex 726573697a6520617661746172;", f"len {len(evil)}; hex {evil.encode().hex()};")
    done, lesson = replayed(tmp_path, with_text(tmp_path, hostile), "--schema", SCHEMA)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "(4, 'x''); DROP TABLE jobs; --', 'queued')" in lesson.read_text()
    assert cli("verify", str(lesson)).returncode == 0  # the table is there for every step


def test_the_schema_runs_as_the_per_run_user_confined_to_its_scratch_database(tmp_path):
    schema = with_text(tmp_path, (SHIPPED / "reserve-vs-delete.schema.sql").read_text() + "DROP DATABASE mysql;\n", "s.sql")
    done, lesson = replayed(tmp_path, str(SHIPPED / "reserve-vs-delete.txt"), "--schema", schema)
    assert done.returncode == 2 and "Access denied" in done.stderr, done.stdout + done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not lesson.exists()


def test_a_report_the_rows_keep_from_happening_is_not_reproduced_and_nothing_is_written(tmp_path):
    rows = with_text(tmp_path, "INSERT INTO jobs (id, task, state) VALUES (4, 'resize avatar', 'done');", "rows.sql")
    done, lesson = replayed(tmp_path, str(SHIPPED / "reserve-vs-delete.txt"), "--schema", SCHEMA, "--rows", rows)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "not reproduced" in done.stderr and "differs" in done.stderr
    assert not lesson.exists()


@pytest.mark.server
def test_dsn_reads_the_schema_from_a_mariadb_catalog(tmp_path):
    if not local_server_reachable():
        pytest.skip("no server on 127.0.0.1:3306")
    import MySQLdb

    database = f"jqdtest_{secrets.token_hex(4)}"
    with closing(MySQLdb.connect(host="127.0.0.1", port=3306, user="root", autocommit=True)) as conn:
        conn.query(f"CREATE DATABASE {database}")
        try:
            conn.select_db(database)
            conn.query((SHIPPED / "reserve-vs-delete.schema.sql").read_bytes())
            done, lesson = replayed(tmp_path, str(SHIPPED / "reserve-vs-delete.txt"),
                                    "--dsn", f"mysql://root@127.0.0.1:3306/{database}")
        finally:
            conn.query(f"DROP DATABASE {database}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "KEY `state_id` (`state`,`id`)" in lesson.read_text()


@pytest.mark.server
def test_dsn_reads_the_schema_from_a_postgresql_catalog(tmp_path):
    if not local_pg_reachable():
        pytest.skip("no PostgreSQL on 127.0.0.1:5432")
    from jobqueue_demo.engine.postgresql import control
    from jobqueue_demo.engine.postgresql.server import parse_dsn

    database = f"jqdtest_{secrets.token_hex(4)}"
    with closing(parse_dsn("postgresql://root@127.0.0.1:5432/postgres").connect()) as admin:
        control.execute(admin, f"CREATE DATABASE {database}")
        try:
            with closing(parse_dsn(f"postgresql://root@127.0.0.1:5432/{database}").connect()) as conn:
                control.execute(conn, "CREATE TABLE jobs (id SERIAL PRIMARY KEY, task VARCHAR(100) NOT NULL, "
                             "state VARCHAR(20) NOT NULL DEFAULT 'queued'); CREATE INDEX poll ON jobs (state, id)")
            done, lesson = replayed(tmp_path, str(SHIPPED / "sharelock.log"), "--rows", str(SHIPPED / "sharelock.rows.sql"),
                                    "--dsn", f"postgresql://root@127.0.0.1:5432/{database}")
        finally:
            control.execute(admin, f"DROP DATABASE {database}")
    assert done.returncode == 0, done.stdout + done.stderr
    text = lesson.read_text()
    assert '"id" SERIAL NOT NULL' in text and "CREATE INDEX poll ON public.jobs" in text


@pytest.mark.server
@pytest.mark.parametrize("engine", ["mysql", "postgresql"])
def test_dsn_of_a_database_without_the_reports_table_is_a_bad_input(tmp_path, engine):
    """A database of its own, empty: MariaDB's refusal of SHOW CREATE TABLE was told as the
    server's (exit 3), and PostgreSQL's missing table left a schema of nothing to fail later."""
    reachable = local_server_reachable() if engine == "mysql" else local_pg_reachable()
    if not reachable:
        pytest.skip(f"no {engine} server here")
    database = f"jqdtest_{secrets.token_hex(4)}"
    report = SHIPPED / ("claim-vs-enqueue.txt" if engine == "mysql" else "sharelock.log")
    dsn = f"mysql://root@127.0.0.1:3306/{database}" if engine == "mysql" else f"postgresql://root@127.0.0.1:5432/{database}"
    with _empty_database(engine, database):
        done, lesson = replayed(tmp_path, str(report), "--dsn", dsn)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [f"jobqueue-demo: --dsn's database {database} has no table jobs, which the report's locks are on"]
    assert not lesson.exists()


@contextmanager
def _empty_database(engine: str, database: str):
    if engine == "mysql":
        import MySQLdb

        with closing(MySQLdb.connect(host="127.0.0.1", port=3306, user="root", autocommit=True)) as conn:
            conn.query(f"CREATE DATABASE {database}")
            try:
                yield
            finally:
                conn.query(f"DROP DATABASE {database}")
        return
    from jobqueue_demo.engine.postgresql import control
    from jobqueue_demo.engine.postgresql.server import parse_dsn

    with closing(parse_dsn("postgresql://root@127.0.0.1:5432/postgres").connect()) as admin:
        control.execute(admin, f"CREATE DATABASE {database}")
        try:
            yield
        finally:
            control.execute(admin, f"DROP DATABASE {database}")
