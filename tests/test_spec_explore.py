"""`explore FILE.spec`: the spec's own permutations, run as isolationtester runs them, with a
fault in place of each step (`--faults`) and the spec's `#@invariant` lines checked after
each; `--show-all` prints every permutation as isolationtester prints it. On the shared
PostgreSQL (as the per-run role) and the embedded one."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from conftest import LOCAL_PG_DSN, ROOT, cli, local_pg_reachable
from jobqueue_demo.errors import ScenarioError
from jobqueue_demo.scenario.loader import load_scenario

SPECS = ROOT / "scenarios" / "specs"
REFERENCE = Path("/usr/lib/postgresql/15/lib/pgxs/src/test/isolation/isolationtester")

needs_pg = pytest.mark.skipif(not local_pg_reachable(), reason="no PostgreSQL on 127.0.0.1:5432")


def test_invariant_lines_are_read_beside_the_grammar(tmp_path):
    path = tmp_path / "inv.spec"
    path.write_text(
        "setup { CREATE TABLE t (a int); }\n"
        "#@invariant no_rows { SELECT a FROM t WHERE a < 0 }\n"
        "session s1\nstep a { INSERT INTO t VALUES (1); }\n"
        "#@invariant   two_words\t{ SELECT 1 WHERE false }  \n"
    )
    scenario = load_scenario(str(path))
    assert [(i.name, i.sql, i.expect, i.line) for i in scenario.invariants] == [
        ("no_rows", "SELECT a FROM t WHERE a < 0", (), 2),
        ("two_words", "SELECT 1 WHERE false", (), 5),
    ]
    assert scenario.spec.setups == ["CREATE TABLE t (a int);"]  # the grammar never saw them


BAD = {
    "no braces": ("#@invariant x SELECT 1\nsession s1 step a { SELECT 1; }\n", 1, "expected NAME { SQL }"),
    "no name": ("session s1 step a { SELECT 1; }\n#@invariant { SELECT 1 }\n", 2, "expected NAME { SQL }"),
    "empty SQL": ("session s1 step a { SELECT 1; }\n\n#@invariant x {  }\n", 3, "its SQL is empty"),
    "a brace inside": ("#@invariant x { SELECT '}' }\nsession s1 step a { SELECT 1; }\n", 1, "expected NAME { SQL }"),
    "twice": ("#@invariant x { SELECT 1 }\n#@invariant x { SELECT 2 }\nsession s1 step a { SELECT 1; }\n", 2, "duplicate invariant"),
    "refused by sql_guard": (
        "session s1 step a { SELECT 1; }\n#@invariant x { CREATE TABLE u (a int) DATA DIRECTORY '/tmp' }\n", 2, "DATA DIRECTORY",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_invariant_line_is_told_at_its_file_and_line(case, tmp_path):
    text, line, words = BAD[case]
    path = tmp_path / "bad.spec"
    path.write_text(text)
    with pytest.raises(ScenarioError) as caught:
        load_scenario(str(path))
    assert str(caught.value).startswith(f"{path}:{line}: "), str(caught.value)
    assert words in str(caught.value)


@needs_pg
def test_a_crash_between_claim_and_done_loses_a_job_and_the_held_claim_does_not():
    """lost-claim.spec holds in every permutation of its two workers; a worker disconnected in
    place of its `done` step leaves its job 'running'. held-claim.spec, the claim in a
    transaction, holds with both faults."""
    clean = cli("explore", str(SPECS / "lost-claim.spec"), "--dsn", LOCAL_PG_DSN)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "space: 6 permutations, all run" in clean.stdout
    assert 'verdict: invariants hold in all 6 permutation(s): "no_job_left_running"' in clean.stdout

    crashed = cli("explore", str(SPECS / "lost-claim.spec"), "--dsn", LOCAL_PG_DSN, "--faults", "disconnect")
    assert crashed.returncode == 1, crashed.stdout + crashed.stderr
    assert "== invariant violated: no_job_left_running; first in permutation: w1claim w1done!disconnect w2claim w2done" in crashed.stdout
    assert "step w1done!disconnect: <disconnected abruptly" in crashed.stdout
    assert "invariant no_job_left_running: VIOLATED\nid|owner\n--+-----\n 1|w1   \n(1 row)\n" in crashed.stdout
    assert 'verdict: FAILED: "no_job_left_running" violated (exit 1)' in crashed.stdout

    held = cli("explore", str(SPECS / "held-claim.spec"), "--dsn", LOCAL_PG_DSN, "--faults", "rollback,disconnect", "--json")
    assert held.returncode == 0, held.stdout + held.stderr
    report = json.loads(held.stdout)
    assert report["explored"] == report["planned"] > 20 and report["findings"] == []
    assert report["outcomes"] == {"ok": report["explored"], "invariant violated": 0, "stuck": 0}


@needs_pg
def test_a_rollback_in_a_steps_place_is_sent_as_the_step_and_the_session_stops(tmp_path):
    crashed = cli("explore", str(SPECS / "lost-claim.spec"), "--dsn", LOCAL_PG_DSN, "--faults", "rollback", "--json")
    report = json.loads(crashed.stdout)
    found = report["findings"][0]
    assert found["permutation"] == ["w1claim", "w1done!rollback", "w2claim", "w2done"]
    assert "step w1done!rollback: ROLLBACK;\n" in found["output"]
    assert "step w1done: " not in found["output"]


@needs_pg
@pytest.mark.parametrize("spec", ["deadlock.spec", "blockers.spec", "notices.spec", "all-interleavings.spec"])
def test_show_all_without_faults_prints_what_isolationtester_prints(spec, tmp_path):
    """The permutations --show-all prints are isolationtester's output for the spec, byte for
    byte (the reference binary run on a database made for it), the report after them."""
    if not REFERENCE.exists():
        pytest.skip(f"no {REFERENCE} (Debian's postgresql-15)")
    database = f"jqdtest_{os.urandom(6).hex()}"  # tests may run at once (pytest-xdist): a name of its own
    subprocess.run(["psql", "-h", "127.0.0.1", "-U", "root", "-d", "test", "-qc", f'CREATE DATABASE "{database}"'], check=True)
    try:
        theirs = subprocess.run(
            [str(REFERENCE), f"host=127.0.0.1 user=root dbname={database}"], stdin=open(SPECS / spec),
            capture_output=True, text=True, timeout=120,
        ).stdout
    finally:
        subprocess.run(["psql", "-h", "127.0.0.1", "-U", "root", "-d", "test", "-qc", f'DROP DATABASE "{database}"'], check=True)
    ours = cli("--allow-shared-user", "explore", str(SPECS / spec), "--dsn", LOCAL_PG_DSN, "--show-all")
    assert ours.returncode == 0, ours.stdout + ours.stderr
    printed, _, report = ours.stdout.partition("\n\nspace: ")
    assert printed + "\n" == theirs
    assert report.startswith(f"{theirs.count('starting permutation:')} permutations, all run")


@needs_pg
def test_an_invariant_runs_as_the_per_run_role(tmp_path):
    """An invariant's SQL gains nothing over the steps': pg_authid is the superuser's alone, so
    asking it fails as the role, and the failure counts as the invariant not holding."""
    path = tmp_path / "nosy.spec"
    path.write_text(
        "setup { CREATE TABLE t (a int); }\nteardown { DROP TABLE t; }\n"
        "session s1\nstep a { INSERT INTO t VALUES (1); }\n"
        "#@invariant reads_passwords { SELECT rolpassword FROM pg_catalog.pg_authid WHERE false }\n"
    )
    done = cli("explore", str(path), "--dsn", LOCAL_PG_DSN, "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    found = json.loads(done.stdout)["findings"]
    assert [(f["kind"], f["what"]) for f in found] == [("invariant violated", "reads_passwords")]
    assert "permission denied for table pg_authid" in found[0]["output"]


def test_what_explore_of_a_spec_cannot_do_is_one_line():
    done = cli("explore", str(SPECS / "lost-claim.spec"), "--faults", "kill-query")
    assert done.returncode == 2 and "unknown fault 'kill-query'" in done.stderr and "Traceback" not in done.stderr
    done = cli("explore", "skip-locked-explore", "--show-all")
    assert done.returncode == 2 and "--show-all prints a .spec's permutations" in done.stderr
    done = cli("explore", str(SPECS / "lost-claim.spec"), "--show-all", "--json")
    assert done.returncode == 2 and "leave out --json" in done.stderr


def test_lessons_lists_the_shipped_specs_with_their_permutations(tmp_path):
    done = cli("lessons", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    _, specs = out.split("-- isolation specs", 1)
    for path in sorted(SPECS.glob("*.spec")):
        assert f"\n{path.name} " in specs, path.name
    lost = specs.split("\nlost-claim.spec", 1)[1].splitlines()
    assert lost[0].strip().startswith("Claims marked in autocommit: a worker's UPDATE ... RETURNING marks its job")
    assert lost[1].strip() == "sessions w1, w2; engines postgresql; 6 permutation(s)"
    assert "\nall-interleavings.spec" in specs and "6 permutation(s)" in specs.split("\nall-interleavings.spec", 1)[1]


@needs_pg
@pytest.mark.parametrize("appname", ["", "isolation/jqdtest"])
def test_a_specs_sessions_are_named_as_isolationtesters(appname, tmp_path):
    """isolationtester appends /SESSION to the application_name it was given ($PGAPPNAME, as
    pg_isolation_regress sets it): a spec that reads its own name prints the same."""
    if not REFERENCE.exists():
        pytest.skip(f"no {REFERENCE} (Debian's postgresql-15)")
    spec = tmp_path / "appname.spec"
    spec.write_text("session s1\nstep a { SELECT application_name FROM pg_stat_activity WHERE pid = pg_backend_pid(); }\n")
    env = {"PGAPPNAME": appname} if appname else {}
    theirs = subprocess.run([str(REFERENCE), "host=127.0.0.1 user=root dbname=test"], stdin=open(spec),
                            capture_output=True, text=True, timeout=60, env=env).stdout
    ours = cli("run", str(spec), "--dsn", LOCAL_PG_DSN, "--format", "isolationtester", env=env)
    assert ours.returncode == 0, ours.stderr
    assert f"\n{appname}/s1" in theirs and ours.stdout == theirs


@needs_pg
def test_a_sample_of_a_specs_permutations_is_drawn_by_its_seed():
    first, again = (
        json.loads(cli("explore", "held-claim.spec", "--dsn", LOCAL_PG_DSN, "--faults", "rollback,disconnect",
                       "--sample", "5", "--seed", "3", "--json").stdout)
        for _ in range(2)
    )
    assert first["explored"] == 5 and first["planned"] > 5 and first["seed"] == 3
    assert first["outcomes"] == again["outcomes"]
    done = cli("explore", "held-claim.spec", "--dsn", LOCAL_PG_DSN, "--max-schedules", "4")
    assert "space: 20 permutations, the first 4 run" in done.stdout


@needs_pg
def test_a_stuck_permutation_is_a_finding_and_the_next_one_runs(tmp_path):
    """b1 waits for a1's row lock, and nothing in the first permutation commits a1: stuck after
    the step timeout. Every session is ended (a1's open transaction too, or the teardown's DROP
    would wait for it) and connected anew, and the next permutation runs and holds."""
    spec = tmp_path / "stuck.spec"
    spec.write_text(
        "setup { CREATE TABLE t (id int PRIMARY KEY, v int); INSERT INTO t VALUES (1, 0); }\n"
        "teardown { DROP TABLE t; }\n"
        "session a\nstep a1 { BEGIN; UPDATE t SET v = 1 WHERE id = 1; }\nstep a2 { COMMIT; }\n"
        "session b\nstep b1 { UPDATE t SET v = 2 WHERE id = 1; }\n"
        "permutation a1 b1\npermutation a1 b1 a2\n"
        "#@invariant b_last { SELECT v FROM t WHERE v <> 2 }\n"
    )
    done = cli("explore", str(spec), "--dsn", LOCAL_PG_DSN, "--step-timeout", "1", "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["outcomes"] == {"ok": 1, "invariant violated": 0, "stuck": 1}
    (found,) = report["findings"]
    assert found["kind"] == "stuck" and found["permutation"] == ["a1", "b1"]
    assert "step b1: UPDATE t SET v = 2 WHERE id = 1; <waiting ...>" in found["output"]
    assert "invariant b_last" not in found["output"]


LEASE = ROOT / "bench" / "specs" / "skip-locked-lease.spec"


def _without_timing(out: str) -> str:
    return re.sub(r"; [\d.]+ s( on \d+ scratch databases at once)?\n", "\n", out)


@needs_pg
def test_permutations_run_on_several_scratch_databases_are_told_as_one_runner_tells_them():
    """450 permutations (a rollback in place of each step): more than one runner, each on a
    scratch database of its own, and the report and every permutation printed as one runner
    prints them, in the spec's order."""
    command = ("explore", str(LEASE), "--faults", "rollback", "--show-all", "--dsn", LOCAL_PG_DSN)
    one = cli(*command, "--jobs", "1", timeout=180)
    several = cli(*command, "--jobs", "3", timeout=180)
    assert one.returncode == several.returncode == 0, one.stderr + several.stderr
    assert re.search(r"; [\d.]+ s on [23] scratch databases at once\n", several.stdout), several.stdout[-400:]
    assert "at once" not in one.stdout
    assert _without_timing(several.stdout) == _without_timing(one.stdout)
    assert one.stdout.count("starting permutation:") == 450


@needs_pg
def test_a_spec_that_sets_a_timeout_runs_on_one_runner(tmp_path):
    """A timeout's race (here each session's lock_timeout) could end otherwise on a machine
    busier with other runners: such a spec's permutations stay on one."""
    spec = tmp_path / "lease-with-timeout.spec"
    spec.write_text(LEASE.read_text().replace("session y\n", "session y\nsetup { SET lock_timeout = '10s'; }\n"))
    done = cli("explore", str(spec), "--faults", "rollback", "--jobs", "3", "--dsn", LOCAL_PG_DSN, "--json", timeout=180)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["explored"], report["runners"]) == (450, 1)
