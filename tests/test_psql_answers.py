"""PostgreSQL answers as psql does where `Query OK` would hide something: the ROLLBACK a COMMIT
of a failed transaction gets, the notices and warnings a statement raises, and each result of
a step of several statements; in the transcript, the columns view, JSON, verify and compare."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import cli, pg_binaries_missing
from jobqueue_demo import api as core
from test_columns_golden import drawn
from jobqueue_demo.run import events as ev

MISSING = pg_binaries_missing()
pytestmark = pytest.mark.skipif(MISSING is not None, reason=f"no PostgreSQL server binaries: {MISSING}")

LESSON = """\
title: psql's answers
engines: [postgresql]
setup: |
  CREATE TABLE jobs (id INT PRIMARY KEY, state TEXT NOT NULL);
  INSERT INTO jobs VALUES (1, 'queued'), (2, 'queued');
sessions: [A]
steps:
  - A: BEGIN;
  - A: SELECT 1/0;
    expect: {error: 22012}
  - A: COMMIT;
    expect: ok
  - A: BEGIN;
  - A: BEGIN;
  - A: SELECT id FROM jobs WHERE id = 1; SELECT count(*) AS n FROM jobs; UPDATE jobs SET state = 'done' WHERE id = 2;
  - A: COMMIT;
"""


@pytest.fixture(scope="module")
def lesson(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("psql") / "answers.yaml"
    path.write_text(LESSON)
    return path


@pytest.fixture(scope="module")
def report(lesson, pg_embedded):
    return core.run(core.load(str(lesson)), pg_embedded, 10.0)


def results(report) -> list:
    return [e.result for e in report.events if isinstance(e, ev.Completed)]


def test_a_commit_of_a_failed_transaction_answers_rollback(report):
    commit = results(report)[2]
    assert commit.error is None and commit.tag == "ROLLBACK"
    assert results(report)[-1].tag == "COMMIT"


def test_the_transcript_says_rollback_and_shows_the_warning_and_every_result(lesson):
    done = cli("--engine", "postgresql", "run", str(lesson))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    commit = lines.index("A> COMMIT;")
    assert lines[commit + 1] == "ROLLBACK"
    second_begin = [i for i, line in enumerate(lines) if line == "A> BEGIN;"][2]
    assert lines[second_begin + 1: second_begin + 3] == ["WARNING:  there is already a transaction in progress", "Query OK"]
    several = next(i for i, line in enumerate(lines) if line.startswith("A> SELECT id FROM jobs WHERE id = 1;"))
    assert lines[several + 1: several + 11] == [
        " id ", "----", "  1", "(1 row)",
        " n ", "---", " 2", "(1 row)",
        "Query OK, 1 row affected",
        "A> COMMIT;",
    ]
    assert lines[-1] == "Query OK"


def test_json_carries_the_tag_the_notices_and_the_earlier_results(lesson):
    done = cli("--engine", "postgresql", "run", str(lesson), "--format", "json")
    assert done.returncode == 0, done.stderr
    statements = [json.loads(line) for line in done.stdout.splitlines() if '"statement"' in line]
    assert statements[2]["result"]["tag"] == "ROLLBACK"
    warned = statements[4]
    assert warned["notices"] == ["WARNING:  there is already a transaction in progress"]
    assert warned["result"]["warnings"] == 1
    several = statements[5]
    assert several["result"]["tag"] == "UPDATE 1"
    assert [e["result"]["rows"] for e in several["earlier"]] == [[["1"]], [["2"]]]


def test_the_columns_view_says_rollback_too(report):
    text = drawn(report.events, ("A",), 80)
    assert "ROLLBACK" in text
    assert "WARNING:  there is already a transaction in progress" in text


def test_verify_names_a_rollback_where_ok_meant_a_commit(lesson, tmp_path):
    strict = tmp_path / "strict.yaml"
    strict.write_text(LESSON.replace("  - A: COMMIT;\n    expect: ok\n", "  - A: COMMIT;\n    expect: {affected: 1}\n"))
    done = cli("--engine", "postgresql", "verify", str(strict))
    assert done.returncode == 1
    assert "ROLLBACK (the transaction had failed: nothing was committed)" in done.stdout + done.stderr


def test_compare_marks_a_commit_that_rolled_back_on_one_engine():
    done = cli("compare", "nowait", "--format", "json")
    assert done.returncode == 0, done.stderr
    differences = json.loads(done.stdout)["differences"]
    commit = [d for d in differences if d["session"] == "B" and "rolled back" in d["what"]]
    assert [d["what"] for d in commit] == ["committed vs rolled back"], differences
