"""Smaller hazards: a FIFO as the scenario, an unusable TMPDIR, a DSN naming both TCP and a
socket, and a server whose global wait_timeout is shorter than a paused run."""

from __future__ import annotations

import os

import pytest
from conftest import cli, dsn_of
from test_server import rows as rows_of

from jobqueue_demo.engine.mysql.embedded import EmbeddedServer
from jobqueue_demo.engine.mysql.server import parse_dsn
from jobqueue_demo.errors import UsageError

TWO_STEPS = """\
title: Two steps, a pause between them
sessions: [A]
steps:
  - A: SELECT 1;
  - A: SELECT 2;
"""


def test_a_fifo_as_the_scenario_is_refused_at_once(tmp_path):
    fifo = tmp_path / "lesson.yaml"
    os.mkfifo(fifo)
    done = cli("run", str(fifo), timeout=20)
    assert done.returncode == 2
    assert done.stderr == f"jobqueue-demo: {fifo}: not a regular file (a device, FIFO or socket)\n"


@pytest.mark.parametrize(
    "dsn", ["mysql://root@127.0.0.1/?unix_socket=/tmp/s.sock", "mysql://root@localhost:3307/?unix_socket=/tmp/s.sock"]
)
def test_a_dsn_with_tcp_and_a_socket_is_refused(dsn):
    with pytest.raises(UsageError, match="TCP host or port and \\?unix_socket="):
        parse_dsn(dsn)


def test_the_cli_refuses_it_in_one_line():
    done = cli("run", "nowait", "--dsn", "mysql://root:secret@db.example/?unix_socket=/tmp/s.sock")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "secret" not in done.stderr


def test_a_missing_tmpdir_reaches_neither_the_run_nor_the_server(tmp_path):
    done = cli("run", "nowait", env={"TMPDIR": str(tmp_path / "missing")})
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "missing").exists()


@pytest.fixture
def private_server(server_tmp, monkeypatch):
    """A server of this test's own, whose global settings it may change."""
    monkeypatch.setenv("TMPDIR", str(server_tmp))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    with EmbeddedServer() as server:
        yield server


def test_the_server_keeps_temporary_files_in_the_runs_own_folder(private_server):
    conn = private_server.params.connect()
    try:
        (tmpdir,) = rows_of(conn, "SELECT @@tmpdir")[0]
    finally:
        conn.close()
    assert tmpdir == str(private_server.workdir / "tmp")


def test_a_short_server_wait_timeout_does_not_end_a_paused_run(private_server, tmp_path):
    conn = private_server.params.connect()
    try:
        assert rows_of(conn, "SELECT @@session.wait_timeout") == [("28800",)]
        rows_of(conn, "SET GLOBAL wait_timeout = 1")
    finally:
        conn.close()
    path = tmp_path / "two.yaml"
    path.write_text(TWO_STEPS)
    done = cli("run", str(path), "--pace", "2.5", "--dsn", dsn_of(private_server))
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith("(1 row)") and " 2\n" in done.stdout
