"""Scenario SQL is anyone's: what a result may take is bounded in bytes and time, not only in
rows, and a run's connections to a server are bounded too (engine/caps.py, docs/scenario-format.md)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from conftest import ROOT, cli, dsn_env

# The CLI in a fresh interpreter that reports its own peak RSS (KiB) on its last stderr line.
MEASURED = (
    "import resource, sys\n"
    "from jobqueue_demo.cli.main import main\n"
    "code = main(sys.argv[1:])\n"
    "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
    "sys.exit(code)\n"
)
# The interpreter with the tool's modules takes about 45 MiB; a row of 16 MiB read by the
# client library and handed over once more, or libpq's 64 MiB (caps.MAX_ANSWER_GROWTH), stay
# well under this. Keeping the values took 1.4 GB for 50 rows of 15 MB.
PEAK_KIB = 200 * 1024


def scenario(tmp_path, *statements: str, engine: str = "mysql") -> str:
    """A scenario of session A's statements (each may go on with the step's own keys)."""
    path = tmp_path / "bounds.yaml"
    steps = "".join(f"  - A: {sql}\n" for sql in statements)
    path.write_text(f"title: bounds\nengines: [{engine}]\nsessions: [A]\nsteps:\n{steps}")
    return str(path)


def server_env(engine: str, request) -> dict:
    """The DSN of the embedded server of `engine`, one per test session."""
    if engine == "mysql":
        return dsn_env(request.getfixturevalue("embedded"))
    p = request.getfixturevalue("pg_embedded").params
    return {"JOBQUEUE_DEMO_DSN": f"postgresql://{p.user}@/{p.database}?host={p.socket_dir}"}


# The same statement on each engine.
SQL = {
    "mysql": {"series": "seq_1_to_{n}", "n": "seq"},
    "postgresql": {"series": "generate_series(1, {n}) n", "n": "n"},
}


def on(engine: str, sql: str, n: int = 1) -> str:
    """`sql` with {series} (a table of n rows) and {n} (its column) for `engine`."""
    words = SQL[engine]
    return sql.format(series=words["series"].format(n=n), n=words["n"])


def measured_run(path: str, env: dict, *options: str, timeout: float = 90) -> tuple[subprocess.CompletedProcess, int]:
    full = {k: v for k, v in os.environ.items() if k != "JOBQUEUE_DEMO_DSN"}
    done = subprocess.run([sys.executable, "-c", MEASURED, "run", path, *options], capture_output=True, text=True,
                          cwd=ROOT, timeout=timeout, env={**full, "NO_COLOR": "1", **env})
    return done, int(done.stderr.split()[-1])


def footers(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if re.fullmatch(r"\(\d+ rows?.*\)", line)]


# -- each value cut to 4 KiB, said in the transcript, the JSON and the footer -----------------

@pytest.mark.parametrize("engine", ["mysql", "postgresql"])
def test_a_long_value_is_cut_and_the_transcript_says_how_much_was_left_out(tmp_path, engine, request):
    env, sql = server_env(engine, request), on(engine, "SELECT {n}, REPEAT('x', 1000000) AS v FROM {series};", 5)
    done = cli("run", scenario(tmp_path, sql, engine=engine), env=env)
    assert done.returncode == 0, done.stderr
    assert footers(done.stdout) == ["(5 rows, 5 values cut to 4 KiB)"]
    assert sum(line.rstrip().endswith("x… (995904 bytes more)") for line in done.stdout.splitlines()) == 5
    assert len(done.stdout) < 30_000  # 5 MB before

    as_json = cli("run", scenario(tmp_path, sql, engine=engine), "--format", "json", env=env)
    record = next(json.loads(line) for line in as_json.stdout.splitlines() if '"statement"' in line)["result"]
    assert (record["values_cut"], record["values_cut_to_bytes"]) == (5, 4096)
    assert record["rows"][0][1] == "x" * 4096 + "… (995904 bytes more)"


def test_a_value_is_cut_between_characters_and_never_matches_an_expectation(tmp_path, embedded):
    # 2100 two-byte characters: 4200 bytes, cut after the 2048th character.
    path = scenario(tmp_path, "SELECT REPEAT('é', 2100) AS v;\n    expect: {columns: [v], rows: [[x]]}")
    done = cli("verify", path, env=dsn_env(embedded))
    assert done.returncode == 1, done.stderr
    assert "columns [v], 1 rows (values too long to keep and compare)" in done.stdout
    shown = cli("run", path, env=dsn_env(embedded)).stdout
    assert "é" * 2048 + "… (104 bytes more)" in shown


# -- at most 2 MiB of rows kept per result ------------------------------------------------------

@pytest.mark.parametrize("engine", ["mysql", "postgresql"])
def test_a_result_keeps_at_most_2_mib_and_says_the_rest_were_not_shown(tmp_path, engine, request):
    env, path = server_env(engine, request), scenario(tmp_path, on(engine, "SELECT REPEAT('x', 4000) AS v FROM {series};", 1000), engine=engine)
    done = cli("run", path, "--format", "json", env=env)
    assert done.returncode == 0, done.stderr
    record = next(json.loads(line) for line in done.stdout.splitlines() if '"statement"' in line)["result"]
    kept = 2 * 1024 * 1024 // 4000
    assert (len(record["rows"]), record["rows_not_shown"], record["rows_not_shown_past_bytes"]) == (kept, 1000 - kept, 2 * 1024 * 1024)
    transcript = cli("run", path, env=env)
    assert footers(transcript.stdout) == [f"(1000 rows, {1000 - kept} not shown past 2 MiB)"]


def test_a_postgresql_step_keeps_2_mib_in_all_and_cuts_its_notices_and_errors(tmp_path, request):
    """What else a step's answer carries is bounded too: a step of many statements keeps 2 MiB
    in all (not each), a statement's notices are kept up to 100 and cut like values, and an
    error's message is cut like a value."""
    many = " ".join(["SELECT repeat('y', 100) FROM generate_series(1, 400);"] * 300)
    path = scenario(tmp_path,
                    "\"DO $$ BEGIN FOR i IN 1..300 LOOP RAISE NOTICE '%', repeat('x', 10000); END LOOP; END $$;\"",
                    f"\"{many}\"",
                    "\"DO $$ BEGIN RAISE EXCEPTION '%', repeat('z', 100000); END $$;\"", engine="postgresql")
    done = cli("run", path, env=server_env("postgresql", request))
    assert "Traceback" not in done.stderr
    lines = done.stdout.splitlines()
    assert sum(line.startswith("NOTICE:  x") and line.endswith("x… (5904 bytes more)") for line in lines) == 100
    assert "-- 200 more notices not shown: jobqueue-demo keeps 100 a statement" in lines
    kept = 2 * 1024 * 1024 // (400 * 100)
    assert footers(done.stdout).count("(400 rows)") == kept
    assert "ERROR:  " + "z" * 4096 + "… (95904 bytes more)" in lines
    assert len(done.stdout) < 4_000_000  # 15 MB before


# -- memory bounded whatever the values' size ---------------------------------------------------

@pytest.mark.parametrize("engine", ["mysql", "postgresql"])
def test_memory_stays_bounded_for_rows_of_15_mb(tmp_path, engine, request):
    path = scenario(tmp_path, on(engine, "SELECT {n}, REPEAT('x', 15000000) AS v FROM {series};", 10), engine=engine)
    done, peak_kib = measured_run(path, server_env(engine, request), "--step-timeout", "20")
    assert done.returncode == 0, done.stderr
    assert footers(done.stdout) == ["(10 rows, 10 values cut to 4 KiB)"]
    assert peak_kib < PEAK_KIB, peak_kib


@pytest.mark.parametrize("engine, sql, error", [
    # Two values, each within MariaDB's own max_allowed_packet (16 MiB): a row of 24 MB.
    ("mysql", "SELECT REPEAT('x', 12000000), REPEAT('y', 12000000);", "a row of more than 16 MiB, the most jobqueue-demo reads"),
    ("postgresql", "SELECT repeat('x', 100000000);", "a row too big to read: the answer took more than 64 MiB of memory"),
])
def test_a_row_too_big_drops_the_connection_instead_of_growing_the_process(tmp_path, engine, sql, error, request):
    done, peak_kib = measured_run(scenario(tmp_path, sql, "SELECT 1;", engine=engine), server_env(engine, request))
    assert "Traceback" not in done.stderr
    assert error in done.stdout
    assert peak_kib < PEAK_KIB, peak_kib


def test_the_client_reads_rows_up_to_the_row_cap():
    from jobqueue_demo.engine.caps import MAX_ROW_BYTES
    from jobqueue_demo.engine.mysql.server import CLIENT_OPTIONS

    with open(CLIENT_OPTIONS) as f:
        assert f"max_allowed_packet={MAX_ROW_BYTES}\n" in f.read()


# -- the step timeout holds while rows arrive ---------------------------------------------------

def test_the_step_timeout_holds_while_a_slow_stream_of_rows_arrives(tmp_path, embedded):
    # Rows of 20 KB fill the server's network buffer, so each is sent as it is made, one
    # every 0.25 s: 50 s for them all, against a step timeout of 1 s.
    sql = "SELECT seq, REPEAT('x', 20000), SLEEP(0.25) FROM seq_1_to_200;"
    done = cli("run", scenario(tmp_path, sql), "--step-timeout", "1", env=dsn_env(embedded), timeout=120)
    assert done.returncode == 1, done.stderr
    found = re.search(r"step timeout: the result was still arriving after 1 s \((\d+) rows read\)", done.stderr)
    assert found, done.stderr
    assert int(found.group(1)) < 100  # read until the step timeout, not to the end of the result


# -- sessions per run, and the per-run user's connections ---------------------------------------

def test_more_than_16_sessions_is_a_one_line_error_naming_the_line(tmp_path):
    names = [f"S{i}" for i in range(17)]
    path = tmp_path / "many.yaml"
    path.write_text("title: many\nsessions:\n" + "".join(f"  - {n}\n" for n in names) + "steps:\n  - S0: SELECT 1;\n")
    done = cli("run", str(path))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"jobqueue-demo: {path}:19:5: sessions: 17 of them, at most 16 (each is a connection to the server)"]


@pytest.mark.parametrize("engine", ["mysql", "postgresql"])
def test_the_per_run_user_may_hold_only_a_bounded_number_of_connections(tmp_path, engine, request):
    if engine == "mysql":
        sql, expected = "SHOW GRANTS FOR CURRENT_USER;", "WITH MAX_USER_CONNECTIONS 34"
    else:
        sql, expected = "SELECT rolconnlimit FROM pg_roles WHERE rolname = current_user;", "           34"
    done = cli("run", scenario(tmp_path, sql, engine=engine), env=server_env(engine, request))
    assert done.returncode == 0, done.stderr
    assert expected in done.stdout


def test_a_cut_value_is_not_captured_as_if_it_were_whole(tmp_path, embedded):
    path = scenario(tmp_path, "SELECT REPEAT('x', 5000) AS v;\n    capture: v", "SELECT LENGTH(:v) AS n;")
    done = cli("run", path, env=dsn_env(embedded))
    assert "A> SELECT LENGTH(:v) AS n;" in done.stdout  # sent as written, for the server to refuse
    assert "ERROR 1064 (42000)" in done.stdout
