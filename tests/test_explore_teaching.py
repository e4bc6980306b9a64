"""explore does not teach what is untrue: honest comments, the explore variant, faults, verdicts."""

from __future__ import annotations

import io
import re

import pytest

from conftest import cli, dsn_env, scratch_databases
from jobqueue_demo import api as core
from jobqueue_demo.run import events as ev
from jobqueue_demo.errors import ScenarioError
from jobqueue_demo.run.driver import Run

SKIPPED = "job 1 is claimed — skipped without waiting"


def test_seed_lesson_names_its_explore_variant_and_keeps_only_true_comments(embedded):
    done = cli("explore", "skip-locked", env=dsn_env(embedded))
    out = done.stdout
    first = out.splitlines()[0]
    assert "skip-locked hard-codes job ids and has no invariants" in first
    assert "jobqueue-demo explore skip-locked-explore" in first
    # The deadlock counterexamples have B claim job 1; the lesson's comment says B skipped it.
    assert "deadlock" in out and "  1 | send welcome email" in out
    for match in re.finditer(re.escape(SKIPPED), out):
        table = out[match.end():].split("(1 row)")[0]
        assert "2 | generate invoice" in table, table
    assert out.rstrip().splitlines()[-1].startswith("verdict: no invariants to check")


def test_correct_recipe_is_clean_under_every_fault(embedded):
    done = cli(
        "explore", "skip-locked-explore", "--faults", "rollback,disconnect", "--max-schedules", "300",
        env=dsn_env(embedded),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "invariant violated 0" in done.stdout
    assert "-- note" not in done.stdout  # no note: this lesson was written for explore
    verdict = done.stdout.rstrip().splitlines()[-1]
    assert verdict.startswith("verdict: invariants hold in all 300 schedule(s)")
    assert '"every job done" (without faults)' in verdict and '"every job done or queued again"' in verdict


def test_broken_recipe_still_shows_the_double_claim_under_faults(embedded):
    done = cli(
        "explore", "claim-without-lock-explore", "--faults", "rollback,disconnect", "--max-schedules", "300",
        env=dsn_env(embedded),
    )
    assert done.returncode == 1
    assert '== invariant violated: "no job done twice"' in done.stdout
    assert done.stdout.rstrip().splitlines()[-1].startswith('verdict: FAILED: "no job done twice" violated')


BACK_IN_THE_QUEUE = """\
title: B gives its job back
sessions: [A, B]
setup: |
  CREATE TABLE jobs (id INT PRIMARY KEY) ENGINE=InnoDB;
  INSERT INTO jobs VALUES (1), (2);
steps:
  - A: BEGIN;
  - A: SELECT id FROM jobs ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED;
  - B: BEGIN;
  - B: SELECT id FROM jobs ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED;
  - B: ROLLBACK;
  - A: SELECT id FROM jobs WHERE id > 1 ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED;
    comment: B's job, back in the queue
    expect: {rows: [[2]]}
  - A: COMMIT;
"""


def test_a_comment_is_shown_only_while_the_schedule_is_the_lessons_order(tmp_path, embedded):
    """A's second claim gets job 2 in every order, but it is "B's job, back in the queue"
    only where B took it and gave it back first, as in the lesson."""
    from jobqueue_demo.explore.advice import honest_events
    from jobqueue_demo.explore.search import ExploreOptions, explore

    path = tmp_path / "back.yaml"
    path.write_text(BACK_IN_THE_QUEUE)
    scenario = core.load(str(path))
    seen = {}
    explore(scenario, embedded, ExploreOptions(), lambda s: seen.setdefault(" ".join(map(str, s.moves)), s))

    def comments(moves: str) -> list:
        return [e.comment for e in honest_events(scenario, seen[moves].events) if getattr(e, "comment", None)]

    assert comments("A1 A2 B1 B2 B3 A3 A4") == ["B's job, back in the queue"]
    assert comments("A1 A2 A3 A4 B1 B2 B3") == []  # B had not started
    assert comments("A1 B1 A2 B2 B3 A3 A4") == []  # the same steps, another order before them


WAIT_THEN_DISCONNECT = """\
title: a waiting session's process dies
sessions: [A, B]
setup: |
  CREATE TABLE jobs (id INT PRIMARY KEY, state VARCHAR(20) NOT NULL DEFAULT 'queued') ENGINE=InnoDB;
  INSERT INTO jobs (id) VALUES (1);
steps:
  - A: BEGIN;
  - A: SELECT id FROM jobs WHERE id = 1 FOR UPDATE;
  - B: BEGIN;
  - B: UPDATE jobs SET state = 'done' WHERE id = 1;
  - disconnect: B
  - A: COMMIT;
  - A: SELECT state FROM jobs;
"""


def test_disconnect_during_a_lock_wait_does_not_wait_for_the_server(tmp_path, embedded):
    path = tmp_path / "orphan.yaml"
    path.write_text(WAIT_THEN_DISCONNECT)
    before = scratch_databases(embedded)
    run = Run(core.load(str(path)), embedded)
    events = list(run.events())
    fault = next(e for e in events if isinstance(e, ev.FaultApplied))
    assert "its statement was waiting" in fault.detail and fault.took_ms is None
    final = [e for e in events if isinstance(e, ev.Completed)][-1]
    # B's UPDATE runs when A commits, finds its client gone and is rolled back.
    assert final.result.rows in ((("queued",),), (("done",),))
    assert scratch_databases(embedded) == before


def refused(path, where: str, words: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        core.load(str(path))
    assert f"{path}:{where}:" in str(caught.value) and words in str(caught.value)


def test_loader_checks_holds_and_explore_keys(tmp_path):
    lesson = tmp_path / "lesson.yaml"
    lesson.write_text("title: t\nsessions: [A]\nexplore: lesson-explore\nsteps:\n  - A: SELECT 1;\n")
    refused(lesson, "3", "no lesson 'lesson-explore' next to this one or shipped")
    (tmp_path / "lesson-explore.yaml").write_text("title: v\nsessions: [A]\nsteps:\n  - A: SELECT 1;\n")
    assert core.load(str(lesson)).explore == "lesson-explore"
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "title: t\nsessions: [A]\nsteps:\n  - A: SELECT 1;\ninvariants:\n"
        "  - name: n\n    sql: SELECT 1\n    expect: [[1]]\n    holds: sometimes\n"
    )
    refused(bad, "9", "always, without-faults")


class _Terminal:
    """A stream that says it is a terminal, keeping what was written."""

    def __init__(self):
        self.buffer = io.StringIO()

    def isatty(self) -> bool:
        return True

    def write(self, text: str) -> int:
        return self.buffer.write(text)

    def flush(self) -> None:
        pass


def test_progress_shows_only_after_two_seconds_and_only_on_a_terminal(monkeypatch):
    from jobqueue_demo.render import late_progress

    quick = _Terminal()
    with late_progress.LateProgress("schedules", 10, stream=quick) as advance:
        advance()
    assert quick.buffer.getvalue() == ""
    monkeypatch.setattr(late_progress, "SHOW_AFTER_S", 0.0)
    slow = _Terminal()
    with late_progress.LateProgress("schedules", 10, stream=slow) as advance:
        for _ in range(4):
            advance()
    shown = slow.buffer.getvalue()
    assert "4/10" in shown and "schedules/s" in shown and "ETA" in shown
    piped = io.StringIO()
    with late_progress.LateProgress("schedules", 10, stream=piped) as advance:
        advance()
    assert piped.getvalue() == ""
