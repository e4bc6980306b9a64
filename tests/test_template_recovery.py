"""A damaged template cache is rebuilt once, with a line saying so; Ctrl-C during the first
build stops mariadb-install-db and its bootstrap server. Only a private cache is damaged."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, cli

from jobqueue_demo.engine.mysql.embedded import EmbeddedServer, ServerError, find_server_binary


@pytest.fixture(scope="module")
def built_cache(tmp_path_factory) -> Path:
    """One good template, copied for each test to damage."""
    try:
        find_server_binary()
    except ServerError as exc:
        pytest.skip(f"no server binary: {exc}")
    cache = tmp_path_factory.mktemp("good-cache")
    done = cli("run", "nowait", env={"XDG_CACHE_HOME": str(cache)})
    assert done.returncode == 0, done.stderr
    return cache


def damage_truncate_ibdata1(template: Path) -> None:
    os.truncate(template / "datadir" / "ibdata1", 0)


def damage_truncate_redo_log(template: Path) -> None:
    os.truncate(template / "datadir" / "ib_logfile0", 100)


def damage_random_bytes(template: Path) -> None:
    with open(template / "datadir" / "ibdata1", "r+b") as f:
        f.write(os.urandom(1 << 20))


def damage_remove_privilege_tables(template: Path) -> None:
    for path in (template / "datadir" / "mysql").glob("global_priv.*"):
        path.unlink()


def damage_empty_metadata(template: Path) -> None:
    (template / "template.json").write_text("{}")


def private_copy(built_cache: Path, tmp_path: Path) -> tuple[Path, Path]:
    cache = tmp_path / "cache"
    shutil.copytree(built_cache, cache)
    (template,) = [p for p in (cache / "jobqueue-demo").iterdir() if p.is_dir()]
    return cache, template


@pytest.mark.parametrize(
    "damage",
    # A truncated redo log is the CLI test's case, below.
    [damage_truncate_ibdata1, damage_random_bytes, damage_remove_privilege_tables, damage_empty_metadata],
    ids=lambda f: f.__name__.removeprefix("damage_"),
)
def test_a_damaged_template_is_rebuilt_once(built_cache, tmp_path, monkeypatch, caplog, damage):
    cache, template = private_copy(built_cache, tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    damage(template)
    with EmbeddedServer() as server:
        server.params.connect().close()
    notes = [r.getMessage() for r in caplog.records if "rebuilding the cached server template once" in r.getMessage()]
    assert len(notes) == 1, caplog.text
    assert sorted(p.name for p in (cache / "jobqueue-demo").iterdir()) == [template.name, f"{template.name}.lock"]
    caplog.clear()
    with EmbeddedServer():
        pass
    assert "rebuilding" not in caplog.text


def test_the_cli_says_in_one_line_that_it_rebuilds(built_cache, tmp_path):
    cache, template = private_copy(built_cache, tmp_path)
    damage_truncate_redo_log(template)
    done = cli("run", "nowait", env={"XDG_CACHE_HOME": str(cache)})
    assert done.returncode == 0, done.stderr
    (note,) = [line for line in done.stderr.splitlines() if line.startswith("jobqueue-demo: ")]
    assert "ib_logfile0" in note and note.endswith("rebuilding the cached server template once")


def building(cache: Path, tmp: Path) -> subprocess.Popen:
    """A run building the cached template, caught while its bootstrap server writes the system
    tables: in a work dir under TMPDIR (`tmp`), which the servers' own user may enter."""
    env = {k: v for k, v in os.environ.items() if k != "JOBQUEUE_DEMO_DSN"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobqueue_demo", "run", "nowait"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True, env={**env, "XDG_CACHE_HOME": str(cache), "TMPDIR": str(tmp)}, cwd=ROOT,
    )
    deadline = time.monotonic() + 30
    while not list(tmp.glob("jobqueue-demo-install-*/datadir/mysql")) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert proc.poll() is None, "the build finished before it could be interrupted"
    return proc


def _running_from(folder: Path) -> dict[int, str]:
    found = subprocess.run(["pgrep", "-af", str(folder)], capture_output=True, text=True).stdout.splitlines()
    return {int(line.split()[0]): line for line in found}


def test_a_killed_first_build_leaves_no_installer_running(tmp_path, server_tmp):
    """kill -9 runs no clean-up of ours: the installer, its subshells and its bootstrap server
    must die with the run. The bootstrap server is held stopped, so it cannot end on its own
    when its input closes (before, it and the installer finished the build 1-3 s later)."""
    cache = tmp_path / "cache"
    proc = building(cache, server_tmp)
    [bootstrap] = [pid for pid, line in _running_from(server_tmp).items() if "--bootstrap" in line]
    os.kill(bootstrap, signal.SIGSTOP)
    proc.kill()
    proc.communicate(timeout=30)
    deadline = time.monotonic() + 10
    try:
        while left := _running_from(server_tmp):
            assert time.monotonic() < deadline, left
            time.sleep(0.05)
    finally:
        for pid in _running_from(server_tmp):
            os.kill(pid, signal.SIGKILL)


def test_ctrl_c_during_the_first_build_stops_the_installer(tmp_path, server_tmp):
    cache = tmp_path / "cache"
    proc = building(cache, server_tmp)
    assert _running_from(server_tmp)  # the installer, caught at work
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert _running_from(server_tmp) == {}
    assert [p.name for p in (cache / "jobqueue-demo").iterdir() if not p.name.endswith(".lock")] == []
