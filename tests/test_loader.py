"""The loader: the seed lesson loads as written, and every bad file fails as one line, before any connection."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from jobqueue_demo.scenario import loader
from jobqueue_demo.errors import EXIT_USAGE, ScenarioError
from jobqueue_demo.scenario.loader import MAX_BYTES, MAX_DEPTH, load_scenario
from jobqueue_demo.scenario.model import Expectation, Narration, Statement

ROOT = Path(__file__).resolve().parent.parent
SEED = ROOT / "scenarios" / "skip-locked.yaml"
CLAIM_SQL = "SELECT id, task FROM jobs WHERE state = 'queued'\nORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED;"

# A valid scenario whose first step is on line 4; bad cases extend or alter it.
BASE = "title: t\nsessions: [A, B]\nsteps:\n  - A: BEGIN;\n"


def write(tmp_path: Path, content: str | bytes, name: str = "lesson.yaml") -> str:
    path = tmp_path / name
    if isinstance(content, str):
        content = content.encode("utf-8")
    path.write_bytes(content)
    return str(path)


def load_fails(path: str, line: int | None = None, column: int | None = None) -> ScenarioError:
    """Load must fail with a one-line message that starts with the file (and line:column when known)."""
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    err = info.value
    message = str(err)
    assert "\n" not in message and "\r" not in message, message
    assert message.startswith(f"{path}:"), message
    assert err.exit_code == EXIT_USAGE == 2
    if line is not None:
        assert (err.line, err.column) == (line, column), message
        assert message.startswith(f"{path}:{line}:{column}: "), message
    return err


# -- the seed lesson -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def seed():
    return load_scenario(str(SEED))


def test_seed_header(seed):
    assert seed.title == "A job queue on FOR UPDATE SKIP LOCKED"
    assert seed.session_names == ("A", "B")
    assert all(s.isolation is None for s in seed.sessions)
    assert seed.setup.startswith("CREATE TABLE jobs (")
    assert seed.why and seed.summary and seed.description
    assert seed.verified.startswith("MariaDB ") and seed.invariants == ()
    assert seed.source == SEED.read_text(encoding="utf-8")


def test_seed_steps_and_their_lines(seed):
    assert len(seed.steps) == 14
    kinds = ["N" if isinstance(s, Narration) else s.session for s in seed.steps]
    assert kinds == ["A", "A", "B", "B", "N", "A", "A", "B", "N", "B", "B", "B", "B", "A"]
    lines = seed.source.splitlines()
    for step in seed.steps:
        marker = "- narrate:" if isinstance(step, Narration) else f"- {step.session}:"
        assert lines[step.line - 1].strip().startswith(marker), step
    assert seed.steps[4].text.startswith("A marks job 1 done and commits.")
    assert seed.steps[8].text.startswith("B starts a new transaction and selects job 2 again.")


def test_seed_claims_keep_sql_exactly_as_written(seed):
    claims = [s for s in seed.steps if isinstance(s, Statement) and "SKIP LOCKED" in s.sql]
    assert [s.session for s in claims] == ["A", "B", "B"]
    for claim in claims:
        assert claim.sql == CLAIM_SQL
        assert len(claim.sql.splitlines()) == 2


def test_seed_b_first_claim(seed):
    claim = seed.steps[3]
    assert claim.session == "B" and claim.line == 41
    assert claim.comment == "job 1 is claimed — skipped without waiting"
    assert claim.expect == Expectation(waits=False, columns=("id", "task"), rows=(("2", "generate invoice"),))
    # `record` rewrites steps in place through these spans.
    assert seed.source[claim.span.start : claim.span.end].startswith("B: |\n")
    assert seed.source[claim.expect_span.start : claim.expect_span.end].startswith("expect:\n      waits: false")


def test_seed_expectations(seed):
    assert seed.steps[0].expect == Expectation(ok=True)
    assert seed.steps[1].expect == Expectation(columns=("id", "task"), rows=(("1", "send welcome email"),))
    assert seed.steps[5].expect == Expectation(affected=1)
    assert seed.steps[13].expect.rows == (("1", "done"), ("2", "done"))
    # Cells are compared with the server's text form, so YAML's 1 must arrive as "1".
    cells = [c for s in seed.steps if isinstance(s, Statement) and s.expect.rows for r in s.expect.rows for c in r]
    assert cells and all(type(c) is str for c in cells)
    assert [s.expect.waits for s in seed.steps if isinstance(s, Statement)].count(False) == 1


def test_size_limit_is_inclusive(tmp_path, monkeypatch):
    # The limit shrunk to the seed's size: parsing a real 1 MiB file takes seconds in PyYAML.
    data = SEED.read_bytes()
    monkeypatch.setattr(loader, "MAX_BYTES", len(data))
    assert len(load_scenario(write(tmp_path, data)).steps) == 14
    assert "too large" in load_fails(write(tmp_path, data + b"\n", "over.yaml")).detail


# -- bad files ---------------------------------------------------------------------------------

STEP = "  - A: x\n"
BAD = [
    # id, content, line, column, words the message must contain
    ("empty", "", None, None, "empty scenario"),
    ("whitespace only", " \n\t\n   \n", None, None, "empty scenario"),
    ("only a comment", "# nothing yet\n", None, None, "empty scenario"),
    ("unbalanced brackets", "title: t\nsessions: [A, B\nsteps: []\n", 3, 6, "not valid YAML"),
    ("bad indentation", "title: t\n  sessions: [A]\n", 2, 11, "not valid YAML"),
    ("tab indentation", "title: t\nsessions:\n\t- A\n", 3, 1, "not valid YAML"),
    ("two documents", BASE + "---\ntitle: u\n", 5, 1, "not valid YAML"),
    ("not UTF-8 on line 3", b"title: t\nsessions: [A]\nsteps: [{A: caf\xe9}]\n", 3, 16, "not UTF-8"),
    ("NUL byte", "title: t\nsessions: [A\x00]\nsteps: [{A: x}]\n", 2, 13, "special character U+0000"),
    ("terminal escape", "title: \x1b[31mred\nsessions: [A]\n", 1, 8, "special character U+001B"),
    ("UTF-16 without BOM", "title: t\nsessions: [A]\n".encode("utf-16-le"), 1, 2, "special character U+0000"),
    ("top level a list", "- title: t\n- sessions: [A]\n", 1, 1, "the scenario must be a mapping"),
    ("top level text", "just some words\n", 1, 1, "the scenario must be a mapping"),
    ("steps not a list", "title: t\nsessions: [A]\nsteps: {A: BEGIN;}\n", 3, 8, "steps must be a non-empty list"),
    ("steps empty", "title: t\nsessions: [A]\nsteps: []\n", 3, 8, "steps must be a non-empty list"),
    ("step a plain string", BASE + "  - COMMIT;\n", 5, 5, "a step must be a mapping"),
    ("sessions empty", "title: t\nsessions: []\nsteps: [{A: x}]\n", 2, 11, "name at least one session"),
    ("sessions empty mapping", "title: t\nsessions: {}\nsteps: [{A: x}]\n", 2, 11, "name at least one session"),
    ("undeclared session", BASE + "  - C: BEGIN;\n", 5, 5, "undeclared session 'C'"),
    ("no title", "sessions: [A]\nsteps: [{A: x}]\n", 1, 1, "missing 'title'"),
    ("no sessions", "title: t\nsteps: [{A: x}]\n", 1, 1, "missing 'sessions'"),
    ("no steps", "title: t\nsessions: [A]\n", 1, 1, "missing 'steps'"),
    ("unknown top-level key", BASE + "author: me\n", 5, 1, "unknown key 'author'"),
    ("duplicate top-level key", "title: t\n" + BASE, 2, 1, "duplicate key 'title'"),
    ("duplicate step key", BASE + "    expect: ok\n    expect: ok\n", 6, 5, "duplicate key 'expect'"),
    ("duplicate session", "title: t\nsessions: [A, A]\nsteps: [{A: x}]\n", 2, 15, "session 'A' is declared twice"),
    ("unknown expect key", BASE + "    expect: {rowz: []}\n", 5, 14, "expect: unknown key 'rowz'"),
    ("unknown error name", BASE + "    expect: {error: ER_NO_SUCH_THING}\n", 5, 21, "unknown error"),
    ("digit-like error", BASE + "    expect: {error: '²'}\n", 5, 21, "unknown error"),
    ("error with rows", BASE + "    expect: {error: deadlock, rows: []}\n", 5, 13, "cannot be expected together"),
    ("affected in hex", BASE + "    expect: {affected: 0x10}\n", 5, 24, "whole number"),
    ("affected sexagesimal", BASE + "    expect: {affected: 1:30}\n", 5, 24, "whole number"),
    ("affected trailing _", BASE + "    expect: {affected: 1_}\n", 5, 24, "whole number"),
    ("affected 5000 digits", BASE + "    expect: {affected: " + "9" * 5000 + "}\n", 5, 24, "whole number"),
    ("affected negative", BASE + "    expect: {affected: -1}\n", 5, 24, "whole number"),
    ("waits not a bool", BASE + "    expect: {waits: maybe}\n", 5, 21, "true or false"),
    (
        "bad isolation level",
        "title: t\nsessions:\n  A: {isolation: snapshot}\n  B:\nsteps: [{A: x}]\n",
        3,
        18,
        "isolation must be one of",
    ),
    (
        "timeout in hex",
        "title: t\nsessions:\n  A: {innodb_lock_wait_timeout: 0x5}\nsteps: [{A: x}]\n",
        3,
        33,
        "whole number from 1",
    ),
    ("step keyword as session", "title: t\nsessions: [A, kill]\nsteps: [{A: x}]\n", 2, 15, "step keyword"),
    ("empty statement", BASE + "  - B: ''\n", 5, 8, "statement is empty"),
    ("statement of semicolons", BASE + "  - B: '  ;  ;'\n", 5, 8, "statement is empty"),
    ("statement a number", BASE + "  - B: 5\n", 5, 8, "must be SQL text, not '5' (quote it if it is SQL)"),
    ("statement a flag", BASE + "  - B: true\n", 5, 8, "must be SQL text"),
    ("setup a number", "title: t\nsetup: 5\nsessions: [A]\nsteps: [{A: x}]\n", 2, 8, "setup must be SQL text"),
    ("title empty", "title:\nsessions: [A]\nsteps: [{A: x}]\n", 1, 7, "title is empty"),
    ("title blank", "title: '  '\nsessions: [A]\nsteps: [{A: x}]\n", 1, 8, "title is empty"),
    ("narration empty", BASE + "  - narrate:\n", 5, 13, "narrate is empty"),
    ("setup by an unknown engine", "title: t\nsetup: {oracle: SELECT 1}\nsessions: [A]\nsteps: [{A: x}]\n", 2, 9,
     "setup: 'oracle' is not an engine (a mapping by engine takes mysql, postgresql)"),
]


@pytest.mark.parametrize("content, line, column, words", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_scenario(tmp_path, content, line, column, words):
    err = load_fails(write(tmp_path, content), line, column)
    assert words in err.detail


# A mistake the message names the fix of: the words it must contain.
FIXES = [
    ("step keyword misspelt", BASE + "  - narate: hello\n", 5, 5, "unknown key 'narate' in a step: did you mean 'narrate'?"),
    ("bare lock", BASE + "  - lock\n", 5, 5, "did you mean 'locks'?"),
    ("colon missing after the session", BASE + "  - B BEGIN;\n", 5, 5, "did you mean 'B: BEGIN;' (a colon after the session)?"),
    ("fault without its session", BASE + "  - kil\n", 5, 5, "did you mean 'kill: SESSION'?"),
    ("empty expect", BASE + "    expect:\n", 5, 12, "expect is empty: write 'expect: ok', or a mapping"),
    ("expect a word", BASE + "    expect: fine\n", 5, 13, "expect is 'fine': write 'expect: ok'"),
    ("error name misspelt", BASE + "    expect: {error: deadlok}\n", 5, 21, "unknown error 'deadlok' on mysql: did you mean 'deadlock'?"),
    ("error constant misspelt", BASE + "    expect: {error: ER_LOCK_DEADLOK}\n", 5, 21, "did you mean 'ER_LOCK_DEADLOCK'?"),
]


@pytest.mark.parametrize("content, line, column, words", [f[1:] for f in FIXES], ids=[f[0] for f in FIXES])
def test_a_likely_mistake_gets_its_fix_named(tmp_path, content, line, column, words):
    err = load_fails(write(tmp_path, content), line, column)
    assert words in err.detail


def test_a_misspelt_lesson_name_gets_the_nearest_lesson():
    from jobqueue_demo.scenario.lessons import resolve

    with pytest.raises(ScenarioError) as info:
        resolve("skip-lock")
    assert "did you mean 'skip-locked'?" in str(info.value)


def test_bad_scenario_cases_would_otherwise_load(tmp_path):
    """Guards the table above: BASE itself is valid, so each case fails for its own reason."""
    assert load_scenario(write(tmp_path, BASE + "    expect: {affected: 1_000, waits: false}\n")).steps[0].expect == (
        Expectation(affected=1000, waits=False)
    )


def test_alias_bomb_refused_without_expanding(tmp_path):
    # Ten levels of nine aliases each: 9**10 (about 3.5 billion) strings if ever expanded.
    levels = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    levels += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    text = "\n".join(levels) + "\n"
    assert len(text) < 1024
    # Counted on the node graph, never in an assert: repr() of a node expands its aliases.
    a9 = yaml.compose(text, Loader=yaml.SafeLoader).value[-1][1]
    leaves = expanded_leaves(a9)
    assert leaves == 9**10 > 3 * 10**9
    err = load_fails(write(tmp_path, text), 2, 10)
    assert "aliases" in err.detail and "not allowed" in err.detail


def test_single_alias_refused(tmp_path):
    err = load_fails(write(tmp_path, BASE + "  - &s B: BEGIN;\n  - *s\n"), 6, 5)
    assert "aliases" in err.detail


def expanded_leaves(node: yaml.Node, memo: dict | None = None) -> int:
    """How many scalars a full expansion would build, counted over the shared node graph."""
    memo = {} if memo is None else memo
    if id(node) not in memo:
        if isinstance(node, yaml.ScalarNode):
            memo[id(node)] = 1
        elif isinstance(node, yaml.SequenceNode):
            memo[id(node)] = sum(expanded_leaves(n, memo) for n in node.value)
        else:
            memo[id(node)] = sum(expanded_leaves(v, memo) for _, v in node.value)
    return memo[id(node)]


@pytest.mark.parametrize("opener", ["[", "{a: ", "- "], ids=["flow lists", "flow mappings", "block lists"])
def test_deep_nesting_refused_without_recursion(tmp_path, opener):
    # pytest.raises(ScenarioError) would let a RecursionError through as a failure.
    # libyaml, when present, stops a flow collection at its own depth limit while scanning
    # ahead, before the loader's event check sees level MAX_DEPTH.
    err = load_fails(write(tmp_path, opener * 10_000))
    assert f"nested deeper than {MAX_DEPTH} levels" in err.detail or "maximum nesting depth" in err.detail
    assert err.line == 1 and err.column is not None


def test_too_large(tmp_path):
    path = write(tmp_path, BASE + "#" + "x" * MAX_BYTES + "\n")
    assert "too large" in load_fails(path).detail


def test_no_such_file(tmp_path):
    path = str(tmp_path / "missing.yaml")
    assert load_fails(path).detail == "no such file"


def test_directory(tmp_path):
    assert "is a directory" in load_fails(str(tmp_path)).detail


# -- the command line --------------------------------------------------------------------------

# Port 1: nothing listens, so reaching the server at all would end in exit 3, not 2.
UNREACHABLE = "mysql://root@127.0.0.1:1/x"
CLI_BAD = [
    ("undeclared session", BASE + "  - C: BEGIN;\n", ":5:5: "),
    ("not YAML", "title: t\nsessions: [A, B\nsteps: []\n", ":3:6: "),
    ("alias bomb", "a: &a [x, x]\nb: [*a, *a]\n", ":2:5: "),
]


@pytest.mark.parametrize("content, where", [c[1:] for c in CLI_BAD], ids=[c[0] for c in CLI_BAD])
def test_cli_run_bad_scenario_exits_2_before_connecting(tmp_path, content, where):
    path = write(tmp_path, content)
    env = {k: v for k, v in os.environ.items() if k != "JOBQUEUE_DEMO_DSN"}
    proc = subprocess.run(
        [sys.executable, "-m", "jobqueue_demo", "run", path, "--dsn", UNREACHABLE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"jobqueue-demo: {path}{where}"), proc.stderr
    assert proc.stderr.endswith("\n") and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stdout == ""
