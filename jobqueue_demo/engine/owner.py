"""Which temporary directories belong to a live run, told safely across processes.

A run holds an exclusive flock on a marker file inside each directory it makes; the kernel
drops the lock when the process ends, however it ends (SIGKILL included). A directory whose
marker lock can be taken therefore belongs to a run that is gone. The marker appears under
its final name only once locked (made under a temporary name, then renamed), so no sweep can
ever take the lock of a run that is just starting.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import BinaryIO

MARKER = ".jobqueue-demo-owner"


def hold(folder: Path) -> BinaryIO:
    """Mark `folder` as ours until the returned file is closed (or the process ends)."""
    pending = folder / f"{MARKER}.{os.getpid()}"
    handle = open(pending, "wb")
    fcntl.flock(handle, fcntl.LOCK_EX)
    os.rename(pending, folder / MARKER)
    return handle


_for_life: dict[Path, BinaryIO] = {}


def hold_for_life(folder: Path) -> None:
    """Mark `folder` as ours until this process ends (a folder made once per process)."""
    if folder not in _for_life:
        _for_life[folder] = hold(folder)


def claim_if_dead(folder_fd: int) -> BinaryIO | None:
    """The marker's lock, held, when the run of the directory open as `folder_fd` is gone;
    None when it lives or has no marker (not ours to judge: made by someone else, or by an
    older version)."""
    try:
        handle = open(os.open(MARKER, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=folder_fd), "rb")
    except OSError:
        return None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        return None
    return handle
