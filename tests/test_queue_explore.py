"""explore --queue: the queue file as claimers A and B (E, R), every interleaving on a real server."""

from __future__ import annotations

from math import comb

import pytest
from conftest import ROOT, cli, dsn_env, hostile_queue_file

from jobqueue_demo import api

QUEUES = ROOT / "queues"
ENGINES = ("embedded", "pg_embedded")


def options():
    return api.explore_options("", None, None, None, 2, 10.0)


def explored(server, name: str, enqueue_during: bool = False):
    return api.explore(api.queue_scenario(str(QUEUES / name), enqueue_during), server, options())


def test_the_tools_record_steps_take_no_move_of_their_own():
    # The claim's two statements, the completion, COMMIT: four moves a claimer; BEGIN (which
    # reads and locks nothing) and the INSERTs into jqd_claims, jqd_effects and jqd_done ride
    # along with the step before them.
    scenario = api.queue_scenario(str(QUEUES / "read-then-mark-fixed.yaml")).for_engine("postgresql")
    assert len([s for s in scenario.steps if s.session == "A"]) == 8
    assert api.explore_planned(scenario, options()) == comb(8, 4)


def test_the_rescuers_clock_reads_a_year_later():
    from jobqueue_demo.scenario.queue_scenario import later

    assert later("SELECT id FROM j WHERE t < NOW(6) - INTERVAL 4 HOUR AND j.now = 1 AND 'now()' = ''", "mysql") == (
        "SELECT id FROM j WHERE t < (NOW(6) + INTERVAL '1' YEAR) - INTERVAL 4 HOUR AND j.now = 1 AND 'now()' = ''"
    )
    assert later("SELECT 1 WHERE t < clock_timestamp() AND u < CURRENT_TIMESTAMP", "postgresql") == (
        "SELECT 1 WHERE t < (clock_timestamp() + INTERVAL '1' YEAR) AND u < (CURRENT_TIMESTAMP + INTERVAL '1' YEAR)"
    )


def test_a_rescuer_that_resets_by_id_revives_a_completed_job_and_its_fix_does_not(pg_embedded):
    # The rescuer sees every running job as stuck; a job it puts back while its claimer still
    # holds it runs at least once more (as after a kill) and is not counted. One it puts back
    # after its completion committed is. The first such schedule is the 41st in the search's
    # order: 300 of the 11,550 reach it (docs/queue-format.md has the whole space's figures).
    some = api.explore_options("", 300, None, None, 2, 10.0)
    broken = api.explore(api.queue_scenario(str(QUEUES / "river-rescuer-by-id.yaml")), pg_embedded, some)
    assert broken.failed and broken.findings[0].what == "no job done twice"
    fixed = api.explore(api.queue_scenario(str(QUEUES / "river.yaml")), pg_embedded, some)
    assert not fixed.failed and fixed.explored == 300
    r = [s for s in fixed.scenario.steps if s.session == "R"]
    assert "(clock_timestamp() + INTERVAL '1' YEAR) - interval '300 ms'" in r[1].sql


def test_the_claim_statement_that_returns_the_ids_captures_them():
    scenario = api.queue_scenario(str(QUEUES / "river.yaml"))
    a = [s for s in scenario.steps if s.session == "A"]
    assert a[1].capture == "job" and "RETURNING id" in a[1].sql and "LIMIT 1" in a[1].sql
    assert [s.sql for s in a[2:5]] == [
        "INSERT INTO jqd_claims (job_id, worker) VALUES (:job, 0)", "COMMIT", "INSERT INTO jqd_effects (job_id, worker) VALUES (:job, 0)",
    ]
    r = [s for s in scenario.steps if s.session == "R"]
    assert r[1].capture == "rescued" and r[2].sql.endswith("WHERE id IN (:rescued) AND state = 'running'")


@pytest.mark.parametrize("engine", ENGINES)
def test_explore_finds_the_double_claim_and_clears_its_fix(request, engine):
    server = request.getfixturevalue(engine)
    broken = explored(server, "read-then-mark-bug.yaml")
    assert broken.failed and broken.complete
    finding = broken.findings[0]
    assert finding.what == "no job done twice"
    assert any("double claim" in str(e) for e in finding.explanations)
    fixed = explored(server, "read-then-mark-fixed.yaml")
    # MariaDB may make a completion wait on the other claimer's index entry in one run and not in its
    # replay: such a schedule is told as diverged, which fails nothing.
    assert not fixed.failed and fixed.complete and fixed.counts["violated"] == 0


def test_an_enqueuer_among_the_claimers(pg_embedded):
    # Three sessions make 72,072 schedules: a sample of them, seeded.
    scenario = api.queue_scenario(str(QUEUES / "read-then-mark-fixed.yaml"), enqueue_during=True)
    report = api.explore(scenario, pg_embedded, api.explore_options("", None, 120, 7, 2, 10.0))
    assert not report.failed and report.explored == 120
    assert report.scenario.session_names == ("A", "B", "E")
    assert [s.sql for s in report.scenario.steps if s.session == "E"] == ["BEGIN", "INSERT INTO tasks (id) VALUES (2)", "COMMIT"]


def test_explore_queue_on_the_command_line(embedded):
    result = cli("explore", "--queue", "read-then-mark-bug", env=dsn_env(embedded))
    assert result.returncode == 1, result.stderr
    assert "double claim" in result.stdout and 'FAILED: "no job done twice" violated' in result.stdout


def test_explore_takes_a_scenario_or_a_queue():
    result = cli("explore")
    assert result.returncode == 2 and "explore takes a scenario or --queue FILE" in result.stderr


def test_a_claim_that_marks_first_captures_from_the_read_after_it():
    # delayed_job's shape on MySQL: mark one row with an UPDATE ... LIMIT, then read which one.
    from jobqueue_demo.scenario.queue_file import queue_from_text

    text = (
        "engines: [mysql]\nsetup: CREATE TABLE d (id INT PRIMARY KEY, locked_by INT NULL)\n"
        "enqueue: INSERT INTO d (id) VALUES (:job)\n"
        "claim:\n  - UPDATE d SET locked_by = :worker WHERE locked_by IS NULL ORDER BY id LIMIT 1\n"
        "  - SELECT id FROM d WHERE locked_by = :worker\n  - UPDATE d SET locked_by = locked_by WHERE id = :job\n"
        "complete: DELETE FROM d WHERE id = :job\n"
    )
    from jobqueue_demo.scenario.queue_scenario import queue_scenario

    a = [s for s in queue_scenario(queue_from_text("d.yaml", text)).steps if s.session == "A"]
    assert [s.capture for s in a[1:4]] == [None, "job", None]


def test_a_hostile_file_cannot_fake_explores_verdict_by_writing_the_tools_record(pg_embedded, tmp_path):
    # A PL/pgSQL body spells jqd_done at run time and deletes the job's earlier completions, so
    # the table never shows a job done twice. Explore first checks the tool's tables against what
    # the schedule's own events say committed, and fails on the difference.
    from jobqueue_demo.explore.tool_record import NAME

    path = hostile_queue_file(tmp_path)
    report = api.explore(api.queue_scenario(str(path)), pg_embedded, options())
    assert report.failed
    tampered = [f for f in report.findings if f.what == NAME]
    assert tampered and tampered[0].schedules > 0
    assert "no job done twice" not in {f.what for f in report.findings}
    from jobqueue_demo.render.explore_report import verdict

    assert verdict(report) == f'verdict: FAILED: "{NAME}" violated (exit 1)'


def test_a_failing_job_goes_through_fail_and_retry_and_a_retry_that_revives_a_running_job_is_found(embedded, tmp_path):
    # A's first job fails: A runs fail: and retry: for it, then claims again. 300 schedules of
    # the 6,188 in the search's order: the first violation of the revived job comes well before.
    some = api.explore_options("", 300, None, None, 2, 10.0)
    fixed = api.explore(api.queue_scenario(str(QUEUES / "delayed-job-fixed.yaml"), fail_once=True), embedded, some)
    assert not fixed.failed and fixed.explored == 300
    a = [s.sql for s in fixed.scenario.steps if s.session == "A"]
    assert [s for s in a if s.startswith(("UPDATE delayed_jobs SET attempts", "UPDATE delayed_jobs SET failed_at"))] == [
        "UPDATE delayed_jobs SET attempts = attempts + 1, locked_at = NULL, locked_by = NULL, failed_at = NOW(6) WHERE id = :job",
        "UPDATE delayed_jobs SET failed_at = NULL WHERE id = :job",
    ]
    # A retry that puts back every locked job, the one B is running among them.
    text = (QUEUES / "delayed-job-fixed.yaml").read_text()
    path = tmp_path / "bad-retry.yaml"
    path.write_text(text.replace(
        "retry: UPDATE delayed_jobs SET failed_at = NULL WHERE id = :job",
        "retry: UPDATE delayed_jobs SET failed_at = NULL, locked_at = NULL, locked_by = NULL WHERE id = :job OR locked_at IS NOT NULL",
    ))
    broken = api.explore(api.queue_scenario(str(path), fail_once=True), embedded, some)
    assert broken.failed and broken.findings[0].what == "no job done twice"


def test_fail_once_needs_fail_and_retry():
    result = cli("explore", "--queue", "read-then-mark-fixed", "--fail-once")
    assert result.returncode == 2
    assert result.stderr.strip().endswith(
        "read-then-mark-fixed.yaml: --fail-once needs fail: and retry: (what your queue runs when a job fails, "
        "and what makes it claimable again)"
    )
