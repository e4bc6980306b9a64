"""`run FILE.spec --format isolationtester` prints what PostgreSQL's isolationtester prints,
byte for byte, for every spec shipped in scenarios/specs (checked by the shared
compare-isolationtester script against the reference binary, both on the local PostgreSQL);
a spec's superuser-only deadlock_timeout works as written on the embedded PostgreSQL, where
it runs as the per-run role; and a spec's SQL gains no right beyond that role's."""

from __future__ import annotations

import glob
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import LOCAL_PG_DSN, ROOT, cli, local_pg_reachable
from test_security_pg import CANARY, drop_role, pg_dsn, role_exists

COMPARE = Path("/work/shared/tools/compare-isolationtester")
REFERENCE = sorted(glob.glob("/usr/lib/postgresql/*/lib/pgxs/src/test/isolation/isolationtester"))
SPECS = sorted((ROOT / "scenarios" / "specs").glob("*.spec"))


def _compare_missing() -> str | None:
    if not REFERENCE:
        return "no isolationtester binary (Debian's postgresql-15 ships it under /usr/lib/postgresql/15/lib/pgxs)"
    if not COMPARE.is_file():
        return f"no {COMPARE}"
    if not shutil.which("su") or os.geteuid() != 0:
        return "compare-isolationtester runs isolationtester as the postgres OS user (su, as root)"
    if not local_pg_reachable():
        return "no PostgreSQL on 127.0.0.1:5432"
    return None


def compare_with_isolationtester(spec: Path, env: dict | None = None) -> None:
    """compare-isolationtester on `spec`, ours the jobqueue-demo beside this Python: no difference
    (skipped where the comparison cannot run here)."""
    missing = _compare_missing()
    if missing:
        pytest.skip(missing)
    jq = str(Path(sys.executable).parent / "jobqueue-demo")
    done = subprocess.run(["bash", str(COMPARE), str(spec), jq], capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert done.returncode == 0 and done.stdout == "", done.stdout + done.stderr


def test_the_shipped_specs_are_there():
    assert {p.name for p in SPECS} >= {"skip-locked.spec", "deadlock.spec", "notices.spec", "all-interleavings.spec", "blockers.spec", "notify.spec", "two-engines.spec"}


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.name)
def test_our_output_is_isolationtesters_byte_for_byte(spec):
    compare_with_isolationtester(spec)


def test_a_specs_deadlock_timeout_is_set_as_written_on_the_embedded_postgresql(pg_embedded):
    """The spec's sessions SET deadlock_timeout, a superuser-only setting: the per-run role is
    granted SET on it alone, so worker s2 (100 ms) is the deadlock's victim, not s1 (10 s)."""
    done = cli("run", str(ROOT / "scenarios" / "specs" / "deadlock.spec"), "--dsn", pg_dsn(pg_embedded),
               "--format", "isolationtester", timeout=120)
    assert done.returncode == 0, done.stderr
    assert "permission denied" not in done.stdout + done.stderr
    assert "step s1b: <... completed>\nstep s2b: <... completed>\nERROR:  deadlock detected\n" in done.stdout


def test_a_spec_on_the_shared_postgresql_as_its_per_run_role_grants_and_revokes(tmp_path):
    """Confined on a shared server (the DSN's role makes the per-run role): the grant is
    revoked before the role is dropped, else the drop fails and the run with it (exit 3)."""
    if not local_pg_reachable():
        pytest.skip("no PostgreSQL on 127.0.0.1:5432")
    done = cli("run", str(ROOT / "scenarios" / "specs" / "deadlock.spec"), "--dsn", LOCAL_PG_DSN,
               "--format", "isolationtester", timeout=120)
    assert done.returncode == 0, done.stderr
    assert "ERROR:  deadlock detected" in done.stdout


# Each step tries to get past the per-run role; the setup plants a look-alike of the
# function the tool asks about lock waits (it makes the canary role if the tool calls it
# with its own rights, and says every step is blocked).
ESCALATION = """# Adversarial: every step tries to gain rights beyond the per-run role.
setup {
%(canary)s
  CREATE FUNCTION public.pg_isolation_test_session_is_blocked(integer, integer[]) RETURNS boolean
    LANGUAGE plpgsql AS $f$ BEGIN PERFORM public.canary(); RETURN true; END $f$;
  CREATE TABLE t (id int);
}
session s1
step super	{ ALTER ROLE CURRENT_USER SUPERUSER; }
step become	{ SET ROLE postgres; }
step program	{ COPY (SELECT 1) TO PROGRAM 'touch %(file)s'; }
step system	{ ALTER SYSTEM SET deadlock_timeout = '1ms'; }
step logging	{ SET log_statement = 'all'; }
step grant	{ GRANT pg_execute_server_program TO CURRENT_USER; }
step createrole	{ CREATE ROLE %(canary_role)s; }
step call	{ SELECT public.canary(); }
"""


@pytest.mark.parametrize("target", ["pg_embedded", "pg_local"])
def test_a_specs_steps_gain_no_right_beyond_the_per_run_role(target, request, tmp_path):
    pg = request.getfixturevalue(target)
    canary = f"jqdtest_{os.urandom(6).hex()}"
    file = tmp_path / "escalated"
    spec = tmp_path / "escalate.spec"
    spec.write_text(ESCALATION % {
        "canary": CANARY.replace("{canary}", canary), "file": file, "canary_role": canary,
    })
    try:
        done = cli("run", str(spec), "--dsn", pg_dsn(pg), "--format", "isolationtester", timeout=120)
        assert done.returncode == 0, done.stderr
        out = done.stdout
        for step in ("super", "become", "program", "system", "logging", "grant", "createrole"):
            after = out.split(f"\nstep {step}: ", 1)[1].split("\nstep ", 1)[0]
            assert "\nERROR:  " in after, f"step {step} was not refused:\n{out}"
        assert "<waiting ...>" not in out  # the look-alike was never asked
        assert not file.exists()
        assert not role_exists(pg, canary), "spec SQL ran with the DSN role's rights"
    finally:
        drop_role(pg, canary)


def test_the_transcript_of_a_spec_names_its_permutations_and_steps(pg_embedded):
    from jobqueue_demo import api
    from jobqueue_demo.render.isolationtester import IsolationtesterView

    scenario = api.load(str(ROOT / "scenarios" / "specs" / "blockers.spec"))
    out, err = io.StringIO(), io.StringIO()
    report = api.run(scenario, pg_embedded, 10.0, IsolationtesterView(out, err, scenario).write)
    assert not report.mismatches
    text = out.getvalue()
    assert text.startswith("Parsed test spec with 2 sessions\n\nstarting permutation: h_begin h_take w_take h_commit w_show\n")
    assert "step w_other: UPDATE slots SET taken_by = 'waiter' WHERE id = 2; <waiting ...>\n" \
           "holder: NOTICE:  holder still here\n" in text
    done = cli("run", str(ROOT / "scenarios" / "specs" / "blockers.spec"), "--dsn", pg_dsn(pg_embedded), timeout=120)
    assert done.returncode == 0, done.stderr
    assert "-- permutation: h_begin w_other h_note h_commit w_show" in done.stdout
    assert "w_take · told waiting by the permutation's annotation" in done.stdout


def test_a_spec_exports_to_a_lesson_page(pg_embedded, tmp_path):
    page = tmp_path / "blockers.md"
    done = cli("export", str(ROOT / "scenarios" / "specs" / "blockers.spec"), "--dsn", pg_dsn(pg_embedded),
               "-o", str(page), timeout=120)
    assert done.returncode == 0, done.stderr
    text = page.read_text()
    assert "-- permutation: h_begin w_other h_note h_commit w_show" in text
    assert "holder: NOTICE:  holder still here" in text


def test_a_spec_with_mysql_bodies_compares_postgresql_with_mariadb():
    from conftest import LOCAL_DSN, local_server_reachable

    if not (local_pg_reachable() and local_server_reachable()):
        pytest.skip("needs the local PostgreSQL and MariaDB")
    done = cli("compare", "two-engines.spec", "--dsn", LOCAL_PG_DSN, "--dsn", LOCAL_DSN, timeout=300)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "step 3 (line 15), a: permutation 1: different rows" in out  # pg_try_advisory_lock vs GET_LOCK
    assert "step 8 (line 24), b: permutation 1: error vs rows" in out  # NOWAIT aborted PostgreSQL's transaction
    assert "* b> SELECT count(*) AS n FROM jobs;" in out
    assert out.count("-- permutation: a_claim b_wait") == 2  # each side heads its second permutation


SETUP_FAILS = """
setup { CREATE TABLE shape_made (id int); }
setup { SELEC 1; }
teardown { DROP TABLE shape_made; }
session s1
step s1a { SELECT 1 AS one; }
"""

# Shapes met in PostgreSQL's own isolation specs, each written here in a small spec of its own
# (none is a copy of PostgreSQL's): the comparison wants isolationtester's output exactly.
SHAPES = {
    # A SELECT whose rows start arriving and which then waits for a lock (an UPDATE ... RETURNING
    # blocked on a later row, as in eval-plan-qual-trigger): isolationtester sees it waiting, as
    # the result set is not complete.
    "rows-then-wait": """
setup
{
  CREATE FUNCTION shape_noisy(i int) RETURNS int LANGUAGE plpgsql AS $$
  BEGIN
    RAISE NOTICE 'row %', i;
    IF i = 2 THEN PERFORM pg_advisory_xact_lock(77); END IF;
    RETURN i;
  END;$$;
}
teardown { DROP FUNCTION shape_noisy(int); }
session a
step a_lock { BEGIN; SELECT pg_advisory_xact_lock(77); }
step a_done { COMMIT; }
session b
step b_read { SELECT x, shape_noisy(x) FROM generate_series(1, 3) x; }
permutation a_lock b_read a_done
""",
    # Answers past the tool's caps for YAML scenarios, printed whole as isolationtester prints
    # them: a value over 4 kB, over a thousand rows, over a hundred notices in one step.
    "big-answers": """
session s1
step s1_value { SELECT length(repeat('x', 5000)) AS n, repeat('ab', 2100) AS v; }
step s1_rows { SELECT g FROM generate_series(1, 1002) g; }
step s1_notices { DO $$ BEGIN FOR i IN 1..120 LOOP RAISE NOTICE 'n %', i; END LOOP; END $$; }
""",
    # A session's connection ended by the server (pg_terminate_backend from another session):
    # its next step prints the server's FATAL and libpq's account of the closed socket.
    "terminated": """
setup { CREATE TABLE shape_pid (pid int); }
teardown { DROP TABLE shape_pid; }
session s1
setup { INSERT INTO shape_pid SELECT pg_backend_pid(); }
step s1a { SELECT 1 AS one; }
step s1b { SELECT 2 AS two; }
session s2
step s2k { SELECT pg_terminate_backend(pid) FROM shape_pid; }
permutation s1a s2k s1b
""",
    # Failed teardowns, told on standard error in libpq's words: the syntax error's LINE and
    # cursor, a DETAIL and a HINT.
    "teardown-fails": """
setup { CREATE TABLE shape_t (id int); CREATE VIEW shape_v AS SELECT * FROM shape_t; }
teardown { DROP VIEW shape_v; DROP TABLE shape_t; }
session s1
step s1a { SELECT 1 AS x; }
teardown { SELEC 1; }
session s2
step s2a { SELECT 2 AS y; }
teardown { DROP TABLE shape_t; }
""",
    # A deadlock found only after an 11 s deadlock_timeout, the next step of the victim's session
    # waiting for it (as deadlock-hard's): isolationtester waits up to its 300 s for a step, and
    # so must --format isolationtester, whose tool-wide 10 s step timeout ended this run.
    "slow-deadlock": """
setup { CREATE TABLE shape_a (); CREATE TABLE shape_b (); }
teardown { DROP TABLE shape_a, shape_b; }
session s1
setup { BEGIN; SET deadlock_timeout = '100s'; }
step s1a { LOCK TABLE shape_a; }
step s1b { LOCK TABLE shape_b; }
step s1c { COMMIT; }
session s2
setup { BEGIN; SET deadlock_timeout = '11s'; }
step s2b { LOCK TABLE shape_b; }
step s2a { LOCK TABLE shape_a; }
step s2c { COMMIT; }
permutation s1a s2b s1b s2a s2c s1c
""",
    # A setup block that fails (a syntax error, after an earlier block made a table): the run
    # ends there, `setup failed:` in libpq's words on standard error (PostgreSQL's specs meet
    # this only when a server lacks what they need, e.g. prepared transactions).
    "setup-fails": SETUP_FAILS,
    # Notices from every kind of block: a setup's and the teardown's (isolationtester drops
    # them: its own connection prints nothing), a session's setup and steps (printed after the
    # session's name).
    "block-notices": """
setup { DROP TABLE IF EXISTS shape_n; CREATE TABLE shape_n (id int); }
teardown { DROP TABLE shape_n; DROP TABLE IF EXISTS shape_gone; }
session s1
setup { DROP TABLE IF EXISTS shape_never; }
step s1a { DO $$ BEGIN RAISE NOTICE 'from a step'; END $$; }
teardown { DROP TABLE IF EXISTS shape_never_either; }
""",
    # A session's setup that fails, after another session's setup printed its rows.
    "session-setup-fails": """
setup { CREATE TABLE shape_ok (id int); }
teardown { DROP TABLE shape_ok; }
session s1
setup { SELECT 1 AS first_session_ready; }
step s1a { SELECT 1 AS one; }
session s2
setup { INSERT INTO shape_missing VALUES (1); }
step s2a { SELECT 2 AS two; }
""",
    # A step named "" (a quoted empty name is a name): `step : SQL`.
    "empty-step-name": """
session s1
step "" { SELECT 1 AS one; }
step b { SELECT 2 AS two; }
permutation b ""
""",
    # Blocks written empty: the server answers EMPTY_QUERY, which isolationtester's PQexec takes
    # for a failure, with no words (libpq has none), not even a newline.
    "empty-teardowns": """
teardown { }
session s1
step a { SELECT 1 AS a; }
teardown {}
""",
    "empty-session-setup": """
session s1
setup { -- nothing but a comment
}
step a { SELECT 1 AS a; }
""",
    # A session that ends its own connection: its teardown, and the next permutation's, meet a
    # closed connection and print libpq's words alone.
    "self-terminated-teardown": """
session s1
step k { SELECT pg_terminate_backend(pg_backend_pid()); }
teardown { SELECT 'td' AS td; }
session s2
step z { SELECT 2 AS z; }
permutation k z
permutation z
""",
    # ... and its next step cannot be sent: isolationtester ends the run there.
    "self-terminated-step": """
session s1
step k { SELECT pg_terminate_backend(pg_backend_pid()); }
step q { SELECT 1 AS q; }
session s2
step z { SELECT 2 AS z; }
permutation z k z q
""",
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_shapes_of_postgresqls_own_specs_print_as_isolationtester_prints_them(shape, tmp_path):
    spec = tmp_path / f"{shape}.spec"
    spec.write_text(SHAPES[shape])
    compare_with_isolationtester(spec)


FLOOD = """
setup { CREATE TABLE flood (id int); }
teardown { DROP TABLE flood; }
session s1
step %(step)s { %(sql)s }
step after { SELECT 1 AS still_here; }
"""


@pytest.mark.parametrize(
    "step, sql",
    [
        ("big", "SELECT repeat('x', 300000000) AS v;"),
        ("loud", "DO $$ BEGIN FOR i IN 1..3000000 LOOP RAISE NOTICE 'n %', i; END LOOP; END $$;"),
    ],
    ids=["a-300-MB-value", "3-million-notices"],
)
def test_a_spec_answer_read_whole_stays_within_the_memory_bound(pg_embedded, tmp_path, step, sql):
    """A spec's answers are read whole (as isolationtester reads them), not a row at a time;
    what libpq takes in is bounded all the same: past 64 MiB the step's connection is dropped
    and told, and the process stays small. Before, a 300 MB value grew it by 3 GB."""
    spec = tmp_path / "flood.spec"
    spec.write_text(FLOOD % {"step": step, "sql": sql})
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobqueue_demo", "run", str(spec), "--dsn", pg_dsn(pg_embedded), "--format", "isolationtester"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
    )
    out = io.BytesIO()
    while chunk := proc.stdout.read(1 << 20):
        out.write(chunk[-4096:])  # the tail is what is checked: nothing here holds the flood
    err = proc.stderr.read().decode()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert "an answer too big to read: it took more than 64 MiB of memory" in out.getvalue().decode(errors="replace"), err
    # The next step cannot be sent on the dropped connection: the run ends as isolationtester's
    # ends when it cannot send a step (its words, exit 1).
    assert proc.returncode == 1 and "failed to send query for step after: no connection to the server" in err, err
    assert usage.ru_maxrss < 400 * 1024, f"the run grew to {usage.ru_maxrss // 1024} MB"


def test_a_failed_setup_ends_the_run_with_isolationtesters_words_and_exit_code(pg_embedded, tmp_path):
    """isolationtester exits 1 after `setup failed: ...`; the tool's own formats keep its one
    line and exit 2. Either way the scratch database goes with the run."""
    spec = tmp_path / "setup-fails.spec"
    spec.write_text(SETUP_FAILS)
    done = cli("run", str(spec), "--dsn", pg_dsn(pg_embedded), "--format", "isolationtester", timeout=120)
    assert done.returncode == 1, done.stderr
    assert done.stdout == "Parsed test spec with 1 sessions\n\nstarting permutation: s1a\n"
    assert done.stderr == 'setup failed: ERROR:  syntax error at or near "SELEC"\nLINE 1: SELEC 1;\n        ^\n'
    done = cli("run", str(spec), "--dsn", pg_dsn(pg_embedded), timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().endswith(f'{spec}: setup failed: ERROR:  syntax error at or near "SELEC"'), done.stderr
    assert done.stderr.count("setup failed") == 1


# isolationtester's max_step_wait, shortened by its own variable: a step still running after
# it is cancelled (and its answer is the cancel's error); one still running after twice it
# (its plpgsql swallows the cancel) ends the run, without teardown, exit 1.
CANCELLED = """
setup { CREATE TABLE shape_slow (id int); }
teardown { DROP TABLE shape_slow; }
session s1
step s1slow { SELECT pg_sleep(4) AS slept; }
step s1after { SELECT 1 AS after; }
session s2
step s2a { SELECT 2 AS two; }
permutation s1slow s2a s1after
"""
# The postmaster signals a cancelled backend twice (its pid, then its process group): the
# second signal may cancel the statement after the first was swallowed, so that is swallowed too.
STUBBORN = """
session s1
step s1stubborn { DO $$ BEGIN
  BEGIN PERFORM pg_sleep(3); EXCEPTION WHEN query_canceled THEN RAISE NOTICE 'cancel swallowed'; END;
  BEGIN PERFORM pg_sleep(3); EXCEPTION WHEN query_canceled THEN NULL; END;
  PERFORM pg_sleep(3); END $$; }
step s1after { SELECT 1 AS after; }
"""


@pytest.mark.parametrize("spec_text", [CANCELLED, STUBBORN], ids=["cancelled", "timed-out"])
def test_a_step_past_isolationtesters_wait_is_cancelled_then_given_up_as_there(spec_text, tmp_path):
    spec = tmp_path / "slow.spec"
    spec.write_text(spec_text)
    env = {**os.environ, "PGISOLATIONTIMEOUT": "1"}
    compare_with_isolationtester(spec, env)


def test_a_step_that_outlives_twice_the_step_timeout_ends_the_run_in_isolationtesters_words(pg_embedded, tmp_path):
    spec = tmp_path / "stubborn.spec"
    spec.write_text(STUBBORN)
    done = cli("run", str(spec), "--dsn", pg_dsn(pg_embedded), "--format", "isolationtester", "--step-timeout", "1", timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.endswith("isolationtester: canceling step s1stubborn after 1 seconds\ns1: NOTICE:  cancel swallowed\n")
    assert done.stderr == "step s1stubborn timed out after 2 seconds\n"
    done = cli("run", str(spec), "--dsn", pg_dsn(pg_embedded), "--step-timeout", "1", timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "-- s1stubborn cancelled after 1 s (--step-timeout)" in done.stdout
    assert done.stderr.strip() == "jobqueue-demo: step s1stubborn timed out after 2 seconds"


# A spec that finds its own sessions in pg_stat_activity by the application_name
# isolationtester gives them ($PGAPPNAME, as pg_isolation_regress sets it, and /SESSION), as
# insert-conflict-specconflict lists its sessions' speculative-insertion locks.
APPLICATION_NAMES = """
session holder
step h_lock { SELECT pg_advisory_lock(41) IS NOT NULL AS locked; }
step h_unlock { SELECT pg_advisory_unlock(41); }
session waiter
step w_lock { SELECT pg_advisory_lock(41) IS NOT NULL AS locked; }
step w_unlock { SELECT pg_advisory_unlock(41); }
session "the watcher"
step watch {
  SELECT pa.application_name, pl.mode, pl.granted
  FROM pg_locks pl JOIN pg_stat_activity pa USING (pid)
  WHERE pl.locktype = 'advisory' AND pa.application_name LIKE 'shape-app%'
  ORDER BY 1, 2, 3;
}
step me { SELECT application_name FROM pg_stat_activity WHERE pid = pg_backend_pid(); }
permutation h_lock w_lock watch me h_unlock w_unlock
"""


@pytest.mark.parametrize("appname", ["shape-app", None], ids=["PGAPPNAME", "unset"])
def test_a_spec_finds_its_sessions_by_isolationtesters_application_names(appname, tmp_path):
    spec = tmp_path / "application-names.spec"
    spec.write_text(APPLICATION_NAMES)
    env = {k: v for k, v in os.environ.items() if k != "PGAPPNAME"}
    if appname:
        env["PGAPPNAME"] = appname
    compare_with_isolationtester(spec, env)


# Two steps held by each other's annotations until isolationtester gives up: the steps still
# active are listed by session, in the spec's order, not in the order they started waiting.
MUTUALLY_HELD = """
session s1
step a { SELECT pg_advisory_lock(9); }
step au { SELECT pg_advisory_unlock_all(); }
session s2
step b { SELECT pg_advisory_lock(9); }
step bu { SELECT pg_advisory_unlock_all(); }
permutation a b(au) au(b) bu
"""


def test_the_steps_left_active_are_listed_in_session_order(tmp_path):
    spec = tmp_path / "mutually-held.spec"
    spec.write_text(MUTUALLY_HELD)
    compare_with_isolationtester(spec, env={**os.environ, "PGISOLATIONTIMEOUT": "1"})
