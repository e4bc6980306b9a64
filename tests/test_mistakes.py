"""A mistake is told where it was made: step-key typos, unknown captures, failed statements."""

from __future__ import annotations

import pytest

from conftest import cli, dsn_env

UNREACHABLE = ["--dsn", "mysql://root@127.0.0.1:1/test"]  # exit 2, not 3, proves nothing connected


def lesson(tmp_path, steps: str, name: str = "typo.yaml"):
    path = tmp_path / name
    path.write_text(
        "title: typo\nsessions: [A, B]\nsetup: |\n"
        "  CREATE TABLE jobs (id INT PRIMARY KEY, state VARCHAR(20) NOT NULL DEFAULT 'queued') ENGINE=InnoDB;\n"
        "  INSERT INTO jobs (id) VALUES (1), (2);\n"
        f"steps:\n{steps}"
    )
    return path


@pytest.mark.parametrize(
    "steps, where, message",
    [
        ("  - A: SELECT 1;\n    coment: hi\n", "8:5", "unknown key 'coment' in a step: did you mean 'comment'?"),
        ("  - A: SELECT 1;\n    expected: ok\n", "8:5", "unknown key 'expected' in a step: did you mean 'expect'?"),
        ("  - lock: A\n", "7:5", "unknown key 'lock' in a step: did you mean 'locks'?"),
        (
            "  - A: SELECT id FROM jobs LIMIT 1;\n    capture: claimed\n  - B: DELETE FROM jobs WHERE id = :claimed;\n",
            "9:5",
            "B's statement uses :claimed, but no earlier step of B captures 'claimed'",
        ),
        (
            "  - A: SELECT id FROM jobs LIMIT 1;\n    capture: claimed\n  - A: DELETE FROM jobs WHERE id = :claimd;\n",
            "9:5",
            "A's statement uses :claimd, but no earlier step of A captures 'claimd' (it captures claimed",
        ),
    ],
)
def test_loader_names_the_mistake_and_the_nearest_key(tmp_path, steps, where, message):
    path = lesson(tmp_path, steps)
    done = cli("run", str(path), *UNREACHABLE)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"jobqueue-demo: {path}:{where}: {message}")
    assert len(done.stderr.splitlines()) == 1


STUCK_AFTER_TYPO = """\
  - B: BEGIN;
  - B: UPDATE jobs SET state = 'running' WHERE id = 1;
    expect: {affected: 1}
  - A: BEGIN;
  - A: UPDATE jobs SET state = 'done' WHERE id = 1;
    expect: {waits: true, affected: 1}
  - B: COMMT;
  - A: COMMIT;
    expect: ok
"""


def test_verify_prints_the_failed_statement_first_and_the_stuck_message_names_it(tmp_path, embedded):
    path = lesson(tmp_path, STUCK_AFTER_TYPO)
    done = cli("verify", str(path), env=dsn_env(embedded))
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"{path}: 2 expectation(s) not met, then the run got stuck"
    assert lines[1] == "  step 5 (line 13), session B: COMMT;"
    assert lines[2] == "    expected: no error (no expectation written)"
    assert lines[3].startswith("    got:      error 1064 (ER_PARSE_ERROR)")
    stuck = next(line for line in lines if "stuck at" in line)
    assert stuck.endswith("before that, B's statement at step 5 (line 13) failed with ERROR 1064")
    run = cli("run", str(path), env=dsn_env(embedded))
    assert run.returncode == 1 and "B's statement at step 5 (line 13) failed with ERROR 1064" in run.stderr


def test_run_exits_1_when_an_expectation_is_not_met(tmp_path, embedded):
    wrong = lesson(tmp_path, "  - A: SELECT id FROM jobs ORDER BY id LIMIT 1;\n    expect: {columns: [id], rows: [[2]]}\n")
    done = cli("run", str(wrong), env=dsn_env(embedded))
    assert done.returncode == 1, done.stderr
    assert "1 expectation(s) not met" in done.stderr and "  1\n" in done.stdout
    right = lesson(tmp_path, "  - A: SELECT id FROM jobs ORDER BY id LIMIT 1;\n    expect: {columns: [id], rows: [[1]]}\n", "ok.yaml")
    assert cli("run", str(right), env=dsn_env(embedded)).returncode == 0
