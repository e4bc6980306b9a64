"""A server that stops answering (SIGSTOP) cannot hold the CLI: exit 3 after the step
timeout, exit 130 soon after Ctrl-C (143 after SIGTERM). Only a private server is ever frozen."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import ROOT, skip_without_pg

STEP_TIMEOUT_S = 3


@pytest.fixture
def private_server():
    from jobqueue_demo.engine.mysql.embedded import EmbeddedServer

    server = EmbeddedServer()
    server.start()
    try:
        yield server
    finally:
        os.kill(server._process.pid, signal.SIGCONT)
        server.stop()


def start_frozen_run(server) -> subprocess.Popen:
    """A run whose statement is in flight when its server is frozen."""
    env = {k: v for k, v in os.environ.items() if k != "JOBQUEUE_DEMO_DSN"}
    dsn = f"mysql://root@localhost/?unix_socket={server.params.unix_socket}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobqueue_demo", "run", "tests/data/long-statement.yaml", "--dsn", dsn,
         "--step-timeout", str(STEP_TIMEOUT_S), "--format", "json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**env, "PYTHONUNBUFFERED": "1"}, cwd=ROOT,
    )
    while '"run_started"' not in proc.stdout.readline():
        assert proc.poll() is None, proc.stderr.read()
    time.sleep(0.3)  # the statement is sent and the driver is watching for waits
    os.kill(server._process.pid, signal.SIGSTOP)
    return proc


def test_frozen_server_ends_the_run_with_exit_3_after_the_step_timeout(private_server):
    proc = start_frozen_run(private_server)
    frozen = time.monotonic()
    _, err = proc.communicate(timeout=30)
    took = time.monotonic() - frozen
    assert proc.returncode == 3, err
    assert err.splitlines()[-1].endswith("the server did not answer within 3 s")
    assert "Traceback" not in err
    # Before, it still hung 40 s later. One step timeout for the stalled query (3.0-3.2 s
    # measured); the clean-up after it must not wait a second time. A loose bound: a busy
    # machine must not fail this, a hang must.
    assert took < 2 * STEP_TIMEOUT_S, took


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_interrupt_while_the_server_is_frozen_exits_at_once(private_server, signum):
    proc = start_frozen_run(private_server)
    time.sleep(0.5)
    proc.send_signal(signum)
    sent = time.monotonic()
    _, err = proc.communicate(timeout=30)
    took = time.monotonic() - sent
    assert proc.returncode == 128 + signum, err
    assert "Traceback" not in err
    # 0.5-0.9 s measured (the clean-up's grace for an answer is 0.4 s); loose, as above.
    assert took < 2.0, took


def test_ctrl_c_while_connecting_to_a_frozen_server_exits_130_at_once(private_server):
    os.kill(private_server._process.pid, signal.SIGSTOP)
    env = {k: v for k, v in os.environ.items() if k != "JOBQUEUE_DEMO_DSN"}
    dsn = f"mysql://root@localhost/?unix_socket={private_server.params.unix_socket}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobqueue_demo", "run", "nowait", "--dsn", dsn],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
    )
    time.sleep(1.5)  # started, and inside the 5 s connect timeout
    assert proc.poll() is None
    proc.send_signal(signal.SIGINT)
    sent = time.monotonic()
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    # 0.03 s measured; before, Ctrl-C waited for the connect timeout. Loose bound, as above.
    assert time.monotonic() - sent < 2.0


def script_on_a_frozen_server(script: str, server) -> tuple[str, str]:
    """`script` run with the server's DSN: it connects, prints "frozen" and waits for a line,
    which it gets once the server is frozen. Its output, within 30 s."""
    dsn = f"mysql://root@localhost/?unix_socket={server.params.unix_socket}"
    proc = subprocess.Popen(
        [sys.executable, "-c", script, dsn], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )
    assert proc.stdout.readline() == "frozen\n", proc.stderr.read()
    os.kill(server._process.pid, signal.SIGSTOP)
    return proc.communicate("\n", timeout=30)


SILENT_SERVER = """
import sys, threading
from jobqueue_demo.engine.mysql.server import parse_dsn
from jobqueue_demo.errors import ServerError

params = parse_dsn(sys.argv[1])
waiting = params.connect(answer_timeout=600)  # opened before the freeze, as explore's other thread's
print("frozen", flush=True)
sys.stdin.readline()
try:
    params.connect(answer_timeout=1)  # explore's reconnect after a disconnect fault
except ServerError as e:
    print(e)
try:
    waiting.query(b"SELECT 1")
except Exception as e:
    print(e)
"""


def test_a_silent_server_ends_every_wait_one_step_timeout_after_it_fell_silent(private_server):
    """A connect waits no longer than the answer timeout, and once one connection went
    unanswered for it, the process's other connections (explore's other thread, the
    clean-up) no longer wait a timeout of their own: before, explore took 6-11 s to end."""
    out, err = script_on_a_frozen_server(SILENT_SERVER, private_server)  # the second wait alone was 600 s
    lines = out.splitlines()
    assert lines[0].endswith("the server did not answer within 1 s"), out + err
    assert "did not answer" in lines[1], out + err


def test_a_frozen_postgresql_is_waited_for_no_longer_than_the_answer_timeout_and_stops_at_once():
    """As on MariaDB above: before, every connect waited 5 s whatever --step-timeout said, and
    stopping the frozen server 10 s more: explore on it took 21 s with --step-timeout 2."""
    skip_without_pg()
    from jobqueue_demo.engine.postgresql.embedded import EmbeddedPostgres
    from jobqueue_demo.errors import ServerError

    server = EmbeddedPostgres()
    server.start()
    try:
        os.kill(server._process.pid, signal.SIGSTOP)
        frozen = time.monotonic()
        with pytest.raises(ServerError, match="cannot connect"):
            server.params.connect(answer_timeout=1)
        # 2 s measured, libpq's least; 5 s before. Loose, as above.
        assert time.monotonic() - frozen < 4.0
        stopping = time.monotonic()
        server.stop()
        assert time.monotonic() - stopping < 4.0  # 0.1 s measured; 10 s before
    finally:
        server.stop()


@pytest.mark.parametrize("options", [["--stall", "1"], ["--json", "--stall", "60"]], ids=["stall-window", "json-quiet"])
def test_workers_on_a_frozen_server_exit_3_not_as_a_stall(private_server, options):
    """Before, a stall was reported after the server had been waited for 60 s more: exit 1
    after 90 s (`bench` the same, it runs the workers). With --json no view asks the server
    anything: a queue quiet for a second asks it, so a silent server ends the run long before
    the stall window does."""
    env = {k: v for k, v in os.environ.items() if k != "JOBQUEUE_DEMO_DSN"}
    dsn = f"mysql://root@localhost/?unix_socket={private_server.params.unix_socket}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobqueue_demo", "workers", "-w", "2", "-j", "100000", *options, "--dsn", dsn],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**env, "PYTHONUNBUFFERED": "1"}, cwd=ROOT,
    )
    while "-- workers:" not in proc.stderr.readline():
        assert proc.poll() is None, proc.stderr.read()
    _until_every_worker_has_completed_a_job(private_server, workers=2)
    os.kill(private_server._process.pid, signal.SIGSTOP)
    _, err = proc.communicate(timeout=40)
    assert proc.returncode == 3, err
    assert err.splitlines()[-1] == "jobqueue-demo: lost the control connection: the server did not answer within 10 s", err


def _until_every_worker_has_completed_a_job(server, workers: int) -> None:
    """The freeze must find the workers claiming, every one connected: a fixed sleep after the
    start (0.5 s) froze a slow machine's server while the 100,000 jobs were still being made or
    a worker still connecting, which then failed at its connect instead."""
    from contextlib import closing

    from jobqueue_demo.engine.mysql import control

    deadline = time.monotonic() + 60
    with closing(server.params.connect()) as conn:
        while time.monotonic() < deadline:
            found = control.rows(conn, "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME LIKE 'jqd\\_%'")
            tables = [f"`{name}`.completions" for (name,) in found if control.rows(
                conn, f"SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = '{name}' AND TABLE_NAME = 'completions'")]
            if any(int(control.rows(conn, f"SELECT COUNT(DISTINCT worker) FROM {t}")[0][0]) >= workers for t in tables):
                return
            time.sleep(0.05)
    pytest.fail("the workers completed no job within 60 s")


INVARIANT_ON_A_SILENT_SERVER = """
import sys, threading, time
from jobqueue_demo import api
from jobqueue_demo.engine.mysql.server import parse_dsn
from jobqueue_demo.engine.mysql.session import answer

conn = parse_dsn(sys.argv[1]).connect(answer_timeout=600)
print("frozen", flush=True)
sys.stdin.readline()
outcome = []
checking = threading.Thread(target=lambda: outcome.append(_try()), daemon=True)

def _try():
    try:
        return answer(conn, "SELECT 1")
    except Exception as e:
        return e

checking.start()  # explore checks its invariants on its own threads
time.sleep(0.3)
api.note_interrupt(KeyboardInterrupt())  # Ctrl-C on the main thread
checking.join()
print(outcome[0])
"""


def test_ctrl_c_ends_an_invariant_check_on_a_frozen_server(private_server):
    """Explore's invariant check read its answer with a blocking call that only the socket's
    read timeout ended: its Ctrl-C waited that long (2.5 s with --step-timeout 3, 600 s here)."""
    out, err = script_on_a_frozen_server(INVARIANT_ON_A_SILENT_SERVER, private_server)
    assert out.strip() == "lost the control connection: the server did not answer within 600 s", out + err
