"""--matrix: a lesson under every combination of settings, the differing steps side by side."""

from __future__ import annotations

import io
from contextlib import closing, redirect_stdout

import pytest
from conftest import LOCAL_DSN, ROOT, cli, dsn_of, left_behind, scratch_databases

from jobqueue_demo import api as core
from jobqueue_demo.cli.matrix import lesson_matrix
from jobqueue_demo.engine import throwaway
from jobqueue_demo.engine.mysql import control
from jobqueue_demo.engine.mysql import embedded as engine_server
from jobqueue_demo.engine.throwaway import Throwaway
from jobqueue_demo.errors import UsageError
from jobqueue_demo.run.matrix import parse_axes

DATA = ROOT / "tests" / "data"


@pytest.mark.parametrize("text", ["isolation", "isolation=", "isolation=dirty", "a b=1", "x=1;DROP"])
def test_a_malformed_axis_is_refused(text):
    with pytest.raises(UsageError):
        parse_axes([text])


def test_the_table_is_not_combined_with_a_transcript_option(tmp_path):
    done = cli("run", "skip-locked", "--matrix", "isolation=serializable", "--show-locks", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.startswith("jobqueue-demo: --matrix prints one table")


def test_an_axis_given_twice_is_refused():
    with pytest.raises(UsageError):
        parse_axes(["isolation=read-committed", "isolation=serializable"])


@pytest.mark.parametrize("where", ["embedded", "local"])
def test_isolation_levels_side_by_side_show_the_gap_lock_wait(where, request, tmp_path):
    dsn = dsn_of(request.getfixturevalue(where)) if where == "embedded" else LOCAL_DSN
    if where == "local":
        request.getfixturevalue("local")
    done = cli("run", "gap-locks", "--matrix", "isolation=read-committed,repeatable-read", "--dsn", dsn, cwd=tmp_path)
    # Under READ COMMITTED the lesson's wait does not happen: run shows it, verify fails on it.
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "[1] isolation=read-committed" in lines and "[2] isolation=repeatable-read" in lines
    row = next(line for line in lines if line.startswith(" P1 line 54"))
    # Cut after a whole word and marked: it read "VALUES ('send pa", as if that were the value.
    assert row.split("|")[0].strip() == "P1 line 54: INSERT INTO jobs (task) VALUES ..."
    assert [c.strip() for c in row.split("|")[1:]] == ["1 affected", "waited, 1 affected"]
    assert [c.strip() for c in next(x for x in lines if x.startswith(" expectations")).split("|")[1:]] == ["1 not met", "all 11 met"]
    checked = cli("verify", "gap-locks", "--matrix", "isolation=read-committed,repeatable-read", "--dsn", dsn, cwd=tmp_path)
    assert checked.returncode == 1 and checked.stdout == done.stdout


def test_snapshot_isolation_turns_the_silent_double_claim_into_errors(embedded, tmp_path):
    done = cli(
        "explore", "claim-without-lock-explore", "--matrix", "innodb_snapshot_isolation=ON,OFF",
        "--dsn", dsn_of(embedded), cwd=tmp_path,
    )
    assert done.returncode == 1
    rows = {line.split("|")[0].strip(): [c.strip() for c in line.split("|")[1:]] for line in done.stdout.splitlines() if "|" in line}
    assert rows["violated: no job done twice"][0] == "-" and rows["violated: no job done twice"][1] != "-"
    errors = [cells for name, cells in rows.items() if name.startswith("error: ERROR 1020 for")]
    assert errors and all(cells[0] != "-" and cells[1] == "-" for cells in errors)
    assert done.stdout.rstrip().endswith("verdict: FAILED under [1], [2] of 2 combination(s) (exit 1)")


def test_a_global_variable_is_refused_on_a_shared_server(local, tmp_path):
    before = scratch_databases(local)
    done = cli("verify", "skip-locked", "--matrix", "innodb_print_all_deadlocks=ON,OFF", "--dsn", LOCAL_DSN, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "jobqueue-demo: --matrix innodb_print_all_deadlocks: a global-only variable, set only on the private "
        "embedded server (leave out --dsn); a shared server's globals are not changed"
    ]
    assert left_behind(local, before) == set()


def test_a_global_variable_is_set_on_the_embedded_server_and_put_back(embedded):
    with closing(embedded.params.connect(database=None)) as conn:
        before = control.value(conn, "SELECT @@GLOBAL.innodb_print_all_deadlocks")
        out = io.StringIO()
        with redirect_stdout(out):
            met = lesson_matrix([core.load("nowait")], embedded, ["innodb_print_all_deadlocks=ON,OFF"], 10.0)
        assert met and "[1] innodb_print_all_deadlocks=ON" in out.getvalue()
        assert control.value(conn, "SELECT @@GLOBAL.innodb_print_all_deadlocks") == before


def test_a_read_only_variable_gets_a_second_embedded_server_started_with_it(embedded):
    running = set(Throwaway.alive)
    out = io.StringIO()
    with redirect_stdout(out):
        met = lesson_matrix([core.load(str(DATA / "rollback-on-timeout.yaml"))], embedded, ["innodb_rollback_on_timeout=ON,OFF"], 10.0)
    lines = out.getvalue().splitlines()
    # ON: the NOWAIT failure rolled back B's whole transaction, its UPDATE of job 2 with it.
    row = next(line for line in lines if line.startswith(" A4 line 17"))
    assert [c.strip() for c in row.split("|")[1:]] == ["1 row (queued)", "1 row (done)"]
    assert not met
    # OFF is what the first server runs with: only ON needed a server of its own.
    (restart,) = [line for line in lines if line.startswith("-- a second embedded server")]
    assert restart.startswith("-- a second embedded server started with --innodb-rollback-on-timeout=ON: ")
    assert set(Throwaway.alive) == running
    with closing(embedded.params.connect(database=None)) as conn:
        assert control.value(conn, "SELECT @@GLOBAL.innodb_rollback_on_timeout") == "0"


def test_a_read_only_value_the_server_does_not_take_is_refused(embedded):
    running = set(Throwaway.alive)
    with pytest.raises(UsageError, match="innodb_rollback_on_timeout=maybe: a server started with it took OFF"):
        lesson_matrix([core.load(str(DATA / "rollback-on-timeout.yaml"))], embedded, ["innodb_rollback_on_timeout=maybe"], 10.0)
    assert set(Throwaway.alive) == running  # the server started with it is stopped


def test_a_read_only_variable_is_refused_on_a_shared_server(local, tmp_path):
    done = cli("run", "nowait", "--matrix", "innodb_rollback_on_timeout=ON,OFF", "--dsn", LOCAL_DSN, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "jobqueue-demo: --matrix innodb_rollback_on_timeout: read-only: it needs a server started with it, "
        "done only with the private embedded server (leave out --dsn)"
    ]


def test_a_read_only_variable_the_cached_data_directory_cannot_start_with_is_refused(embedded):
    template = throwaway.cache_root() / engine_server.find_server_binary().template_key
    inode, running = template.stat().st_ino, set(Throwaway.alive)
    with pytest.raises(UsageError, match=r"^--matrix: the embedded server exited .* uses page size 16384"):
        lesson_matrix([core.load("nowait")], embedded, ["innodb_page_size=4k"], 10.0)
    # The option was to blame, not the shared template: it is not rebuilt.
    assert template.stat().st_ino == inode and set(Throwaway.alive) == running


def test_explore_under_a_read_only_variable_finds_what_only_that_server_breaks(embedded):
    from jobqueue_demo.cli.matrix import explore_matrix
    from jobqueue_demo.explore.search import ExploreOptions

    out = io.StringIO()
    with redirect_stdout(out):
        held = explore_matrix(core.load(str(DATA / "rollback-on-timeout.yaml")), embedded, ["innodb_rollback_on_timeout=ON,OFF"], ExploreOptions())
    rows = {line.split("|")[0].strip(): [c.strip() for c in line.split("|")[1:]] for line in out.getvalue().splitlines() if "|" in line}
    # The same NOWAIT failures under both; only under ON do they take B's earlier update with them.
    assert rows["violated: B's update of job 2 kept"][1] == "-" and rows["violated: B's update of job 2 kept"][0] != "-"
    nowait = rows["expected: ERROR 1205 for B at line 12, as its expect: says (lock-not-available)"]
    assert nowait[0] == nowait[1] != "-"
    assert not held and "verdict: FAILED under [1] of 2 combination(s) (exit 1)" in out.getvalue()
