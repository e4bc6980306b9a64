"""What killed runs left behind, found and removed without touching anything a live run uses.

On a server: databases `jqd_<16 hex>` (and their `_s` snapshot copies) and per-run users of the
same name, whose run's named lock (scratch.py) is free. The sweep takes that lock itself
before dropping, so a run cannot be both judged dead and alive. Databases of older versions
(`jqd_<10 hex>`, no named lock) are only counted, never dropped: nothing proves their run is
gone.

On this machine: the embedded servers' `jobqueue-demo-*` directories and multiprocessing's
`pymp-*` directories that carry a marker (owner.py) whose lock is free.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from jobqueue_demo.engine.mysql import control
from jobqueue_demo.engine.owner import MARKER, claim_if_dead
from jobqueue_demo.engine.shm import release_segment
from jobqueue_demo.engine.mysql.scratch import DROP_LOCK_WAIT_S, drop_bounded, literal
from jobqueue_demo.engine.naming import PREFIX, RUN_NAME, SNAPSHOT_SUFFIX

OLD_NAME = re.compile(rf"{PREFIX}[0-9a-f]{{10}}({SNAPSHOT_SUFFIX})?")
DIR_PATTERNS = ("jobqueue-demo-*", "pymp-*")


REMOVED, WOULD_REMOVE, KEPT = "removed", "would remove", "kept"
GONE, ALIVE = "its run is gone", "its run is alive"


@dataclass(eq=False)
class Found:
    """One leftover: what it is, and what was done with it (REMOVED, WOULD_REMOVE or KEPT)."""

    kind: str  # database, user, directory, template, old database
    name: str
    action: str
    reason: str = ""

    def __str__(self) -> str:
        return f"{self.action} {self.kind} {self.name}" + (f" ({self.reason})" if self.reason else "")


def done(dry_run: bool) -> str:
    return WOULD_REMOVE if dry_run else REMOVED


@dataclass(eq=False)
class Sweep:
    """What a sweep found, and what it could not remove (as messages)."""

    found: list[Found] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def run_name(database: str) -> str | None:
    """The run a database belongs to, when it is of the swept pattern."""
    base = database.removesuffix(SNAPSHOT_SUFFIX)
    return base if RUN_NAME.fullmatch(base) else None


def sweep_server(conn, dry_run: bool = False) -> Sweep:
    """Drop the databases and users of runs whose named lock is free."""
    out = Sweep()
    databases = [control.text(r[0]) for r in control.rows(conn, "SHOW DATABASES LIKE 'jqd\\_%'")]
    users = _users(conn)
    runs: dict[str, list[tuple[str, str]]] = {}
    for name in databases:
        run = run_name(name)
        if run is not None:
            runs.setdefault(run, []).append(("database", name))
        elif OLD_NAME.fullmatch(name):
            out.found.append(Found("old database", name, KEPT, "older jobqueue-demo, no named lock: not swept"))
    for user, host in users:
        runs.setdefault(user, []).append(("user", f"{literal(user)}@{literal(host)}"))
    if runs and not dry_run:
        control.execute(conn, f"SET SESSION lock_wait_timeout = {DROP_LOCK_WAIT_S}")
    for run, items in sorted(runs.items()):
        _sweep_run(conn, run, items, dry_run, out)
    return out


def _users(conn) -> list[tuple[str, str]]:
    try:
        found = control.rows(conn, "SELECT User, Host FROM mysql.user WHERE User LIKE 'jqd\\_%'")
    except control.ControlError as e:
        if e.errno in control.PRIVILEGE_ERRORS:
            return []  # a user that cannot read the accounts made none either
        raise
    pairs = [(control.text(u), control.text(h)) for u, h in found]
    return [(u, h) for u, h in pairs if RUN_NAME.fullmatch(u)]


def _sweep_run(conn, run: str, items: list[tuple[str, str]], dry_run: bool, out: Sweep) -> None:
    if dry_run:
        dead = control.flag(conn, f"SELECT IS_FREE_LOCK({literal(run)})")
        out.found += [Found(kind, name, WOULD_REMOVE, GONE) if dead else Found(kind, name, KEPT, ALIVE) for kind, name in items]
        return
    if not control.flag(conn, f"SELECT GET_LOCK({literal(run)}, 0)"):
        out.found += [Found(kind, name, KEPT, ALIVE) for kind, name in items]
        return
    try:
        for kind, name in sorted(items, key=lambda item: item[0]):  # databases before the user
            try:
                if kind == "database":
                    drop_bounded(conn, name)
                else:
                    control.execute(conn, f"DROP USER IF EXISTS {name}")
                out.found.append(Found(kind, name, REMOVED, GONE))
            except control.ControlError as e:
                out.problems.append(str(e))
    finally:
        control.execute(conn, f"SELECT RELEASE_LOCK({literal(run)})")


def sweep_dirs(dry_run: bool = False, folder: Path | None = None) -> Sweep:
    """Remove this machine's temporary directories of runs that are gone.

    Each is opened once (never through a symlink) and everything after goes through that
    descriptor: in a shared folder such as /tmp another user may rename the directory and
    put a symlink to theirs, or to anyone's, in its place between two steps of the sweep.
    """
    out = Sweep()
    root = folder or Path(tempfile.gettempdir())
    for pattern in DIR_PATTERNS:
        for path in sorted(root.glob(pattern)):
            try:
                fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
            except OSError:
                continue  # not a directory, a symlink, or gone
            try:
                _sweep_dir(path, fd, dry_run, out)
            finally:
                os.close(fd)
    return out


def _sweep_dir(path: Path, fd: int, dry_run: bool, out: Sweep) -> None:
    handle = claim_if_dead(fd)
    if handle is None:
        return  # alive, or not ours
    try:
        if not dry_run:
            # A killed embedded PostgreSQL's shared memory, read through the descriptor: the
            # name in /tmp may be another user's symlink by now.
            release_segment(Path(f"/proc/self/fd/{fd}") / "data")
            _remove_marked(path, fd)
        out.found.append(Found("directory", str(path), done(dry_run), GONE))
    finally:
        handle.close()


def _remove_marked(folder: Path, fd: int) -> None:
    """The directory open as `fd` with everything in it, its marker last: a sweep interrupted
    halfway leaves the marker with the rest, so the next sweep still knows whose the rest is."""
    with contextlib.suppress(OSError):  # what cannot be removed stays, as rmtree's ignore_errors
        for entry in os.scandir(fd):
            if entry.name == MARKER:
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.name, ignore_errors=True, dir_fd=fd)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(entry.name, dir_fd=fd)
        if os.listdir(fd) == [MARKER]:  # anything left keeps its marker for the next sweep
            os.unlink(MARKER, dir_fd=fd)
            os.rmdir(folder)  # an empty directory, or nothing: rmdir follows no symlink


def sweep_cache(root: Path, dry_run: bool = False) -> Sweep:
    """Remove the cached server templates, except one being built (its build lock is held)."""
    import fcntl

    out = Sweep()
    if not root.is_dir():
        return out
    for path in sorted(p for p in root.iterdir() if p.is_dir()):
        key = path.name.split(".build-")[0]
        with open(root / f"{key}.lock", "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                out.found.append(Found("template", str(path), KEPT, "being built"))
                continue
            if not dry_run:
                shutil.rmtree(path, ignore_errors=True)
            out.found.append(Found("template", str(path), done(dry_run)))
    return out
