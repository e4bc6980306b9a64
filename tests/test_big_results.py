"""A result of any size: streamed, 1000 rows kept and the rest counted, memory bounded,
and the step timeout holds while the rows arrive."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, cli, dsn_env, scratch_databases

MILLION = """\
title: A million rows
sessions: [A]
steps:
  - A: SELECT seq FROM seq_1_to_1000000;
"""


def scenario(tmp_path, text: str, name: str = "big.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_a_million_rows_show_1000_and_say_how_many_were_left_out(tmp_path, embedded):
    done = cli("run", scenario(tmp_path, MILLION), env=dsn_env(embedded))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1] == "(1000000 rows, 999000 not shown)"
    assert lines[-2].strip() == "1000"


def test_memory_stays_bounded_for_a_million_rows(tmp_path, embedded):
    path = scenario(tmp_path, MILLION)
    code = (
        "import resource, sys\n"
        "from jobqueue_demo.cli.main import main\n"
        "code = main(['run', sys.argv[1], '--format', 'json'])\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
        "sys.exit(code)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, path], capture_output=True, text=True, cwd=ROOT, timeout=120,
        env={**os.environ, **dsn_env(embedded)},
    )
    assert done.returncode == 0, done.stderr
    record = [json.loads(line) for line in done.stdout.splitlines() if '"statement"' in line][0]
    assert len(record["result"]["rows"]) == 1000 and record["result"]["rows_not_shown"] == 999000
    peak_kib = int(done.stderr.split()[-1])
    # Keeping every row took 549 MB; streaming keeps the interpreter's own size (~30 MB).
    assert peak_kib < 100 * 1024, peak_kib


def test_expected_rows_never_match_a_result_too_long_to_keep(tmp_path, embedded):
    path = scenario(tmp_path, MILLION.rstrip("\n") + "\n    expect: {columns: [seq], rows: [[1]]}\n")
    done = cli("verify", path, env=dsn_env(embedded))
    assert done.returncode == 1, done.stderr
    assert "columns [seq], 1000000 rows (too many to keep and compare)" in done.stdout


def test_a_result_that_outlasts_the_step_timeout_ends_the_step(tmp_path, embedded):
    text = MILLION.replace("SELECT seq FROM seq_1_to_1000000", "SELECT seq, REPEAT('x', 100) FROM seq_1_to_100000000")
    done = cli("run", scenario(tmp_path, text), "--step-timeout", "0.5", env=dsn_env(embedded), timeout=60)
    assert done.returncode == 1, done.stderr
    assert "step timeout: the result was still arriving after 0.5 s" in done.stderr
    assert "A's connection was dropped" in done.stderr
    assert "Traceback" not in done.stderr
    assert scratch_databases(embedded) == set()


@pytest.mark.parametrize("rows, footer", [(1000, "(1000 rows)"), (1001, "(1001 rows, 1 not shown)")])
def test_the_limit_is_exact(tmp_path, embedded, rows, footer):
    text = MILLION.replace("seq_1_to_1000000", f"seq_1_to_{rows}")
    done = cli("run", scenario(tmp_path, text), env=dsn_env(embedded))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == footer


def test_the_columns_layout_says_how_many_were_left_out(tmp_path, embedded):
    done = cli("run", scenario(tmp_path, MILLION), "--layout", "columns", env=dsn_env(embedded))
    assert done.returncode == 0, done.stderr
    assert "(1000000 rows, 999000 not shown)" in done.stdout.splitlines()
