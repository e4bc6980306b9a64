"""Standard output that cannot be written (a full device, a closed descriptor, a pipe whose
reader has gone), and a full disk under the run's directory: one line or silence, a
documented exit code, no traceback, and the run's clean-up done all the same."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import ROOT, cli, dsn_env, scratch_databases, skip_without_pg


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


@pytest.fixture
def tiny_disk():
    """A 64 KB file system for the run's directory: too small for a copy of any server's
    template. Under /tmp, open to all, as the embedded PostgreSQL's user must enter it."""
    folder = Path(tempfile.mkdtemp(prefix="jqd-test-tiny-"))
    mount = ["mount", "-t", "tmpfs", "-o", "size=64k,mode=1777", "tmpfs", str(folder)]
    try:
        if os.geteuid() != 0 or subprocess.run(mount).returncode:
            pytest.skip("mounting a tmpfs needs root")
        try:
            yield folder
        finally:
            subprocess.run(["umount", str(folder)], check=True)
    finally:
        folder.rmdir()


@pytest.mark.parametrize("engine", ["mysql", "postgresql"])
def test_a_full_disk_under_the_run_directory_is_one_short_line(tiny_disk, engine):
    if engine == "postgresql":
        skip_without_pg()
    done = cli("--engine", engine, "run", "nowait", env={"TMPDIR": str(tiny_disk)})
    assert done.returncode == 3, done.stderr
    [line] = done.stderr.splitlines()
    # Before, the copy's error listed every file with both paths: 74 KB, 245 KB on one line.
    assert len(line) < 400 and "No space left on device (and " in line, line
    assert list(tiny_disk.iterdir()) == []


@pytest.mark.parametrize("args", [("--help",), ("run", "--help")], ids=["app", "command"])
def test_help_into_a_full_device_is_one_line_exit_4(args):
    """click's probe of the stream (is it binary?) met the full device first and went on: the
    help then went to /dev/null, exit 0, as if it had been written."""
    with open("/dev/full", "w") as full:
        code, err = run_with_stdout(full, {}, *args)
    assert (code, err.splitlines()) == (4, ["jobqueue-demo: cannot write standard output: No space left on device"])


def test_an_output_encoding_without_a_character_writes_it_out(embedded):
    """PYTHONIOENCODING=ascii: the lesson's em dash ended the run with a traceback mid-line."""
    env = {**{k: v for k, v in os.environ.items() if k != "JOBQUEUE_DEMO_DSN"}, **dsn_env(embedded), "PYTHONIOENCODING": "ascii"}
    done = subprocess.run([sys.executable, "-m", "jobqueue_demo", "run", "skip-locked"], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "\\u2014" in done.stdout and "Traceback" not in done.stderr


def test_a_peer_that_answers_with_control_characters_has_them_written_out():
    """Not a server at all: whatever listens on the DSN's port answers with an escape sequence,
    which libpq's error, and so the error line, quoted raw (a terminal would have cleared its
    screen). Every line on standard error now goes through the same escaping."""
    import socket
    import threading

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def answer() -> None:
        while True:
            try:
                peer, _ = listener.accept()
            except OSError:
                return
            with peer:
                peer.sendall(b"\x1b[2J\x07hostile")

    threading.Thread(target=answer, daemon=True).start()
    try:
        done = subprocess.run([sys.executable, "-m", "jobqueue_demo", "run", "skip-locked", "--dsn", f"postgresql://root@127.0.0.1:{port}/test",
                               "--step-timeout", "2"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    finally:
        listener.close()
    assert done.returncode == 3, done.stderr
    assert "\x1b" not in done.stderr and "\x07" not in done.stderr, repr(done.stderr)
    assert len(done.stderr.splitlines()) == 1, done.stderr


@pytest.mark.parametrize(
    "args, code",
    [(("run", "/no/such/lesson.yaml"), 2), (("run", "skip-locked", "--dsn", "mysql://root@127.0.0.1:1/x"), 3),
     (("run", "skip-locked", "--step-timeout", "0"), 2)],
    ids=["bad-file", "no-server", "bad-option"],
)
def test_a_closed_stderr_keeps_the_exit_code_and_stdout_clean(args, code):
    """Started with descriptor 2 closed: every error ended with exit 1 (Python's own, on a
    message it could not print), and click's usage lines went to standard output."""
    done = subprocess.run(["sh", "-c", 'exec "$@" 2>&-', "sh", sys.executable, "-m", "jobqueue_demo", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert (done.returncode, done.stdout) == (code, "")
