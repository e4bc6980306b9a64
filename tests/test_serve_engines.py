"""`serve` on every kind of lesson and server, stepped by a script (POST /api/step), as the
browser tests (tests/test_serve.py) step the MariaDB lessons: PostgreSQL, an isolation spec,
a Galera cluster."""

from __future__ import annotations

import json

import pytest
from conftest import LOCAL_PG_DSN, ROOT, dsn_of, local_pg_reachable, skip_without_pg
from serving import Served
from test_cluster import cluster, node_dsns  # noqa: F401  cluster is a fixture


def step_to_the_end(served: Served, limit: int = 500) -> list[dict]:
    """Every step by the teacher's token, until the lesson is over; the state after each."""
    seen = []
    for _ in range(limit):
        status, body = served.post(f"/api/step?teacher={served.token}")
        assert status == 200, body
        state = json.loads(served.get("/api/state")[2])["state"]
        seen.append(state)
        if state["phase"] == "over":
            return seen
    raise AssertionError(f"still not over after {limit} steps")


def the_end(served: Served, seen: list[dict]) -> dict:
    last = seen[-1]
    assert last["verdict"]["met"], last["verdict"]
    ats = [s["at"] for s in seen]
    assert ats == sorted(ats) and len(set(ats)) == len(ats)  # the count goes on, never back
    status, _, page = served.get("/lesson.html")
    assert status == 200 and "<h1>" in page
    assert served.finish() == 0, served.err
    return last


SHIPPED = sorted(p.stem for p in (ROOT / "scenarios").glob("*.yaml") if not p.stem.startswith("cluster-"))


@pytest.mark.parametrize("lesson", SHIPPED)
def test_every_shipped_lesson_is_served_to_its_end(lesson, embedded):
    with Served(lesson, dsn=dsn_of(embedded)) as served:
        last = the_end(served, step_to_the_end(served))
    assert last["entries"] and last["phase"] == "over"


@pytest.mark.parametrize("where", ["embedded", "local"])
def test_the_deadlock_lesson_on_postgresql(where):
    if where == "embedded":
        skip_without_pg()
        args = ("--engine", "postgresql")
    else:
        if not local_pg_reachable():
            pytest.skip("no PostgreSQL on 127.0.0.1:5432")
        args = ("--dsn", LOCAL_PG_DSN)
    with Served("deadlock", *args) as served:
        last = the_end(served, step_to_the_end(served))
    assert "PostgreSQL" in last["lesson"]["server"]
    waits = [e for e in last["entries"] if e["type"] == "waiting"]
    assert {w["session"] for w in waits} == {"A", "B"} and all(w["until_step"] is not None for w in waits)
    assert any("deadlock detected" in line["text"] for e in last["entries"] if e["type"] == "lines" for line in e["lines"])


SPECS = sorted(p.name for p in (ROOT / "scenarios" / "specs").glob("*.spec"))


@pytest.mark.parametrize("spec", SPECS)
def test_an_isolation_spec_steps_through_every_permutation(spec):
    skip_without_pg()
    with Served(spec) as served:
        seen = step_to_the_end(served)
        last = the_end(served, seen)
    from jobqueue_demo import api

    schedules = api.load(spec).spec.schedules()
    assert last["lesson"]["total"] == last["at"] + 1 == sum(len(s) for s in schedules)
    told = sum(1 for e in last["entries"] if any("permutation:" in line["text"] for line in e.get("lines", ())))
    assert told == len(schedules)


def test_a_cluster_lesson_names_each_node(cluster):  # noqa: F811  skips where no cluster starts
    with Served("cluster-skip-locked", *node_dsns(cluster)) as served:
        last = the_end(served, step_to_the_end(served))
    labels = [s["label"] for s in last["lesson"]["sessions"]]
    assert labels[:2] == ["A@1", "B@2"]
    sql = [line["text"] for e in last["entries"] if e["type"] == "lines" for line in e["lines"]]
    assert any(text.startswith("B@2> ") for text in sql)


STUCK = """title: stuck
sessions: [A, B]
setup: |
  CREATE TABLE t (id INT PRIMARY KEY);
  INSERT INTO t VALUES (1);
steps:
  - A: BEGIN;
  - A: SELECT * FROM t WHERE id = 1 FOR UPDATE;
  - B: BEGIN;
  - B: SELECT * FROM t WHERE id = 1 FOR UPDATE;
  - B: SELECT 1;
"""


def test_a_run_that_cannot_go_on_tells_every_page_why_and_exits_1(embedded, tmp_path):
    from conftest import left_behind, scratch_databases

    lesson = tmp_path / "stuck.yaml"
    lesson.write_text(STUCK)
    before = scratch_databases(embedded)
    with Served(str(lesson), dsn=dsn_of(embedded)) as served:
        answers = [json.loads(served.post(f"/api/step?teacher={served.token}")[1]) for _ in range(5)]
        assert [a["phase"] for a in answers] == ["ready"] * 4 + ["stopped"]
        assert "B's next statement cannot be sent" in answers[-1]["message"]
        assert served.finish() == 1
    assert "B's next statement cannot be sent" in served.err and "Traceback" not in served.err
    assert left_behind(embedded, before) == set()
