"""The lesson library: every shipped lesson verifies on real servers, shows its claim, and ships in the wheel."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import LOCAL_DSN, ROOT, cli, local_server_reachable

from jobqueue_demo import api as core
from jobqueue_demo.engine.mysql import errors as mysql_errors
from jobqueue_demo.run import events as ev
from jobqueue_demo.scenario import catalogue, lessons

LESSONS = sorted((ROOT / "scenarios").glob("*.yaml"))
# Another engineer's exploration scenarios check invariants rather than teach a claim.
TEACHING = [p for p in LESSONS if not p.stem.endswith("-explore")]


# Lessons that need a Galera cluster are verified in test_cluster.py, which skips them (with
# the reason) where a cluster cannot start.
SINGLE = [p for p in LESSONS if not p.stem.startswith("cluster-")]


def test_verify_every_lesson_on_the_embedded_default():
    done = cli("verify", *[str(p) for p in SINGLE], timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Verified against MariaDB" in done.stdout or "Verified against MySQL" in done.stdout
    assert done.stdout.count(": ok (") == len(SINGLE)


@pytest.mark.skipif(not local_server_reachable(), reason="no server on 127.0.0.1:3306")
def test_verify_every_lesson_on_the_local_server():
    done = cli("verify", *[str(p) for p in SINGLE], "--dsn", LOCAL_DSN, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count(": ok (") == len(SINGLE)


@pytest.mark.parametrize("path", TEACHING, ids=lambda p: p.stem)
def test_lesson_has_what_a_class_needs(path):
    """Introduction, why, a recorded verification, and every result checked except query plans."""
    scenario = core.load(str(path))
    assert scenario.title and scenario.summary and scenario.description and scenario.why
    assert "\n" not in scenario.summary
    assert scenario.verified
    unchecked = [s.sql for _, s in scenario.statements() if s.expect is None]
    # EXPLAIN output has different columns on MySQL and MariaDB, so it is shown, not checked.
    assert all(sql.upper().startswith("EXPLAIN") for sql in unchecked), unchecked


def test_lessons_lists_every_lesson_from_any_directory(tmp_path):
    done = cli("lessons", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    for path in LESSONS:
        scenario = core.load(str(path))
        entry = next(line for line in done.stdout.splitlines() if line and line.split()[0] == path.stem)
        assert entry.endswith(scenario.summary or scenario.title)
        detail = done.stdout.splitlines()[done.stdout.splitlines().index(entry) + 1]
        assert (
            f"sessions {', '.join(scenario.session_names)}; engines {', '.join(scenario.engines)}; "
            f"verified: {scenario.verified_text}"
        ) in detail


def test_an_unreadable_lesson_is_reported_without_hiding_the_others(tmp_path, monkeypatch):
    (tmp_path / "good.yaml").write_text("title: Good\nsummary: fine\nsessions: [A]\nsteps:\n  - A: SELECT 1;\n")
    (tmp_path / "broken.yaml").write_text("title: Broken\nsessions: [A]\nsteps: []\n")
    monkeypatch.setattr(lessons, "lesson_dirs", lambda: [tmp_path])
    found = {lesson.name: lesson for lesson in catalogue.catalogue()}
    assert found["good"].summary == "fine" and found["good"].problem is None
    assert "broken.yaml:3:8: steps must be a non-empty list" in found["broken"].problem


def test_lessons_ship_in_the_wheel_and_run_by_name(tmp_path, embedded):
    """A non-editable build: the wheel holds every lesson and the CLI finds them outside the checkout."""
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        (source / name).write_bytes((ROOT / name).read_bytes())
    for folder in ("jobqueue_demo", "scenarios", "queues", "reports"):
        subprocess.run(["cp", "-r", str(ROOT / folder), str(source / folder)], check=True)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    with zipfile.ZipFile(wheel) as z:
        shipped = {Path(n).name for n in z.namelist() if n.startswith("jobqueue_demo/lessons/")}
        queues = {Path(n).name for n in z.namelist() if n.startswith("jobqueue_demo/queues/")}
        reports = {Path(n).name for n in z.namelist() if n.startswith("jobqueue_demo/reports/")}
        z.extractall(tmp_path / "site")
    assert queues == {p.name for p in (ROOT / "queues").glob("*.yaml")}  # the queue files, found by name
    assert reports == {p.name for p in (ROOT / "reports").iterdir()}  # replay's example reports, their schemas and rows
    # The isolation specs, in lessons/specs/, each with the expected output verify checks it against.
    specs = {p.name for p in (ROOT / "scenarios" / "specs").glob("*.spec")}
    specs |= {p.name for p in (ROOT / "scenarios" / "specs").glob("*.out")}
    assert {n for n in specs if n.endswith(".out")} == {n.replace(".spec", ".out") for n in specs if n.endswith(".spec")}
    assert specs and shipped == {p.name for p in LESSONS} | specs

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {
        "PYTHONPATH": str(tmp_path / "site"),
        "JOBQUEUE_DEMO_DSN": f"mysql://root@localhost/?unix_socket={embedded.params.unix_socket}",
    }
    where = subprocess.run(
        [sys.executable, "-c", "import jobqueue_demo.scenario.lessons as l; print(l.lesson_dirs()[0])"],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        cwd=elsewhere,
    )
    assert where.stdout.strip() == str(tmp_path / "site" / "jobqueue_demo" / "lessons"), where.stderr
    listed = cli("lessons", env=env, cwd=elsewhere)
    assert listed.returncode == 0 and "nowait " in listed.stdout, listed.stderr
    ran = cli("run", "nowait", env=env, cwd=elsewhere)
    assert ran.returncode == 0, ran.stderr
    assert "FOR UPDATE NOWAIT;" in ran.stdout and "ERROR 1205" in ran.stdout


# -- each new lesson shows its claim, whatever a later re-recording says ----------------


def run(name: str, server):
    return core.run(core.load(name), server, 10.0)


def completed(report, comment: str | None = None, sql: str | None = None) -> list[ev.Completed]:
    out = [e for e in report.events if isinstance(e, ev.Completed)]
    if comment is not None:
        out = [e for e in out if e.comment == comment]
    if sql is not None:
        out = [e for e in out if e.sql.startswith(sql)]
    return out


def waits(report) -> list[ev.Waiting]:
    """Who holds the lock is not asserted: on MariaDB it comes from InnoDB's cached lock
    tables, which stay stale while any other connection on the server keeps reading them."""
    return [e for e in report.events if isinstance(e, ev.Waiting)]


def test_stalled_worker_keeps_its_claim_past_a_lock_wait_timeout(server):
    report = run("stalled-worker", server)
    assert report.mismatches == []
    (waiting,) = waits(report)
    assert (waiting.session, waiting.kind) == ("B", "row lock")
    timeout = completed(report, comment="job 1 is A's")[0]
    assert timeout.result.error.errno == mysql_errors.ER_LOCK_WAIT_TIMEOUT
    assert completed(report, comment="same transaction, now going around A's job")[0].result.rows[0][0] == "2"
    assert completed(report, comment="A's job, back in the queue")[0].result.rows[0][0] == "1"


def test_starvation_younger_jobs_pass_the_oldest(server):
    report = run("starvation", server)
    assert report.mismatches == []
    states = completed(report, sql="SELECT id, task, state")[0].result.rows
    assert [(r[0], r[2]) for r in states] == [("1", "queued"), ("2", "done"), ("3", "done")]


def test_index_locks_scan_hides_a_free_job_until_indexed(server):
    report = run("index-locks", server)
    assert report.mismatches == []
    hidden = completed(report, comment="job 1 is queued and nobody works on it")[0]
    assert hidden.result.rows == ()
    (waiting,) = waits(report)
    assert (waiting.session, waiting.kind) == ("B", "row lock")
    assert completed(report, comment="the report job is free now")[0].result.rows[0][0] == "1"


def test_gap_lock_blocks_the_enqueuer_only_under_repeatable_read(server):
    report = run("gap-locks", server)
    assert report.mismatches == []
    (waiting,) = waits(report)
    # An insert intention on the gap A's next-key lock on the supremum covers: no row.
    assert (waiting.session, waiting.kind, waiting.blockers) == ("P", "insert intention lock", ("A",))
    assert waiting.comment == "a new job, id 4"
    assert completed(report, comment="no wait this time")[0].result.affected == 1


def test_same_transaction_rollback_removes_work_and_state(server):
    report = run("same-transaction", server)
    assert report.mismatches == []
    assert completed(report, comment="A sees its own uncommitted changes")[0].result.rows == (("1", "done", "120.00"),)
    assert completed(report, comment="no invoice, and the job is queued again")[0].result.rows == (("1", "queued", None),)


def test_outbox_duplicate_then_idempotent_retry(server):
    report = run("outbox", server)
    assert report.mismatches == []
    counts = completed(report, sql="SELECT recipient, COUNT(*)")
    assert counts[0].result.rows == (("ann@example.com", "2"),)
    assert counts[-1].result.rows == (("ann@example.com", "2"), ("bob@example.com", "1"))
    assert completed(report, comment="same key, so nothing is sent")[0].result.affected == 0


def test_disconnected_worker_email_survives_its_rollback(server):
    report = run("disconnect-worker", server)
    assert report.mismatches == []
    assert completed(report, comment="but B's email is still sent")[0].result.rows == (("Your invoice (job 2)",),)


def test_supremum_wait_completion_waits_only_when_done_sorts_first(server):
    report = run("supremum-wait", server)
    assert report.mismatches == []
    (waiting,) = waits(report)
    assert (waiting.session, waiting.kind) == ("B", "insert intention lock")
    assert waiting.comment == "B never touched job 2, yet it waits for A"
    assert completed(report, comment="only now can B's completion go in")[0].result is not None
