"""The queue file's reader: what it accepts, and one line naming file:line for each thing it refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobqueue_demo.errors import ScenarioError
from jobqueue_demo.scenario.queue_file import load_queue_file, queue_from_text

ROOT = Path(__file__).resolve().parent.parent

GOOD = """\
title: t
work: after-commit
setup: |
  CREATE TABLE q (id INT PRIMARY KEY, state VARCHAR(8) NOT NULL DEFAULT 'ready');
  CREATE INDEX q_state ON q (state, id)
enqueue: INSERT INTO q (id) VALUES (:job)
claim:
  - SELECT id FROM q WHERE state = 'ready' ORDER BY id LIMIT :batch FOR UPDATE SKIP LOCKED
  - UPDATE q SET state = 'taken' WHERE id IN (:jobs)
complete: DELETE FROM q WHERE id = :job
rescue: UPDATE q SET state = 'ready' WHERE state = 'taken'
rescue_ms: 200
"""


def refused(text: str) -> ScenarioError:
    with pytest.raises(ScenarioError) as caught:
        queue_from_text("q.yaml", text)
    return caught.value


def test_a_good_file_loads_per_engine_with_its_parameters_placed():
    queue = queue_from_text("q.yaml", GOOD)
    sql = queue.for_engine("postgresql")
    assert [s.line for s in sql.setup] == [4, 5]
    assert sql.work == "after-commit" and sql.rescue_ms == 200
    assert sql.claim[0].bind({"batch": "4"}).endswith("LIMIT 4 FOR UPDATE SKIP LOCKED")
    assert sql.claim[1].bind({"jobs": "3, 5"}) == "UPDATE q SET state = 'taken' WHERE id IN (3, 5)"
    assert sql.claim[1].line == 9 and sql.complete[0].uses("job")


def test_a_parameter_in_quotes_a_comment_or_a_cast_is_no_parameter():
    text = GOOD.replace(
        "complete: DELETE FROM q WHERE id = :job",
        "complete: DELETE FROM q WHERE id = :job::int AND state <> ':job' -- :jobs",
    )
    statement = queue_from_text("q.yaml", "engines: [postgresql]\n" + text).for_engine("postgresql").complete[0]
    assert statement.bind({"job": "7"}) == "DELETE FROM q WHERE id = 7::int AND state <> ':job' -- :jobs"


@pytest.mark.parametrize(
    ("change", "line", "words"),
    [
        (("complete: DELETE FROM q WHERE id = :job", "complete: DELETE FROM q WHERE id = :jb"), 10, "unknown parameter :jb"),
        (("LIMIT :batch FOR", "AND id = :job FOR"), 8, ":job in the claim's first statement"),
        (("complete: DELETE", "complete: DELETE FROM jqd_effects; DELETE"), 10, "the tool's own objects"),
        (("  - UPDATE q SET", "  - COMMIT\n  - UPDATE q SET"), 9, "COMMIT is the tool's"),
        (("work: after-commit", "work: later"), 2, "work must be one of"),
        (("rescue_ms: 200", "rescue_ms: -1"), 12, "rescue_ms must be a whole number"),
        (("rescue_ms: 200\n", ""), 11, "rescue needs rescue_ms"),
        (("title: t", "title: t\nlimit: 3"), 2, "unknown key 'limit'"),
        (("state VARCHAR(8)", "state VARCHAR(8) DATA DIRECTORY '/tmp'"), 4, "DIRECTORY"),
        (("enqueue: INSERT", "enqueue:\n  mysql: INSERT"), 7, "no value for postgresql"),
        # PL/pgSQL could spell the tool's names at run time ('jq' || 'd_done'): dollar quoting is refused.
        (("complete: DELETE FROM q WHERE id = :job", "complete: DO $$BEGIN DELETE FROM q; END$$"), 10, "with certainty"),
        (("rescue: UPDATE q SET", "rescue: DROP TABLE JQD_DONE; UPDATE q SET"), 11, "the tool's own objects"),
    ],
)
def test_a_bad_file_is_refused_on_the_line_at_fault(change, line, words):
    error = refused(GOOD.replace(*change, 1))
    assert error.line == line, str(error)
    assert words in error.detail
    assert str(error).startswith(f"q.yaml:{line}")


def test_a_missing_part_is_named():
    assert "missing 'claim'" in refused(GOOD.replace("claim:", "#", 1).replace("\n  - ", "\n#")).detail


def test_mysql_sql_guard_checks_every_statement_of_the_file():
    text = GOOD.replace("complete: DELETE FROM q WHERE id = :job", "complete: |\n  SET sql_mode = ''")
    error = refused("engines: [mysql]\n" + text)
    assert error.line == 12 and "sql_mode" in error.detail


def test_an_engine_the_file_does_not_write_for_is_a_usage_error():
    from jobqueue_demo.errors import UsageError

    queue = queue_from_text("q.yaml", "engines: [mysql]\n" + GOOD)
    with pytest.raises(UsageError):
        queue.for_engine("postgresql")


def test_every_shipped_queue_file_loads():
    files = sorted((ROOT / "queues").glob("*.yaml"))
    assert files
    for path in files:
        queue = load_queue_file(str(path))
        assert queue.models, f"{path.name}: say which library and version it models"
