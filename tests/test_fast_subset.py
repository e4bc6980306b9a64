"""The fast subset (`pytest -m fast`): which tests it takes, and a run of it failing a test
that reaches a server or starts a process anyway (tests/fast_subset.py)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

from conftest import ROOT

# A suite of its own, beside copies of this suite's conftest: one test per way in or out.
SAMPLE = '''
import http.client
import os
import subprocess

import pytest

from conftest import cli, run_cli


def helper():
    return subprocess.run(["true"])


class Terminal:
    def start(self):
        helper()


@pytest.fixture
def own_server():
    from jobqueue_demo.engine.mysql.embedded import EmbeddedServer

    with EmbeddedServer() as server:
        yield server


def test_pure():
    assert run_cli("--version").exit_code == 0


def test_server_fixture(embedded):
    pass


def test_own_fixture(own_server):
    pass


def test_cli():
    cli("--version")


def test_class_of_the_suite():
    Terminal().start()


def test_fixture_chosen_at_run_time(request):
    request.getfixturevalue("embedded")


@pytest.mark.server
def test_marked():
    run_cli("run", "nowait")


def test_hidden_process():
    os.system("true")


def test_hidden_socket():
    http.client.HTTPConnection("127.0.0.1", 9, timeout=1).request("GET", "/")


def test_hidden_mysql_connection():
    run_cli("run", "nowait", "--dsn", "mysql://root@127.0.0.1:9/")


def test_hidden_postgresql_connection():
    run_cli("run", "nowait", "--dsn", "postgresql://root@127.0.0.1:9/x")


def test_a_refusal_swallowed():
    try:
        os.system("true")
    except BaseException:
        pass
'''
FAST = {"test_pure", "test_hidden_process", "test_hidden_socket", "test_hidden_mysql_connection",
        "test_hidden_postgresql_connection", "test_a_refusal_swallowed"}
REACHED = {
    "test_hidden_process": "os.system (b'true',)",
    "test_hidden_socket": "socket.connect ('127.0.0.1', 9)",
    "test_hidden_mysql_connection": "libmariadb '127.0.0.1'",
    "test_hidden_postgresql_connection": "libpq '127.0.0.1' port 9",
    "test_a_refusal_swallowed": "this one reached [\"os.system (b'true',)\"]",
}


def test_a_fast_run_takes_the_tests_that_reach_nothing_and_fails_those_that_reach_out_anyway(tmp_path):
    for helper in ("conftest.py", "fast_subset.py", "examples.py"):
        shutil.copy(ROOT / "tests" / helper, tmp_path)
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(tmp_path), "-p", "no:cacheprovider",
         "-m", "fast", "-vv", "--tb=no", str(tmp_path)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )
    outcomes = dict(re.findall(r"^test_sample\.py::(\w+) (PASSED|FAILED|ERROR)", done.stdout, re.MULTILINE))
    assert set(outcomes) == FAST, done.stdout + done.stderr
    assert outcomes == {name: "PASSED" if name == "test_pure" else "FAILED" for name in FAST}, done.stdout
    for name, what in REACHED.items():
        failure = next(line for line in done.stdout.splitlines() if line.startswith(f"FAILED test_sample.py::{name} "))
        assert "a fast test must not reach a server or start a process" in failure and what in failure, failure
        assert "mark it @pytest.mark.server" in failure, failure
