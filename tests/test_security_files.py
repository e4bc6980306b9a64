"""What scenario SQL and the tool's own sweeps may touch: only what the tool made, and files
only inside the run's own directory, even when another local user is hostile."""

from __future__ import annotations

import secrets
from contextlib import closing

import pytest

from conftest import LOCAL_DSN, LOCAL_PG_DSN, cli, local_pg_reachable, local_server_reachable

# -- the sweep drops only what the tool made ------------------------------------------------


def _look_alike() -> str:
    """A name the old sweep took for a run's (jqd_ and 16 hex digits, then more): random, so
    no other test's objects collide with it."""
    return f"jqd_{secrets.token_hex(8)}_important"


def _sweep_and_run(dsn: str) -> None:
    swept = cli("cleanup", "--dsn", dsn)
    assert swept.returncode == 0, swept.stderr
    ran = cli("run", "nowait", "--dsn", dsn)
    assert ran.returncode == 0, ran.stderr


@pytest.mark.skipif(not local_pg_reachable(), reason="no PostgreSQL on 127.0.0.1:5432")
def test_postgresql_sweep_keeps_a_look_alike_database():
    from jobqueue_demo.engine.pg_control import execute, quote, value
    from jobqueue_demo.engine.pg_server import parse_dsn

    params, name = parse_dsn(LOCAL_PG_DSN), _look_alike()
    with closing(params.connect()) as admin:
        execute(admin, f"CREATE DATABASE {quote(name)}")
        try:
            with closing(params.connect(database=name)) as inside:
                execute(inside, "CREATE TABLE precious (v int); INSERT INTO precious VALUES (42)")
            _sweep_and_run(LOCAL_PG_DSN)
            with closing(params.connect(database=name)) as inside:
                assert value(inside, "SELECT v FROM precious") == "42"
        finally:
            execute(admin, f"DROP DATABASE IF EXISTS {quote(name)} WITH (FORCE)")


@pytest.mark.skipif(not local_server_reachable(), reason="no server on 127.0.0.1:3306")
def test_mysql_sweep_keeps_a_look_alike_database():
    from jobqueue_demo.engine.control import execute, value
    from jobqueue_demo.engine.scratch import quote
    from jobqueue_demo.engine.server import parse_dsn

    name = _look_alike()
    with closing(parse_dsn(LOCAL_DSN).connect(database=None)) as admin:
        execute(admin, f"CREATE DATABASE {quote(name)}")
        try:
            execute(admin, f"CREATE TABLE {quote(name)}.precious (v INT)")
            execute(admin, f"INSERT INTO {quote(name)}.precious VALUES (42)")
            _sweep_and_run(LOCAL_DSN)
            assert value(admin, f"SELECT v FROM {quote(name)}.precious") == "42"
        finally:
            execute(admin, f"DROP DATABASE IF EXISTS {quote(name)}")


# -- an interrupted cleanup ---------------------------------------------------------------

INTERRUPTED_SWEEP = """
import os, sys
from pathlib import Path
from jobqueue_demo.engine.leftovers import sweep_dirs

files = int(sys.argv[2])
removed = []

def interrupt_before_the_last_file(event, args):
    # Ctrl-C as the sweep is about to remove the last of the run's files.
    if event == "os.remove" and os.path.basename(os.fsdecode(args[0])).startswith("file-"):
        removed.append(args[0])
        if len(removed) == files:
            raise KeyboardInterrupt

sys.addaudithook(interrupt_before_the_last_file)
try:
    sweep_dirs(folder=Path(sys.argv[1]))
except KeyboardInterrupt:
    print("interrupted")
"""


def test_an_interrupted_cleanup_leaves_the_marker_with_the_rest(tmp_path):
    import subprocess
    import sys

    from jobqueue_demo.engine.leftovers import sweep_dirs
    from jobqueue_demo.engine.owner import MARKER, hold

    files = 200
    run = tmp_path / "jobqueue-demo-killed"
    run.mkdir()
    for i in range(files):
        (run / f"file-{i:03}").write_bytes(b"x")
    hold(run).close()  # made last, as a directory's later entries; its run is gone
    done = subprocess.run(
        [sys.executable, "-c", INTERRUPTED_SWEEP, str(tmp_path), str(files)], capture_output=True, text=True, timeout=60
    )
    assert done.stdout == "interrupted\n", done.stderr
    left = {p.name for p in run.iterdir()}
    assert MARKER in left, f"the marker went before {len(left)} other file(s): no sweep would ever take them"
    assert len(left) == 2
    assert [f.name for f in sweep_dirs(folder=tmp_path).found] == [str(run)]
    assert not run.exists()
