"""Ctrl-C (or SIGTERM, SIGHUP) at any point: sessions rolled back, scratch database dropped,
server stopped, exit 128 + the signal's number (130 for Ctrl-C), the signal named on one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import LOCAL_DSN, ROOT, local_server_reachable, scratch_databases


def start(*args: str, env: dict) -> subprocess.Popen:
    full = {k: v for k, v in os.environ.items() if k != "JOBQUEUE_DEMO_DSN"}
    full.update(env, NO_COLOR="1", PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, "-m", "jobqueue_demo", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=full,
        cwd=ROOT,
    )


def interrupt_while_waiting(proc: subprocess.Popen, signum: int = signal.SIGINT) -> tuple[int, str, str]:
    """Wait until B is shown waiting, then press Ctrl-C (or send another signal)."""
    lines = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        lines.append(line)
        if "waiting for a row lock held by A" in line or '"wait_start"' in line or not line:
            break
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=30)
    return proc.returncode, "".join(lines) + out, err


@pytest.mark.skipif(not local_server_reachable(), reason="no server on 127.0.0.1:3306")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_interrupt_rolls_back_and_drops_scratch_database(local, signum):
    args = ("run", "tests/data/long-wait.yaml", "--step-timeout", "60", "--format", "json")
    proc = start(*args, env={"JOBQUEUE_DEMO_DSN": LOCAL_DSN})
    code, out, err = interrupt_while_waiting(proc, signum)
    assert code == 128 + signum, err
    said = {signal.SIGINT: "interrupted (Ctrl-C)", signal.SIGTERM: "terminated by SIGTERM"}[signum]
    assert err.splitlines()[1:] == [f"jobqueue-demo: {said}"], err  # after the heading (JSON on stdout)
    events = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert any(e["event"] == "wait_start" and e["blockers"] == ["A"] for e in events)
    assert "Traceback" not in err
    # Other runs may share this server, so only this run's own scratch database counts.
    assert events[0]["database"] not in scratch_databases(local)
    conn = local.params.connect()
    try:
        conn.query(b"SHOW ENGINE INNODB STATUS")
        status = conn.store_result().fetch_row(0)[0][2]
    finally:
        conn.close()
    assert events[0]["database"] not in status


def test_ctrl_c_stops_the_embedded_server(tmp_path):
    proc = start("run", "tests/data/long-wait.yaml", "--step-timeout", "60", env={"TMPDIR": str(tmp_path)})
    code, out, err = interrupt_while_waiting(proc)
    assert code == 130, err
    assert err.splitlines()[-1] == "jobqueue-demo: interrupted (Ctrl-C)", err
    assert "waiting for a row lock held by A" in out
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("jobqueue-demo-")] == []
    alive = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True)
    assert alive.stdout.strip() == ""
