"""The seed lesson end to end on real servers: transcript, verify, record, data safety."""

from __future__ import annotations

import io
import re
import secrets
from pathlib import Path

import pytest

from conftest import LOCAL_DSN, ROOT, cli, dsn_env, local_server_reachable, scratch_databases
from jobqueue_demo import api as core
from jobqueue_demo.render.transcript import TranscriptWriter, event_lines

SEED = ROOT / "scenarios" / "skip-locked.yaml"
GOLDEN = Path(__file__).parent / "golden"
STRUCTURAL = re.compile(r"^([A-Za-z][A-Za-z0-9_]*> |Query OK|\(\d+ rows?\)$|ERROR )")


def normalise(text: str) -> list[str]:
    """What a reader compares: no trailing `-- comments`, white space folded, no blank lines."""
    out = []
    for raw in text.splitlines():
        line = " ".join(re.sub(r"\s--\s.*$", "", raw).split())
        if line:
            out.append(line)
    return out


def assert_matches_seed(actual: str) -> None:
    expected = normalise((GOLDEN / "seed-transcript.txt").read_text())
    got = normalise(actual)
    assert [l for l in got if STRUCTURAL.match(l)] == [l for l in expected if STRUCTURAL.match(l)]
    pos = 0
    for want in expected:
        pos = got.index(want, pos) + 1


def transcript(scenario_path, info) -> str:
    scenario = core.load(str(scenario_path))
    out = io.StringIO()
    writer = TranscriptWriter(out, scenario.session_names, color=False)
    core.run(scenario, info, 10.0, lambda e: writer.write(event_lines(e)))
    return out.getvalue()


def test_seed_transcript_is_golden(server):
    text = transcript(SEED, server)
    assert text == (GOLDEN / "skip-locked.txt").read_text()
    assert_matches_seed(text)


def test_seed_transcript_keeps_psql_spacing(server):
    text = transcript(SEED, server)
    assert " id |        task        \n----+--------------------\n  1 | send welcome email\n(1 row)\n" in text
    assert "ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED; -- job 1 is claimed — skipped without waiting\n" in text


def test_run_leaves_no_scratch_database(server):
    from jobqueue_demo.run.events import RunStarted

    report = core.run(core.load(str(SEED)), server, 10.0)
    (started,) = [e for e in report.events if isinstance(e, RunStarted)]
    assert started.database.startswith("jqd_")
    assert started.database not in scratch_databases(server)


def test_cli_run_on_embedded_default_prints_seed():
    done = cli("run", "scenarios/skip-locked.yaml")
    assert done.returncode == 0, done.stderr
    heading, rest = done.stdout.split("\n", 1)
    assert_matches_seed(rest)
    assert "\x1b[" not in done.stdout
    # The heading is part of the transcript: `run x > handout.txt` keeps it.
    assert re.match(r"-- A job queue on FOR UPDATE SKIP LOCKED: on (MariaDB|MySQL) \d+\.\d+\.\d+ \(", heading)


@pytest.mark.skipif(not local_server_reachable(), reason="no server on 127.0.0.1:3306")
def test_cli_run_with_dsn_prints_seed():
    done = cli("run", "skip-locked", "--dsn", LOCAL_DSN)
    assert done.returncode == 0, done.stderr
    heading, rest = done.stdout.split("\n", 1)
    assert heading.startswith("-- A job queue on FOR UPDATE SKIP LOCKED: on ") and heading.endswith("(root@127.0.0.1:3306/test)")
    assert rest == (GOLDEN / "skip-locked.txt").read_text()


def test_verify_passes_and_names_the_server(server):
    done = cli("verify", "scenarios/skip-locked.yaml", env=dsn_env(server))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"Verified against {server.label}" in done.stdout


def test_verify_fails_naming_the_step_when_outcome_drifts(tmp_path, server):
    drifted = tmp_path / "drifted.yaml"
    text = SEED.read_text()
    text = text.replace("- [2, generate invoice]\n  - narrate", "- [3, generate invoice]\n  - narrate", 1)
    assert "[3, generate invoice]" in text
    drifted.write_text(text)
    done = cli("verify", str(drifted), env=dsn_env(server))
    assert done.returncode == 1
    assert "step 4 (line 41), session B" in done.stdout
    assert "expected: columns [id, task], rows [[3, generate invoice]]" in done.stdout
    assert "got:      columns [id, task], rows [[2, generate invoice]]" in done.stdout
    assert "Verified against" not in done.stdout


def test_record_writes_expectations_that_verify(tmp_path, server):
    bare = tmp_path / "bare.yaml"
    lines = SEED.read_text().splitlines(keepends=True)
    kept, skipping = [], False
    for line in lines:
        if line.strip().startswith("expect:"):
            skipping = line.rstrip().endswith("expect:")
            continue
        if skipping and line.startswith("      "):
            continue
        skipping = False
        kept.append(line)
    bare.write_text("".join(kept))
    assert "expect" not in bare.read_text()
    done = cli("record", str(bare), env=dsn_env(server))
    assert done.returncode == 0, done.stderr
    recorded = bare.read_text()
    assert "comment: job 1 is claimed — skipped without waiting" in recorded
    assert recorded.count("expect:") == 12
    # The seed is written for both engines: the stamp goes into this engine's slot.
    assert f"verified:\n  mysql: {server.label} on " in recorded
    scenario = core.load(str(bare))
    assert scenario.steps[3].expect.rows == (("2", "generate invoice"),)
    again = cli("verify", str(bare), env=dsn_env(server))
    assert again.returncode == 0, again.stdout


def test_password_is_never_printed(local):
    # Not named like a run's user (jqd_...): no sweep may take it, and no other suite on the
    # shared server uses the same name at the same time.
    user = f"jqdtest_pw_{secrets.token_hex(4)}"
    conn = local.params.connect()
    try:
        conn.query(f"CREATE USER '{user}'@'127.0.0.1' IDENTIFIED BY 'S3cret-Pw-77'".encode())
        conn.query(f"GRANT ALL ON `jqd\\_%`.* TO '{user}'@'127.0.0.1'".encode())
        conn.query(f"GRANT PROCESS ON *.* TO '{user}'@'127.0.0.1'".encode())
        dsn = f"mysql://{user}:S3cret-Pw-77@127.0.0.1:3306/"
        good = cli("--allow-shared-user", "run", "scenarios/skip-locked.yaml", "--dsn", dsn)
        bad = cli("run", "scenarios/skip-locked.yaml", "--dsn", dsn.replace("Pw-77", "Pw-78"))
    finally:
        conn.query(f"DROP USER IF EXISTS '{user}'@'127.0.0.1'".encode())
        conn.close()
    assert good.returncode == 0, good.stderr
    assert bad.returncode == 3
    for done in (good, bad):
        assert "S3cret" not in done.stdout + done.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


def test_unreachable_server_is_one_line_exit_3():
    done = cli("run", "scenarios/skip-locked.yaml", "--dsn", "mysql://root@127.0.0.1:1/test", timeout=15)
    assert done.returncode == 3
    assert done.stderr.strip().count("\n") == 0
    assert "127.0.0.1:1" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("args", [("run", "skip-locked"), ("cleanup", "--dry-run")], ids=["run", "cleanup"])
@pytest.mark.parametrize("dsn", ["garbage", "mysql://root@127.0.0.1:99999/x"], ids=["scheme", "port"])
def test_a_bad_dsn_from_the_environment_says_where_it_came_from(args, dsn):
    """No --dsn on the command line: the line named none, and the reader looked there."""
    done = cli(*args, env={"JOBQUEUE_DEMO_DSN": dsn}, timeout=30)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("jobqueue-demo: $JOBQUEUE_DEMO_DSN: "), line


def test_lesson_name_resolves_like_a_path():
    done = cli("run", "skip-locked", cwd=Path("/"))
    assert done.returncode == 0, done.stderr
    assert_matches_seed(done.stdout)


def test_record_on_a_recorded_file_changes_only_verified(tmp_path, server):
    copy = tmp_path / "seed.yaml"
    original = SEED.read_text().split("\nverified:", 1)[0]
    copy.write_text(original + "\n")
    done = cli("record", str(copy), env=dsn_env(server))
    assert done.returncode == 0, done.stderr
    lines = copy.read_text().splitlines()
    assert lines[-2:] == ["verified:", f"  mysql: {server.label} on " + lines[-1].split(" on ")[-1]]
    assert "\n".join(lines[:-2]) == original


def test_a_step_past_the_step_timeout_is_named_with_its_statement(tmp_path, embedded):
    """Neither answered nor seen waiting, the statement never reached the transcript: the
    error said only which session was still running."""
    lesson = tmp_path / "slow.yaml"
    lesson.write_text("title: slow\nsessions: [A]\nsteps:\n  - A: SELECT 1;\n  - A: |\n      SELECT SLEEP(5)\n        AS napped;\n")
    done = cli("run", str(lesson), "--step-timeout", "0.5", env=dsn_env(embedded))
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines()[-1] == ("jobqueue-demo: step timeout: A (SELECT SLEEP(5) AS napped;) still running after 0.5 s "
                                            "(raise --step-timeout for slow statements)")
