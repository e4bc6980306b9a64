"""Real servers for the tests: the embedded default, and 127.0.0.1:3306 when it answers."""

from __future__ import annotations

import dataclasses
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from contextlib import closing
from pathlib import Path

import fast_subset
import pytest

ROOT = Path(__file__).resolve().parent.parent
LOCAL_DSN = os.environ.get("JOBQUEUE_DEMO_TEST_DSN", "mysql://root@127.0.0.1:3306/test")


def local_server_reachable() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 3306), timeout=1):
            return True
    except OSError:
        return False


def reachable_tmp() -> Path:
    """A temp dir to point TMPDIR at. Not pytest's tmp_path: as root the throwaway servers run as
    a user of their own, which cannot enter /tmp/pytest-of-root (mode 0700)."""
    folder = Path(tempfile.mkdtemp(prefix="jqd-test-"))
    folder.chmod(0o755)
    return folder


@pytest.fixture
def server_tmp():
    """reachable_tmp(), removed after the test."""
    folder = reachable_tmp()
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def embedded():
    from jobqueue_demo.engine.seam import open_server

    with open_server(None) as info:
        yield info


@pytest.fixture(scope="session")
def galera_cluster():
    """A private 3-node Galera cluster for the whole test session."""
    from jobqueue_demo.engine.galera.cluster import EmbeddedCluster
    from jobqueue_demo.errors import ServerError

    try:
        with EmbeddedCluster(3) as started:
            yield started
    except ServerError as exc:
        pytest.skip(f"the embedded Galera cluster cannot start on this machine: {exc}")


@pytest.fixture(scope="session")
def galera(galera_cluster):
    """Node 1's ServerInfo with the cluster's nodes, as `--cluster 3` hands it to a run."""
    from jobqueue_demo.engine.galera.engine import ENGINE

    info = ENGINE.server_info(galera_cluster.params[0], embedded=True)
    return dataclasses.replace(info, nodes=tuple(galera_cluster.params))


@pytest.fixture(scope="session")
def local():
    if not local_server_reachable():
        pytest.skip("no server on 127.0.0.1:3306")
    from jobqueue_demo.engine.seam import open_server

    with open_server(LOCAL_DSN) as info:
        yield info


LOCAL_PG_DSN = os.environ.get("JOBQUEUE_DEMO_TEST_PG_DSN", "postgresql://root@127.0.0.1:5432/test")


def local_pg_reachable() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 5432), timeout=1):
            return True
    except OSError:
        return False


def pg_binaries_missing() -> str | None:
    """Why the embedded PostgreSQL cannot start here, or None."""
    from jobqueue_demo.engine.postgresql.embedded import find_binaries
    from jobqueue_demo.errors import ServerError

    try:
        find_binaries()
    except ServerError as e:
        return str(e)
    return None


def skip_without_pg() -> None:
    missing = pg_binaries_missing()
    if missing is not None:
        pytest.skip(f"no PostgreSQL server binaries: {missing}")


@pytest.fixture(scope="session")
def pg_embedded():
    skip_without_pg()
    from jobqueue_demo.engine.seam import open_server

    with open_server(None, engine="postgresql") as info:
        yield info


@pytest.fixture(scope="session")
def pg_local():
    if not local_pg_reachable():
        pytest.skip("no PostgreSQL on 127.0.0.1:5432")
    from jobqueue_demo.engine.seam import open_server

    with open_server(LOCAL_PG_DSN) as info:
        yield info


@pytest.fixture(params=["pg_embedded", "pg_local"])
def pg(request):
    """Each PostgreSQL behaviour test runs on both real PostgreSQL servers."""
    return request.getfixturevalue(request.param)


@pytest.fixture(params=["embedded", "local"])
def server(request):
    """Each behaviour test runs on both real servers."""
    return request.getfixturevalue(request.param)


def run_cli(*args: str):
    """The CLI inside this process (typer's CliRunner), for the shape of its output: where no
    pty, signal or exit code of a real process matters. Has .exit_code, .stdout, .stderr."""
    from typer.testing import CliRunner

    from jobqueue_demo.cli.main import all_commands

    return CliRunner().invoke(all_commands(), list(args), env={"NO_COLOR": "1"})


def cli(*args: str, env: dict | None = None, timeout: float = 120, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """The installed command as a user runs it, with colour off unless a test asks."""
    full_env = {k: v for k, v in os.environ.items() if k != "JOBQUEUE_DEMO_DSN"}
    full_env["NO_COLOR"] = "1"
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "jobqueue_demo", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        cwd=cwd,
    )


def scratch_databases(info) -> set[str]:
    conn = info.params.connect()
    try:
        conn.query(b"SHOW DATABASES LIKE 'jqd\\_%'")
        return {row[0] for row in conn.store_result().fetch_row(0)}
    finally:
        conn.close()


def left_behind(info, before: set[str]) -> set[str]:
    """Scratch databases that appeared since `before` and that no live run owns.

    On a shared server another suite's run may have one open at the same time; it holds its
    run's named lock (the database's name, a snapshot's without its suffix) until it has
    dropped it, so one left behind is one whose lock is free.
    """
    from jobqueue_demo.engine.mysql import control
    from jobqueue_demo.engine.naming import SNAPSHOT_SUFFIX

    new = scratch_databases(info) - before
    with closing(info.params.connect()) as conn:
        return {
            name for name in new
            if control.flag(conn, f"SELECT IS_FREE_LOCK('{name.removesuffix(SNAPSHOT_SUFFIX)}')")
        }


def dsn_of(info) -> str:
    """A DSN for the server behind a fixture, so the CLI uses the same one (the embedded one by its socket)."""
    if info.params.unix_socket:
        return f"mysql://{info.params.user}@localhost/?unix_socket={info.params.unix_socket}"
    return LOCAL_DSN


def dsn_env(info) -> dict:
    return {"JOBQUEUE_DEMO_DSN": dsn_of(info)}


def steady(event):
    from jobqueue_demo.run import events as ev

    """The event with its timings fixed, so the drawing depends on the run's content only."""
    if isinstance(event, ev.Completed) and event.waited_ms is not None:
        return dataclasses.replace(event, waited_ms=12.0)
    if isinstance(event, ev.FaultApplied) and event.took_ms is not None:
        return dataclasses.replace(event, took_ms=0.5)
    return event


def write_lesson(folder: Path, head: str) -> str:
    """A minimal lesson file: `head` (top-level keys such as sessions) and one statement."""
    path = folder / "lesson.yaml"
    path.write_text(f"title: t\n{head}\nsteps:\n  - A: SELECT 1;\n")
    return str(path)



# -- the fast subset (`pytest -m fast`, `make test-fast`; tests/fast_subset.py) -------------

GUARDED = pytest.StashKey[bool]()


@pytest.hookimpl(tryfirst=True)  # before -m deselects by the marks added here
def pytest_collection_modifyitems(items):
    fast_subset.mark(items)


def pytest_collection_finish(session):
    # Only when no selected test needs a server: then no server fixture's own threads are
    # running, and whatever reaches out comes from a fast test.
    session.config.stash[GUARDED] = bool(session.items) and all(i.get_closest_marker("fast") for i in session.items)


@pytest.fixture(autouse=True)
def _fast_tests_stay_inside(request):
    if not request.config.stash.get(GUARDED, False):
        yield
        return
    with fast_subset.inside_only():
        yield


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    result = yield  # a test that failed already said what it reached
    fast_subset.fail_if_reached()
    return result


def hostile_queue_file(tmp_path: Path) -> Path:
    """read-then-mark-bug.yaml with a completion that deletes the job's earlier records from the
    tool's own table: the loader refuses the name jqd_..., so a PL/pgSQL body spells it at run
    time. What the tool judges by must not be what this SQL can reach."""
    path = tmp_path / "hostile.yaml"
    text = (ROOT / "queues" / "read-then-mark-bug.yaml").read_text().replace(
        "CREATE INDEX tasks_status ON tasks (status, id)",
        "CREATE INDEX tasks_status ON tasks (status, id);\n"
        "  CREATE FUNCTION tidy(j INT) RETURNS VOID LANGUAGE plpgsql AS "
        "'BEGIN EXECUTE ''DELETE FROM jq'' || ''d_done WHERE job_id = '' || j; END'",
    ).replace(
        "complete: UPDATE tasks SET status = 'done' WHERE id = :job",
        "complete:\n  - UPDATE tasks SET status = 'done' WHERE id = :job\n  - SELECT COUNT(*) FROM (SELECT tidy(:job)) t",
    )
    path.write_text("engines: [postgresql]\n" + text)
    return path
