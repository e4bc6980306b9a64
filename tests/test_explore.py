"""explore on real servers: the whole space, waits, faults, invariants and counterexamples."""

from __future__ import annotations

import io
import itertools
import json
import math
import re

import pytest

from conftest import ROOT, cli, dsn_env, scratch_databases
from jobqueue_demo import api as core
from jobqueue_demo.run import events as ev
from jobqueue_demo.explore.search import Cursor, ExploreOptions, Space, explore
from jobqueue_demo.render.explore_report import verdict

SEED = ROOT / "scenarios" / "skip-locked-explore.yaml"
BROKEN = ROOT / "scenarios" / "claim-without-lock-explore.yaml"

TWO_WORKERS = """\
title: two workers, one claim each
sessions: [A, B]
setup: |
  CREATE TABLE jobs (id INT PRIMARY KEY, state VARCHAR(20) NOT NULL DEFAULT 'queued',
                     runs INT NOT NULL DEFAULT 0) ENGINE=InnoDB;
  INSERT INTO jobs (id) VALUES (1), (2);
steps:
{steps}
invariants:
  - name: no job done twice
    sql: SELECT id FROM jobs WHERE runs > 1
    expect: []
  - name: every job done
    sql: SELECT COUNT(*) FROM jobs WHERE state <> 'done'
    expect: [[0]]
"""
CLAIM = "SELECT id FROM jobs WHERE state = 'queued' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED"


def worker_steps(session: str) -> str:
    return "\n".join(
        [
            f"  - {session}: BEGIN;",
            f'  - {session}: "{CLAIM};"',
            "    capture: claimed",
            f"  - {session}: UPDATE jobs SET state = 'done', runs = runs + 1 WHERE id = :claimed;",
            f"  - {session}: COMMIT;",
        ]
    )


def scenario_file(tmp_path, name: str, text: str):
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return core.load(str(path))


def run(scenario, server, **options):
    seen = []
    report = explore(scenario, server, ExploreOptions(**options), seen.append)
    return report, seen


def transcript(finding) -> str:
    from jobqueue_demo.render.transcript import event_lines

    return "\n".join(line.text for e in finding.shortest.events for line in event_lines(e))


# -- the space -----------------------------------------------------------------------------


def brute_force_count(space: Space) -> int:
    """Every move sequence when nothing waits, walked one by one: the bound, counted the slow way."""

    def walk(cursor: Cursor) -> int:
        enabled = space.enabled(cursor, frozenset())
        if not enabled:
            return 1
        total = 0
        for move in enabled:
            after = Cursor(space.names)
            after.positions, after.ended, after.faulted = dict(cursor.positions), set(cursor.ended), cursor.faulted
            after.take(move)
            total += walk(after)
        return total

    return walk(Cursor(space.names))


@pytest.mark.parametrize("faults", [(), ("rollback",), ("rollback", "disconnect")])
def test_the_bound_counts_every_order_and_fault_point(faults):
    scenario = core.load(str(SEED))
    space = Space(scenario, faults)
    assert space.bound() == brute_force_count(space)
    if not faults:
        a, b = len(space.tracks["A"]), len(space.tracks["B"])
        assert space.bound() == math.comb(a + b, a)


def test_seed_lesson_whole_space_every_interleaving_ok(server):
    """SKIP LOCKED never waits here, so every order of the two workers' steps is run."""
    scenario = core.load(str(SEED))
    report, seen = run(scenario, server, jobs=2)
    assert report.complete
    assert report.explored == report.bound == len(seen)
    assert report.counts["ok"] == report.explored, [(s.moves, s.findings(), s.events, s.checks) for s in seen if s.outcome != "ok"]
    assert report.findings == ()
    assert len({s.moves for s in seen}) == report.explored
    for schedule in seen:
        order = [(m.session, m.position) for m in schedule.moves]
        for name in scenario.session_names:
            mine = [p for s, p in order if s == name]
            assert mine == list(range(len(Space(scenario, ()).tracks[name])))
        assert all(check.held for check in schedule.checks) and len(schedule.checks) == len(scenario.invariants) == 3


def test_planted_bug_counterexample_shows_the_double_claim(server):
    report, seen = run(core.load(str(BROKEN)), server, jobs=2)
    assert report.complete and report.failed
    assert report.counts["violated"] > 0 and report.counts["ok"] > 0
    twice = next(f for f in report.findings if f.what == "no job done twice")
    assert twice.reproduced
    assert twice.schedules == sum(1 for s in seen if any(not c.held and c.invariant.name == "no job done twice" for c in s.checks))
    assert len(twice.shortest.moves) == min(len(s.moves) for s in seen if s.outcome == "violated")
    claims = {}
    for event in twice.shortest.events:
        if isinstance(event, ev.Completed) and event.sql.startswith("SELECT id, task"):
            claims.setdefault(event.result.rows[0][0], set()).add(event.session)
    assert any(sessions == {"A", "B"} for sessions in claims.values()), claims
    (check,) = [c for c in twice.shortest.checks if c.invariant.name == "no job done twice"]
    assert check.got.rows == (("1", "2"),)


def test_waits_hold_a_session_back_and_prune_the_space(embedded):
    report, seen = run(core.load(str(BROKEN)), embedded, jobs=2)
    assert report.explored < report.bound
    waited = 0
    for schedule in seen:
        waiting = set()
        for event in schedule.events:
            if isinstance(event, ev.Waiting):
                waiting.add(event.session)
                waited += 1
            elif isinstance(event, ev.Completed):
                assert event.session not in waiting or event.waited_ms is not None, schedule.moves
                waiting.discard(event.session)
    assert waited > 0


def test_stuck_is_an_outcome_with_the_chain(tmp_path, embedded):
    scenario = scenario_file(
        tmp_path,
        "stuck",
        "title: A keeps its lock\nsessions: [A, B]\nsetup: |\n  CREATE TABLE jobs (id INT PRIMARY KEY);\n"
        "  INSERT INTO jobs VALUES (1);\nsteps:\n  - A: BEGIN;\n"
        "  - A: SELECT id FROM jobs WHERE id = 1 FOR UPDATE;\n  - B: SELECT id FROM jobs WHERE id = 1 FOR UPDATE;\n",
    )
    report, seen = run(scenario, embedded)
    assert report.counts["stuck"] == 1 and report.counts["ok"] == 2 and report.failed
    (finding,) = report.findings
    assert [str(m) for m in finding.shortest.moves] == ["A1", "A2", "B1"]
    assert "B waits for A (row lock jobs PRIMARY X" in finding.shortest.stuck
    assert "which is idle in a transaction" in finding.shortest.stuck


WAITED_FOR = """\
title: C waits for A's claim
sessions: [A, C]
setup: |
  CREATE TABLE jobs (id INT PRIMARY KEY) ENGINE=InnoDB;
  INSERT INTO jobs VALUES (1);
steps:
  - A: BEGIN;
  - A: SELECT id FROM jobs WHERE id = 1 FOR UPDATE;
  - A: COMMIT;
  - C: BEGIN;
  - C: SELECT id FROM jobs WHERE id = 1 FOR UPDATE;
  - wait: C
  - C: COMMIT;
"""


def test_a_wait_step_costs_nothing_and_is_never_stuck(tmp_path, embedded):
    """C waits for A's claim, which only A's COMMIT, a later move, ends: `wait: C` is no move
    of its own, so it neither spends the step timeout nor makes a schedule stuck."""
    waited = scenario_file(tmp_path, "waited", WAITED_FOR)
    plain = scenario_file(tmp_path, "plain", WAITED_FOR.replace("  - wait: C\n", ""))
    report, seen = run(waited, embedded, step_timeout=1)
    without, _ = run(plain, embedded, step_timeout=1)
    assert report.counts == without.counts and report.counts["stuck"] == 0, report.findings
    assert report.bound == without.bound == math.comb(6, 3) and report.explored == without.explored
    assert sorted(" ".join(map(str, s.moves)) for s in seen)[0] == "A1 A2 A3 C1 C2 C4"


def test_a_wait_for_a_lock_wait_timeout_stays_a_schedule(tmp_path, embedded):
    """B sets a 1 s lock wait timeout: its claim timing out while A still holds the job is
    an order of its own (the lesson's, in stalled-worker), as is A committing first."""
    text = WAITED_FOR.replace("sessions: [A, C]", "sessions:\n  A:\n  C: {innodb_lock_wait_timeout: 1}")
    report, seen = run(scenario_file(tmp_path, "timeout", text), embedded)
    timed_out = [s for s in seen if any(str(m) == "C3" for m in s.moves)]
    assert timed_out and report.counts["stuck"] == 0
    claims = [e for s in timed_out for e in s.events if isinstance(e, ev.Completed) and e.session == "C" and "FOR UPDATE" in e.sql]
    assert claims and all(e.result.error.error_class == "lock-not-available" for e in claims)


TYPO = """\
title: a typo in one worker
sessions: [A, B]
setup: |
  CREATE TABLE jobs (id INT PRIMARY KEY) ENGINE=InnoDB;
  INSERT INTO jobs VALUES (1);
steps:
  - A: SELEC id FROM jobs;
  - B: SELECT id FROM jobs WHERE id = 1 FOR UPDATE NOWAIT;
    expect: {error: lock-not-available}
  - B: DELETE FROM jobs;
invariants:
  - name: the job is kept
    sql: SELECT COUNT(*) FROM jobs
    expect: [[1]]
"""


def test_an_unexpected_error_fails_the_verdict_first(tmp_path, embedded):
    path = tmp_path / "typo.yaml"
    path.write_text(TYPO)
    done = cli("explore", str(path), env=dsn_env(embedded))
    assert done.returncode == 1, done.stdout + done.stderr
    verdict = done.stdout.rstrip().splitlines()[-1]
    assert verdict == (
        'verdict: FAILED: unexpected ERROR 1064 for A at line 7 in 3 of 3 schedule(s); "the job is kept" violated (exit 1)'
    )
    assert "; unexpected error: ERROR 1064 for A at line 7 (in 3 of 3)\n" in done.stdout


def test_an_error_the_lesson_expects_is_told_as_expected(tmp_path, embedded):
    steps = "  - A: BEGIN;\n  - A: SELECT id FROM jobs FOR UPDATE;\n  - A: COMMIT;\n"
    text = TYPO.split("steps:")[0] + "steps:\n" + steps + TYPO.split("  - B: DELETE FROM jobs;\n")[0].split("SELEC id FROM jobs;\n")[1]
    report, _ = run(scenario_file(tmp_path, "expected", text), embedded)
    assert not report.failed and report.counts["error"] == 0
    assert report.counts["expected"] == 1 and report.counts["ok"] == 3
    (finding,) = report.findings
    assert finding.kind == "expected"
    assert re.fullmatch(r"ERROR \d+ for B at line 10, as its expect: says \(lock-not-available\)", finding.what)
    assert verdict(report).endswith("; 1 ended with an error that was expected, each named above")


def test_a_statement_lost_to_a_kill_step_is_expected(tmp_path, embedded):
    """kill-worker: a session the lesson kills loses its connection, which the kill step,
    not a mistake, causes."""
    steps = WAITED_FOR.split("steps:")[1].replace("  - wait: C\n", "  - kill: C\n")
    report, seen = run(scenario_file(tmp_path, "killed", WAITED_FOR.split("steps:")[0] + "steps:" + steps), embedded)
    assert not report.failed and report.counts["error"] == 0
    lost = [f for f in report.findings if f.kind == "expected"]
    assert lost and all(re.fullmatch(r"ERROR \d+ for C at line \d+, by the kill at line 12", f.what) for f in lost)


def test_deadlocks_are_counted_and_the_victim_shown(tmp_path, embedded):
    steps = "\n".join(
        f"  - {s}: {sql}"
        for s, sql in [
            ("A", "BEGIN;"), ("A", "UPDATE jobs SET runs = 1 WHERE id = 1;"), ("A", "UPDATE jobs SET runs = 1 WHERE id = 2;"),
            ("A", "COMMIT;"), ("B", "BEGIN;"), ("B", "UPDATE jobs SET runs = 1 WHERE id = 2;"),
            ("B", "UPDATE jobs SET runs = 1 WHERE id = 1;"), ("B", "COMMIT;"),
        ]
    )
    text = TWO_WORKERS.format(steps=steps).split("invariants:")[0]
    report, seen = run(scenario_file(tmp_path, "cycle", text), embedded, jobs=2)
    assert report.counts["deadlock"] > 0 and report.counts["ok"] > 0
    assert report.counts["deadlock"] + report.counts["ok"] == report.explored
    victims = [f for f in report.findings if f.kind == "deadlock"]
    assert victims and all("chosen as the victim" in f.what for f in victims)
    assert "was chosen as the deadlock victim" in transcript(victims[0])


def test_a_schedule_with_a_deadlock_and_an_unexpected_error_counts_as_the_error(tmp_path, embedded):
    """The counts once read "deadlock 9, unexpected error 0" above a verdict failed by an
    unexpected error in 3 schedules: each schedule is counted under its worst outcome, and an
    unexpected error fails the verdict where a deadlock does not."""
    steps = "\n".join(
        f"  - {s}: {sql}"
        for s, sql in [
            ("A", "BEGIN;"), ("A", "UPDATE jobs SET runs = 1 WHERE id = 1;"), ("A", "UPDATE jobs SET runs = 1 WHERE id = 2;"),
            ("A", "COMMIT;"), ("A", "SELEC 1;"), ("B", "BEGIN;"), ("B", "UPDATE jobs SET runs = 1 WHERE id = 2;"),
            ("B", "UPDATE jobs SET runs = 1 WHERE id = 1;"), ("B", "COMMIT;"),
        ]
    )
    text = TWO_WORKERS.format(steps=steps).split("invariants:")[0]
    report, _ = run(scenario_file(tmp_path, "cycle_typo", text), embedded, jobs=2)
    assert any(f.kind == "deadlock" for f in report.findings)
    assert report.counts["error"] == report.explored and report.failed


def test_faults_at_every_point_keep_jobs_single(tmp_path, embedded):
    text = TWO_WORKERS.format(steps=worker_steps("A") + "\n" + worker_steps("B"))
    scenario = scenario_file(tmp_path, "faults", text)
    report, seen = run(scenario, embedded, faults=("rollback", "disconnect"), jobs=2)
    assert report.complete and report.explored == report.bound
    faulted = [s for s in seen if any(m.fault for m in s.moves)]
    assert {m.fault for s in faulted for m in s.moves if m.fault} == {"rollback", "disconnect"}
    assert all(sum(1 for m in s.moves if m.fault) <= 1 for s in seen)
    # Safety holds whoever gives up; only a worker that gave up leaves a job undone.
    assert all(c.held for s in seen for c in s.checks if c.invariant.name == "no job done twice")
    undone = [s for s in seen if any(not c.held for c in s.checks)]
    assert undone and all(any(m.fault for m in s.moves) for s in undone)
    assert report.counts["ok"] == math.comb(8, 4) + len(faulted) - len(undone)
    disconnect = next(s for s in seen if s.moves and s.moves[-1].fault == "disconnect")
    assert any(isinstance(e, ev.FaultApplied) and e.action == "disconnect" for e in disconnect.events)


def test_snapshot_reset_matches_rebuilding_the_database(embedded):
    scenario = core.load(str(BROKEN))
    fast, fast_seen = run(scenario, embedded, max_schedules=60)
    slow, slow_seen = run(scenario, embedded, max_schedules=60, recreate=True)
    assert "snapshot" in fast.reset and "rebuilt" in slow.reset
    assert not fast.complete and fast.explored == 60
    assert [(s.moves, s.outcome) for s in fast_seen] == [(s.moves, s.outcome) for s in slow_seen]
    assert {s.outcome for s in fast_seen} == {"ok", "violated"}


def test_auto_increment_and_rows_are_put_back(tmp_path, embedded):
    text = """\
title: inserts
sessions: [A, B]
setup: |
  CREATE TABLE runs (id INT AUTO_INCREMENT PRIMARY KEY, who CHAR(1)) ENGINE=InnoDB;
  INSERT INTO runs (who) VALUES ('s');
steps:
  - A: INSERT INTO runs (who) VALUES ('A');
  - B: INSERT INTO runs (who) VALUES ('B');
invariants:
  - name: ids start after setup's
    sql: SELECT MIN(id), MAX(id), COUNT(*) FROM runs
    expect: [[1, 3, 3]]
"""
    report, seen = run(scenario_file(tmp_path, "inserts", text), embedded)
    assert "snapshot" in report.reset
    assert report.explored == 2 and report.counts["ok"] == 2


NO_COLUMN_TO_COPY = """\
title: a table with no column to copy
engines: [mysql, postgresql]
sessions: [A, B]
setup:
  mysql: |
    CREATE TABLE marks (v INT AS (1) VIRTUAL);
    INSERT INTO marks () VALUES (), ();
  postgresql: |
    CREATE TABLE marks ();
    INSERT INTO marks DEFAULT VALUES;
    INSERT INTO marks DEFAULT VALUES;
steps:
  - A: {mysql: "INSERT INTO marks () VALUES ();", postgresql: "INSERT INTO marks DEFAULT VALUES;"}
  - B: SELECT COUNT(*) FROM marks;
invariants:
  - name: one mark more than setup's
    sql: SELECT COUNT(*) FROM marks
    expect: [[3]]
"""


@pytest.mark.parametrize("engine", ["embedded", "pg_embedded", "pg_local"])
def test_a_table_with_no_column_to_copy_is_put_back(tmp_path, engine, request):
    """PostgreSQL allows a table of no columns, MariaDB one of generated columns only: the
    reset puts their rows back (it was a syntax error, `INSERT INTO t () ... SELECT  FROM`)."""
    server = request.getfixturevalue(engine)
    report = core.explore(scenario_file(tmp_path, "marks", NO_COLUMN_TO_COPY), server, ExploreOptions())
    assert "snapshot" in report.reset
    assert report.explored == 2 and report.counts["ok"] == 2, report.findings


COUNTS_ITS_CHECKS = """\
title: an invariant that holds only the first time its connection asks
sessions: [A, B]
steps:
  - A: SELECT 1;
  - B: SELECT 2;
invariants:
  - name: first check on this connection
    sql: SELECT @checks := COALESCE(@checks, 0) + 1
    expect: [[1]]
"""


def test_a_finding_not_reproduced_shows_the_schedule_that_did_it(tmp_path, embedded):
    """The invariants' connection keeps @checks from one schedule to the next: the second
    schedule fails, and the run again, on a fresh connection, does not. The report shows
    the first run, the one that failed, never the run again that did not."""
    from jobqueue_demo.render.explore_report import print_report

    report, seen = run(scenario_file(tmp_path, "checks", COUNTS_ITS_CHECKS), embedded, jobs=1)
    (finding,) = report.findings
    assert not finding.reproduced and finding.shortest.moves == seen[1].moves
    (failed,) = [c for c in finding.shortest.checks if not c.held]
    assert failed.got.rows == (("2",),)
    out = io.StringIO()
    print_report(report, out, color=False)
    assert "-- as first run, lock holders not named: run again, this schedule did not show it" in out.getvalue()
    assert '-- at the end, invariant "first check on this connection"' in out.getvalue()


def test_sample_progress_counts_distinct_schedules_only(tmp_path, embedded):
    """Random walks with faults repeat schedules: each walk once moved the bar (4000/200)."""
    scenario = core.load(str(BROKEN))
    report, seen = run(scenario, embedded, sample=12, seed=1, faults=("rollback", "disconnect"), jobs=1)
    assert len(seen) == report.explored <= 12
    assert len({execution.moves for execution in seen}) == len(seen)


def test_sample_is_reproducible_and_distinct(embedded):
    scenario = core.load(str(BROKEN))
    first, _ = run(scenario, embedded, sample=25, seed=11, jobs=1)
    again, _ = run(scenario, embedded, sample=25, seed=11, jobs=1)
    assert first.explored == again.explored == 25 and not first.complete
    assert first.counts == again.counts
    assert [f.shortest.moves for f in first.findings] == [f.shortest.moves for f in again.findings]


def test_a_sample_as_large_as_the_space_runs_it_all_once(embedded):
    """Random walks drew repeats until 20 walks a schedule wanted: --sample 1000 of a space of
    330 ran 46 s (the whole space in order: 1.1 s), its 20,000 walks each a schedule run."""
    scenario = core.load(str(BROKEN))
    whole, _ = run(scenario, embedded, jobs=1)
    sampled, seen = run(scenario, embedded, sample=whole.bound + 1, seed=3, jobs=1)
    assert sampled.complete and sampled.explored == whole.explored == len(seen)
    assert sampled.options.sample is None  # told as the whole space, not as a random sample


def test_nothing_left_behind(embedded):
    before = scratch_databases(embedded)
    run(core.load(str(SEED)), embedded, max_schedules=5, jobs=2)
    assert scratch_databases(embedded) == before


# -- the command ---------------------------------------------------------------------------


def test_cli_prints_counterexample_transcript_and_exits_1(embedded):
    done = cli("explore", str(BROKEN), env=dsn_env(embedded))
    assert done.returncode == 1, done.stderr
    out = done.stdout
    space = re.search(r"space: (\d+) schedules, all run \(up to (\d+) before waits", out)
    assert space and int(space.group(1)) < int(space.group(2))
    counts = dict((w, int(n)) for w, n in re.findall(r"(ok|invariant violated|deadlock|error|stuck) (\d+)", out.splitlines()[3]))
    assert sum(counts.values()) == int(space.group(1)) and counts["invariant violated"] > 0
    assert '== invariant violated: "no job done twice"' in out
    assert re.search(r"A> SELECT id, task FROM jobs.*\n.*\n.*\n.*\n  1 \| send welcome email", out)
    assert re.search(r"B> SELECT id, task FROM jobs.*\n.*\n.*\n.*\n  1 \| send welcome email", out)
    assert '-- at the end, invariant "no job done twice"' in out and "  1 |    2\n" in out
    assert "Traceback" not in done.stderr


def test_cli_correct_recipe_has_no_counterexample(embedded):
    done = cli("explore", "skip-locked-explore", "--json", env=dsn_env(embedded))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["complete"] and report["explored"] == report["bound"] == report["outcomes"]["ok"]
    assert report["findings"] == [] and report["schedules_per_second"] > 0


@pytest.mark.parametrize(
    "args, message",
    [
        (["--faults", "crash"], "unknown fault 'crash'"),
        (["--seed", "3"], "--seed applies to --sample only"),
        (["--sample", "3", "--max-schedules", "4"], "exclude each other"),
    ],
)
def test_cli_usage_errors_are_one_line_exit_2(embedded, args, message):
    done = cli("explore", str(SEED), *args, env=dsn_env(embedded))
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) <= 2  # the "exploring on" line, then the error


def test_cli_refuses_a_huge_space_unless_asked(tmp_path, embedded):
    steps = "\n".join(f"  - {s}: SELECT {i};" for s, i in itertools.product("ABC", range(8)))
    path = tmp_path / "huge.yaml"
    path.write_text(f"title: huge\nsessions: [A, B, C]\nsteps:\n{steps}\n")
    done = cli("explore", str(path), env=dsn_env(embedded))
    assert done.returncode == 2 and "use --max-schedules N or --sample N" in done.stderr
    sampled = cli("explore", str(path), "--sample", "3", "--seed", "1", "--json", env=dsn_env(embedded))
    assert sampled.returncode == 0, sampled.stderr
    assert json.loads(sampled.stdout)["explored"] == 3


def test_more_runners_start_only_when_the_schedules_left_outweigh_opening_one():
    """A runner's scratch database costs a CREATE and a DROP DATABASE (150-400 ms on
    PostgreSQL): for 20 schedules of 1 ms a second runner only adds them to the run."""
    import time

    from jobqueue_demo.explore.search import Helpers

    small = Helpers(1, total=20)
    assert small.wanted(0) == 0  # no runner is open yet: nothing known of the pace
    small.ready(opened_s=0.2)
    time.sleep(0.01)
    assert small.wanted(10) == 0  # 10 left at 1 ms each: 10 ms, far under 2 x 200 ms
    large = Helpers(2, total=100_000)
    large.ready(opened_s=0.2)
    time.sleep(0.01)
    assert large.wanted(10) == 2 and large.wanted(20) == 0  # both at once, and only once
    slow = Helpers(1, total=5)
    slow.ready(opened_s=0.001)
    time.sleep(0.01)
    assert slow.wanted(0) == 1  # the first schedule alone already takes longer than opening
