"""Isolation specs read as isolationtester reads them (scenario/spec.py), their mistakes told
as FILE:LINE like a YAML scenario's, and result sets drawn as libpq's PQprint draws them."""

from __future__ import annotations

import pytest

from jobqueue_demo.engine.types import Result
from jobqueue_demo.errors import ScenarioError, UsageError
from jobqueue_demo.render.isolationtester import pq_print
from jobqueue_demo.scenario.loader import load_scenario
from jobqueue_demo.scenario.spec import parse_spec, scenario_from_spec

GOOD = """# a comment
setup { CREATE TABLE t (id int); }
setup
{
  INSERT INTO t VALUES (1);
}
teardown { DROP TABLE t; }

session s1
setup     { BEGIN; }
step s1a  {   SELECT 1;   }
step "s1 b" { SELECT 2; -- an SQL comment stays
  SELECT 3; }
teardown  { COMMIT; }

session s2
step s2a  { UPDATE t SET id = 2; }

permutation s1a s2a(*) "s1 b"(s2a, s2a notices 2)
permutation s2a s1a "s1 b"
"""


def test_a_spec_reads_as_isolationtester_reads_it():
    spec = parse_spec("good.spec", GOOD)
    assert spec.setups == ["CREATE TABLE t (id int);", "\n  INSERT INTO t VALUES (1);\n"]
    assert spec.teardown == "DROP TABLE t;"
    s1, s2 = spec.sessions
    assert (s1.name, s1.setup, s1.teardown) == ("s1", "BEGIN;", "COMMIT;")
    # Spaces after { and before } go, newlines stay: the step is printed back as it is.
    assert [(s.name, s.sql, s.line) for s in s1.steps] == [
        ("s1a", "SELECT 1;", 11), ("s1 b", "SELECT 2; -- an SQL comment stays\n  SELECT 3;", 12)
    ]
    first = spec.permutations[0]
    assert [p.name for p in first] == ["s1a", "s2a", "s1 b"]
    assert [(b.step, b.notices) for b in first[1].blockers] == [(None, None)]
    assert [(b.step, b.notices) for b in first[2].blockers] == [("s2a", None), ("s2a", 2)]


def test_the_scenario_of_a_spec_is_postgresqls_with_every_step_in_session_order():
    scenario = scenario_from_spec("good.spec", GOOD)
    assert scenario.engines == ("postgresql",) and scenario.session_names == ("s1", "s2")
    assert [(s.session, s.comment) for s in scenario.steps] == [("s1", None), ("s1", "s1a"), ("s1", "s1 b"), ("s2", "s2a")]


def test_without_permutations_every_interleaving_runs_in_isolationtesters_order():
    spec = parse_spec("x.spec", "session a step a1 {1} step a2 {2} session b step b1 {3} step b2 {4}")
    assert [" ".join(p.name for p in s) for s in spec.schedules()] == [
        "a1 a2 b1 b2", "a1 b1 a2 b2", "a1 b1 b2 a2", "b1 a1 a2 b2", "b1 a1 b2 a2", "b1 b2 a1 a2",
    ]
    three = parse_spec("x.spec", "session a step x {1} session b step y {2} session c step z {3}")
    assert [" ".join(p.name for p in s) for s in three.schedules()] == ["x y z", "x z y", "y x z", "y z x", "z x y", "z y x"]


BAD = {
    "unterminated sql block": ("session s1\nstep s1a { SELECT 1;\n", 2, "unterminated sql block"),
    "unexpected character": ("session s1\nstep s1a { SELECT 1; }\n@\n", 3, 'unexpected character "@"'),
    "session without steps": ("setup { SELECT 1; }\nsession s1\nteardown { SELECT 1; }\n", 3, "session s1 has no step"),
    "step without SQL": ("session s1\nstep s1a\nstep s1b { SELECT 1; }\n", 3, "expected { SQL } after step s1a"),
    "no session": ("setup { SELECT 1; }\n", 2, "expected a session"),
    "duplicate step": ("session s1\nstep a { SELECT 1; }\nsession s2\nstep a { SELECT 2; }\n", 4, "duplicate step name: a"),
    "undefined step": ("session s1\nstep a { SELECT 1; }\n\npermutation a\n  b\n", 5, 'undefined step "b" specified in permutation'),
    "undefined blocker": ("session s1\nstep a { SELECT 1; }\npermutation a(zz)\n", 3, 'undefined blocking step "zz"'),
    "blocker in its own session": (
        "session s1\nstep a { SELECT 1; }\nstep b { SELECT 2; }\npermutation a b(a)\n", 4, "cannot block on its own session"
    ),
    "unterminated quoted name": ('session "s1\nstep a { SELECT 1; }\n', 1, "quoted identifier"),
    "setup after a session": ("session s1\nstep a { SELECT 1; }\nsetup { SELECT 2; }\n", 3, "found 'setup'"),
    "refused by sql_guard": ("session s1\nstep a {\n  SELECT 1;\n  CREATE TABLE t (a int) DATA DIRECTORY '/tmp'; }\n", 4, "DIRECTORY"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_spec_is_told_at_its_file_and_line(case, tmp_path):
    text, line, words = BAD[case]
    path = tmp_path / "bad.spec"
    path.write_text(text)
    with pytest.raises(ScenarioError) as caught:
        load_scenario(str(path))
    assert caught.value.line == line, str(caught.value)
    assert str(caught.value).startswith(f"{path}:{line}: ")
    assert words in str(caught.value)


@pytest.mark.parametrize("head", ["# no suffix\n\nsetup { SELECT 1; }\n", "setup # a comment after the keyword\n{ SELECT 1; }\n",
                                  "session# right after it\n s0 step b { SELECT 1; }\n"])
def test_a_spec_without_its_suffix_is_still_read_as_a_spec(tmp_path, head):
    path = tmp_path / "spec"  # as compare-isolationtester hands it over
    path.write_text(head + "session s1 step a { SELECT 1; }\n")
    assert load_scenario(str(path)).spec is not None


def test_a_lesson_without_its_suffix_that_starts_with_sessions_is_read_as_yaml(tmp_path):
    path = tmp_path / "lesson"
    path.write_text("sessions: [A]\ntitle: t\nsteps:\n  - A: SELECT 1;\n")
    assert load_scenario(str(path)).spec is None


def test_result_sets_are_drawn_as_pqprint_draws_them():
    # As isolationtester printed these on PostgreSQL 15: widths in bytes, numbers right-aligned.
    assert pq_print(Result(columns=("one", "s"), rows=(("1", "abc"),))) == "one|s  \n---+---\n  1|abc\n(1 row)\n\n"
    rows = (("1", "x"), ("3", None), ("22", "héllo"))
    assert pq_print(Result(columns=("id", "v"), rows=rows)) == (
        "id|v     \n--+------\n 1|x     \n 3|      \n22|héllo\n(3 rows)\n\n"
    )
    mixed = (("1", "2.5", None, "", "x1"),)
    assert pq_print(Result(columns=("n", "price", "missing", "empty", "label"), rows=mixed)) == (
        "n|price|missing|empty|label\n-+-----+-------+-----+-----\n1|  2.5|       |     |x1   \n(1 row)\n\n"
    )
    assert pq_print(Result(columns=("e",), rows=(("E1",), ("12",)))) == "e \n--\nE1\n12\n(2 rows)\n\n"
    assert pq_print(Result(columns=("n",), rows=())) == "n\n-\n(0 rows)\n\n"
    assert pq_print(Result(affected=1)) == ""


TWO = """setup { CREATE TABLE t (id int); }
#@mysql { CREATE TABLE t (id int) ENGINE=InnoDB; }
session a
step a_lock { SELECT pg_try_advisory_lock(7); }
#@mysql   { SELECT GET_LOCK('7', 0); }
step a_same { SELECT 1; }
"""


def test_mysql_bodies_make_a_spec_for_both_engines():
    scenario = scenario_from_spec("two.spec", TWO)
    assert scenario.engines == ("postgresql", "mysql")
    mysql = scenario.for_engine("mysql")
    assert mysql.engine == "mysql" and mysql.spec.setups == ["CREATE TABLE t (id int) ENGINE=InnoDB;"]
    assert [s.sql for s in mysql.steps] == ["SELECT GET_LOCK('7', 0);", "SELECT 1;"]
    assert [s.sql for s in scenario.steps] == ["SELECT pg_try_advisory_lock(7);", "SELECT 1;"]


@pytest.mark.parametrize("text, line, words", [
    ("#@mysql { SELECT 1; }\nsession a step x { SELECT 1; }\n", 1, "unexpected #@mysql"),
    ("session a\nstep x { SELECT 1; }\n#@mysql SELECT 1;\n", 3, "expected { SQL } on the same line"),
    ("session a\nstep x { SELECT 1; }\n#@mysql { SELECT 1; }\n#@mysql { SELECT 2; }\n", 4, "unexpected #@mysql"),
    ("session a\nstep x { SELECT 1; }\n#@mysql { SET sql_mode = ''; }\n", 3, "sql_mode"),
])
def test_a_misplaced_mysql_body_is_told_at_its_line(text, line, words):
    with pytest.raises(ScenarioError) as caught:
        scenario_from_spec("two.spec", text)
    assert caught.value.line == line and words in str(caught.value), str(caught.value)


@pytest.mark.parametrize("args, words", [
    (["record", "SPEC"], "record writes expectations into a YAML scenario"),
    (["run", "SPEC", "--show-locks"], "--matrix and --show-locks are for YAML scenarios"),
    (["run", "SPEC", "--matrix", "isolation=serializable"], "--matrix and --show-locks are for YAML scenarios"),
    (["run", "YAML", "--format", "isolationtester"], "give a .spec file"),
])
def test_what_a_spec_cannot_do_is_refused_before_any_server(args, words, tmp_path):
    from conftest import ROOT, run_cli

    spec = tmp_path / "x.spec"
    spec.write_text("session a step x { SELECT 1; }\n")
    paths = {"SPEC": str(spec), "YAML": str(ROOT / "scenarios" / "skip-locked.yaml")}
    done = run_cli(*[paths.get(a, a) for a in args])
    # main() turns it into its one line and exit 2 (errors.py); in-process, it is the exception.
    assert isinstance(done.exception, UsageError), done.stdout
    assert words in str(done.exception)
