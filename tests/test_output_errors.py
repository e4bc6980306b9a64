"""Standard output that cannot be written (a full device, a closed descriptor, a pipe whose
reader has gone): one line or silence, a documented exit code, no traceback, and the run's
clean-up done all the same."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import ROOT, dsn_env, scratch_databases


def run_with_stdout(stdout, env: dict, *args: str, shell_redirect: str = "") -> tuple[int, str]:
    full = {k: v for k, v in os.environ.items() if k != "JOBQUEUE_DEMO_DSN"}
    full.update(env, NO_COLOR="1")
    command = [sys.executable, "-m", "jobqueue_demo", *args]
    if shell_redirect:
        command = ["sh", "-c", f'exec "$@" {shell_redirect}', "sh", *command]
    proc = subprocess.Popen(command, stdout=stdout, stderr=subprocess.PIPE, text=True, env=full, cwd=ROOT)
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err


def test_a_full_device_is_one_line_exit_4_and_the_run_cleaned_up(embedded):
    before = scratch_databases(embedded)
    with open("/dev/full", "w") as full:
        code, err = run_with_stdout(full, dsn_env(embedded), "run", "nowait")
    assert code == 4, err
    assert err.splitlines() == ["jobqueue-demo: cannot write standard output: No space left on device"]
    assert scratch_databases(embedded) - before == set()


def test_a_closed_stdout_is_one_line_exit_4(embedded):
    before = scratch_databases(embedded)
    code, err = run_with_stdout(None, dsn_env(embedded), "run", "nowait", shell_redirect=">&-")
    assert code == 4, err
    assert err.splitlines() == ["jobqueue-demo: cannot write standard output: it is closed"]
    assert scratch_databases(embedded) - before == set()


def test_a_reader_gone_ends_silently_as_sigpipe_would(embedded):
    before = scratch_databases(embedded)
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        code, err = run_with_stdout(write_end, dsn_env(embedded), "run", "nowait")
    finally:
        os.close(write_end)
    assert (code, err) == (141, "")
    assert scratch_databases(embedded) - before == set()
