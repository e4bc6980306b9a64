"""export -o and record replace files safely: regular files only, through symlinks, keeping
the mode, with a temporary name of their own; record writes only text that loads."""

from __future__ import annotations

import os
import stat

import pytest

from conftest import cli, dsn_env
from jobqueue_demo.errors import UsageError
from jobqueue_demo.scenario.loader import load_scenario
from jobqueue_demo.safe_write import write_file

FLOW_STEPS = """\
title: Flow-style steps
sessions: [A, B]
steps:
  - {A: "SELECT 1;"}
  - {B: "SELECT 2 AS x, 'y z' AS w;" }
"""

FLOW_LIST = """\
title: A flow-style step list
sessions: [A]
steps: [{A: "SELECT 1;"}, {A: "SELECT seq FROM seq_1_to_3;", expect: ok}, {A: "DO 1;"}]
"""


@pytest.mark.parametrize("target", ["/dev/null", "fifo", "folder"])
def test_export_writes_only_regular_files(tmp_path, target):
    if target == "fifo":
        os.mkfifo(tmp_path / "fifo")
    if target == "folder":
        (tmp_path / "folder").mkdir()
    path = target if target.startswith("/") else str(tmp_path / target)
    before = os.stat(path)
    # Refused before any server is started.
    done = cli("export", "nowait", "-o", path, env={"JOBQUEUE_DEMO_DSN": "mysql://root@127.0.0.1:1/"})
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and path in done.stderr
    after = os.stat(path)
    assert (after.st_mode, after.st_ino, after.st_rdev) == (before.st_mode, before.st_ino, before.st_rdev)


def test_write_goes_through_a_symlink_and_keeps_the_mode(tmp_path):
    real = tmp_path / "real.html"
    real.write_text("old")
    real.chmod(0o640)
    link = tmp_path / "link.html"
    link.symlink_to("real.html")
    write_file(str(link), "new")
    assert link.is_symlink() and real.read_text() == "new"
    assert stat.S_IMODE(real.stat().st_mode) == 0o640


def test_a_file_named_like_the_old_temporary_is_left_alone(tmp_path):
    page = tmp_path / "page.html"
    (tmp_path / "page.html.tmp").write_text("mine")
    write_file(str(page), "new")
    assert page.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["page.html", "page.html.tmp"]
    assert (tmp_path / "page.html.tmp").read_text() == "mine"


def test_a_new_file_gets_the_umask_mode(tmp_path):
    old = os.umask(0o027)
    try:
        write_file(str(tmp_path / "new.md"), "text")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new.md").stat().st_mode) == 0o640


def test_a_failed_write_leaves_no_temporary_behind(tmp_path):
    folder = tmp_path / "gone"
    with pytest.raises(UsageError, match="no such directory"):
        write_file(str(folder / "page.html"), "x")
    assert list(tmp_path.iterdir()) == []


def test_record_writes_through_a_symlink_keeping_the_mode(tmp_path, embedded):
    real = tmp_path / "real.yaml"
    real.write_text(FLOW_STEPS)
    real.chmod(0o640)
    (tmp_path / "real.yaml.tmp").write_text("mine")
    link = tmp_path / "link.yaml"
    link.symlink_to(real)
    done = cli("record", str(link), env=dsn_env(embedded))
    assert done.returncode == 0, done.stderr
    assert link.is_symlink() and "verified:" in real.read_text()
    assert stat.S_IMODE(real.stat().st_mode) == 0o640
    assert (tmp_path / "real.yaml.tmp").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.yaml", "real.yaml", "real.yaml.tmp"]


@pytest.mark.parametrize("text", [FLOW_STEPS, FLOW_LIST], ids=["flow-steps", "flow-list"])
def test_record_keeps_flow_style_steps_valid(tmp_path, embedded, text):
    path = tmp_path / "flow.yaml"
    path.write_text(text)
    for _ in range(2):  # recording again replaces the expectations it wrote
        done = cli("record", str(path), env=dsn_env(embedded))
        assert done.returncode == 0, done.stderr
    recorded = load_scenario(str(path))
    assert all(step.expect is not None for _, step in recorded.statements())
    done = cli("verify", str(path), env=dsn_env(embedded))
    assert done.returncode == 0, done.stdout + done.stderr


def test_record_leaves_the_file_alone_when_its_text_would_not_load(tmp_path, embedded):
    # A trailing comma in a flow step: the expectation lands after it, and the text no
    # longer parses. (Any rewrite the loader refuses must end here, not in the file.)
    path = tmp_path / "comma.yaml"
    text = FLOW_STEPS.replace('{A: "SELECT 1;"}', '{A: "SELECT 1;",}')
    path.write_text(text)
    done = cli("record", str(path), env=dsn_env(embedded))
    assert done.returncode == 2, done.stderr
    assert "would not load" in done.stderr and "left unchanged" in done.stderr
    assert path.read_text() == text
    assert [p.name for p in tmp_path.iterdir()] == ["comma.yaml"]


# -- a path another local user prepared ---------------------------------------------------

OTHER, ANOTHER = 65534, 65533  # uids that are not ours
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="making files of another user needs root")


def _shared(tmp_path, owner: int | None = None):
    """A sticky world-writable directory, as /tmp, and a file of ours elsewhere."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    if owner is not None:
        os.chown(shared, owner, owner)
    victim = tmp_path / "private" / "notes.txt"
    victim.parent.mkdir()
    victim.write_text("mine")
    return shared, victim


def _planted(link, target, uid: int):
    link.symlink_to(target)
    os.lchown(link, uid, uid)
    return link


@as_root
def test_export_refuses_a_symlink_another_user_planted_in_a_shared_directory(tmp_path):
    shared, victim = _shared(tmp_path)
    page = _planted(shared / "page.html", victim, OTHER)
    done = cli("export", "nowait", "-o", str(page), env={"JOBQUEUE_DEMO_DSN": "mysql://root@127.0.0.1:1/"})
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "another user (uid 65534)" in done.stderr and "refusing to follow" in done.stderr
    with pytest.raises(UsageError, match="refusing to follow"):
        write_file(str(page), "theirs")
    assert victim.read_text() == "mine" and page.is_symlink()


@as_root
@pytest.mark.parametrize(
    "made",
    [
        "a directory of the path",  # shared/dir -> private: shared/dir/notes.txt
        "a link to a link",  # a link of ours in a private directory leads to theirs
        "a file of theirs",  # protected_regular: their file, replaced, would stay theirs with our text
    ],
)
def test_what_another_user_made_in_a_shared_directory_is_refused(tmp_path, made):
    shared, victim = _shared(tmp_path)
    if made == "a directory of the path":
        path = _planted(shared / "dir", victim.parent, OTHER) / "notes.txt"
    elif made == "a link to a link":
        path = tmp_path / "private" / "page.html"
        path.symlink_to(_planted(shared / "hop", victim, OTHER))
    else:
        path = shared / "page.html"
        path.write_text("theirs")
        os.chown(path, OTHER, OTHER)
    with pytest.raises(UsageError, match="another user"):
        write_file(str(path), "new")
    assert victim.read_text() == "mine"


@as_root
@pytest.mark.parametrize("case", ["our own link", "the directory owner's link", "a link in a directory not sticky"])
def test_links_the_kernel_follows_are_followed(tmp_path, case):
    shared, victim = _shared(tmp_path, owner=ANOTHER if case == "the directory owner's link" else None)
    if case == "a link in a directory not sticky":
        shared.chmod(0o777)
    uid = {"our own link": os.geteuid(), "the directory owner's link": ANOTHER}.get(case, OTHER)
    write_file(str(_planted(shared / "page.html", victim, uid)), "new")
    assert victim.read_text() == "new"


def test_export_creates_no_file_among_devices(tmp_path):
    done = cli("export", "nowait", "-o", "/dev/stdout.html", env={"JOBQUEUE_DEMO_DSN": "mysql://root@127.0.0.1:1/"})
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "/dev holds devices" in done.stderr
    assert not os.path.lexists("/dev/stdout.html")
    with pytest.raises(UsageError, match="/proc holds devices"):
        write_file(f"/proc/{os.getpid()}/page.md", "x")
