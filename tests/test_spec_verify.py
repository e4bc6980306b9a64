"""`verify FILE.spec`: an isolation spec's output checked against its expected file, as
pg_isolation_regress checks isolationtester's; several specs in one scratch database, each
starting from nothing the one before left."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import LOCAL_PG_DSN, ROOT, cli, local_pg_reachable
from jobqueue_demo import api
from jobqueue_demo.run import events as ev
from jobqueue_demo.scenario.spec import expected_outputs

ISOLATIONTESTER = Path("/usr/lib/postgresql/15/lib/pgxs/src/test/isolation/isolationtester")

CLAIM = """
setup { CREATE TABLE jobs (id int PRIMARY KEY); INSERT INTO jobs VALUES (1), (2); }
teardown { DROP TABLE jobs; }
session a
step a_claim { BEGIN; SELECT id FROM jobs ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED; }
step a_done { COMMIT; }
session b
step b_claim { SELECT id FROM jobs ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED; }
permutation a_claim b_claim a_done
"""

CLAIM_OUT = """Parsed test spec with 2 sessions

starting permutation: a_claim b_claim a_done
step a_claim: BEGIN; SELECT id FROM jobs ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED;
id
--
 1
(1 row)

step b_claim: SELECT id FROM jobs ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED;
id
--
 2
(1 row)

step a_done: COMMIT;
"""


def _pg_or_skip() -> None:
    if not local_pg_reachable():
        pytest.skip("no PostgreSQL on 127.0.0.1:5432")


def test_expected_outputs_are_found_beside_the_spec_else_in_expected(tmp_path):
    specs, expected = tmp_path / "specs", tmp_path / "expected"
    specs.mkdir()
    expected.mkdir()
    (specs / "a.spec").write_text(CLAIM)
    assert expected_outputs(str(specs / "a.spec")) == []
    (expected / "a.out").write_text("x")
    (expected / "a_1.out").write_text("y")
    assert [Path(p).name for p in expected_outputs(str(specs / "a.spec"))] == ["a.out", "a_1.out"]
    (specs / "a.out").write_text("z")  # beside the spec comes first
    assert [Path(p) for p in expected_outputs(str(specs / "a.spec"))] == [specs / "a.out"]


def test_a_spec_equal_to_its_expected_output_verifies_and_a_differing_one_shows_the_diff(tmp_path):
    _pg_or_skip()
    specs, expected = tmp_path / "specs", tmp_path / "expected"
    specs.mkdir()
    expected.mkdir()
    (specs / "claim.spec").write_text(CLAIM)
    (expected / "claim.out").write_text(CLAIM_OUT)
    (specs / "other.spec").write_text(CLAIM)
    (expected / "other.out").write_text(CLAIM_OUT.replace(" 2\n", " 3\n"))
    (expected / "other_1.out").write_text(CLAIM_OUT.replace("b_claim", "b_claimed"))
    (specs / "plain.spec").write_text(CLAIM)  # no expected output: run, nothing to compare
    done = cli("verify", str(specs / "claim.spec"), str(specs / "other.spec"), str(specs / "plain.spec"), "--dsn", LOCAL_PG_DSN,
               timeout=180)
    assert done.returncode == 1, done.stdout + done.stderr
    out = done.stdout
    assert f"{specs / 'claim.spec'}: ok (its output is {expected / 'claim.out'})" in out
    assert f"{specs / 'other.spec'}: its output differs from {expected / 'other.out'} (and 1 alternative(s))" in out
    assert "  - 3\n" in out and "  + 2\n" in out  # the diff, against the first expected file
    assert f"{specs / 'plain.spec'}: ok (0 expectation(s))" in out
    assert "1 of 3 scenario(s) differ" in out
    (expected / "other.out").unlink()
    (expected / "other_1.out").write_text(CLAIM_OUT)  # an alternative that matches is enough
    done = cli("verify", str(specs / "other.spec"), "--dsn", LOCAL_PG_DSN, timeout=180)
    assert done.returncode == 0 and f"ok (its output is {expected / 'other_1.out'})" in done.stdout, done.stdout


def test_a_differing_output_is_shown_with_its_control_characters_written_out(tmp_path):
    """A diff goes to a terminal, and the server's text in it is the spec's choice: an escape
    sequence from a step's value is written out, never sent to the terminal."""
    _pg_or_skip()
    (tmp_path / "esc.spec").write_text("session s\nstep s_esc { SELECT chr(27) || '[2J' AS screen; }\n")
    (tmp_path / "esc.out").write_text("Parsed test spec with 1 sessions\n")
    done = cli("verify", str(tmp_path / "esc.spec"), "--dsn", LOCAL_PG_DSN, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "\x1b" not in done.stdout and "+\\x1B[2J" in done.stdout, done.stdout


def test_the_shipped_specs_equal_their_expected_outputs_which_isolationtester_made():
    """scenarios/specs/NAME.out were written by PostgreSQL 15's isolationtester (PGAPPNAME=
    isolation/NAME, as pg_isolation_regress runs it); verify checks ours against them."""
    _pg_or_skip()
    shipped = sorted((ROOT / "scenarios" / "specs").glob("*.spec"))
    assert all(s.with_suffix(".out").is_file() for s in shipped), [s.name for s in shipped if not s.with_suffix(".out").exists()]
    done = cli("verify", *map(str, shipped), "--dsn", LOCAL_PG_DSN, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count(": ok (its output is ") == len(shipped)


LEAVES = """
setup { CREATE TABLE left_behind (id int); }
session s
step s_leave {
  SELECT lo_create(4242) > 0 AS made;
  DO $$ BEGIN EXECUTE format('ALTER ROLE %I SET search_path = nowhere', current_user); END $$;
  CREATE FUNCTION now_wrong() RETURNS int LANGUAGE sql AS 'SELECT 1';
}
"""

LOOKS = """
setup { CREATE TABLE left_behind (id int); }
teardown { DROP TABLE left_behind; }
session s
step s_look {
  SELECT (SELECT count(*) FROM pg_largeobject_metadata) AS large_objects,
         (SELECT count(*) FROM pg_proc WHERE proname = 'now_wrong') AS functions,
         current_setting('search_path') AS search_path;
}
"""


def test_specs_verified_together_share_a_database_and_none_inherits_what_another_left(tmp_path):
    """The first spec leaves a table (no teardown), a large object, a function and a session
    default it gave its own role (ALTER ROLE ... SET search_path): the second, in the same
    scratch database and as the same role, meets none of them; its setup makes the same
    table again. Without the reset, its output would be another spec's doing."""
    _pg_or_skip()
    first, second = tmp_path / "leaves.spec", tmp_path / "looks.spec"
    first.write_text(LEAVES)
    second.write_text(LOOKS)
    with api.server(LOCAL_PG_DSN) as server, api.shared_scratch(server, 30.0) as scratch:
        ran = [api.run(api.load(str(path)), server, 30.0, scratch=scratch) for path in (first, second)]
    databases = {e.database for report in ran for e in report.events if isinstance(e, ev.RunStarted)}
    assert len(databases) == 1
    looked = next(e.result for e in ran[1].events if isinstance(e, ev.Completed))
    assert looked.error is None, looked.error
    assert looked.rows == (("0", "0", '"$user", public'),)


@pytest.mark.skipif(not ISOLATIONTESTER.exists(), reason="needs PostgreSQL 15's isolationtester")
def test_the_corpus_bench_runs_both_tools_and_checks_both_outputs():
    """Speed is measured by bench/bench_spec_corpus.py, never asserted in a test: its --quick
    form runs here, on the project's own specs, and fails (exit 1) when an output differs."""
    _pg_or_skip()
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_spec_corpus.py"), "--quick"],
                          capture_output=True, text=True, timeout=600, env=dict(os.environ))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ratio jobqueue-demo verify / isolationtester, the corpus:" in done.stdout
