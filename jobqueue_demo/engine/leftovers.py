"""What killed runs left behind, found and removed without touching anything a live run uses.

On a server, each engine sweeps its own (mysql/leftovers.py, postgresql/scratch.py): databases
`jqd_<16 hex>` (and their `_s` snapshot copies) and per-run users or roles of the same name,
whose run's lock is free; the sweep takes that lock itself before dropping, so a run cannot be
both judged dead and alive. Here: what a sweep found (`Found`, `Sweep`), and on this machine: the embedded servers' `jobqueue-demo-*` directories and multiprocessing's
`pymp-*` directories that carry a marker (owner.py) whose lock is free.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .owner import MARKER, claim_if_dead
from .shm import release_segment

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


# How long a directory of ours without its marker is left alone: a run marks the directory it
# made within microseconds (owner.hold), so one untouched this long was made by a run killed
# in between.
UNMARKED_STALE_S = 60.0


def _sweep_dir(path: Path, fd: int, dry_run: bool, out: Sweep) -> None:
    handle = claim_if_dead(fd)
    if handle is None:
        _sweep_unmarked(path, fd, dry_run, out)  # alive, not ours, or never marked
        return
    try:
        if not dry_run:
            # A killed embedded PostgreSQL's shared memory, read through the descriptor: the
            # name in /tmp may be another user's symlink by now.
            release_segment(Path(f"/proc/self/fd/{fd}") / "data")
            _remove_marked(path, fd)
        out.found.append(Found("directory", str(path), done(dry_run), GONE))
    finally:
        handle.close()


def _sweep_unmarked(path: Path, fd: int, dry_run: bool, out: Sweep) -> None:
    """A directory of this user's that holds nothing but, at most, a marker never renamed into
    place (owner.hold's `MARKER.<pid>`), untouched for UNMARKED_STALE_S: its run was killed
    between making it and marking it, and no marker will ever say so. Anything else in it, or
    another user's, is left as it is."""
    found = os.fstat(fd)
    if found.st_uid != os.getuid() or time.time() - found.st_mtime < UNMARKED_STALE_S:
        return
    names = os.listdir(fd)
    if not all(name.startswith(f"{MARKER}.") for name in names):
        return
    if not dry_run:
        with contextlib.suppress(OSError):  # a run that wrote into it meanwhile keeps it: rmdir fails
            for name in names:
                os.unlink(name, dir_fd=fd)
            os.rmdir(path)
    out.found.append(Found("directory", str(path), done(dry_run), "never marked: its run died making it"))


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
