"""The shared memory a killed PostgreSQL leaves behind.

PostgreSQL removes its System V segment (a small interlock; the main area is an anonymous
mapping) on any shutdown it runs itself. A postmaster killed with SIGKILL leaves it, one
segment a run, until the machine restarts; its key and id stay in postmaster.pid, which the
killed postmaster leaves too. The embedded server's dynamic shared memory is kept in files of
its data directory (dynamic_shared_memory_type=mmap, postgresql/embedded.py), which go with it.
"""

from __future__ import annotations

import time
from pathlib import Path

# postmaster.pid's seventh line: "<key> <shmid>" of the segment.
SEGMENT_LINE = 6
# A killed postmaster's backends are killed with it; their exit detaches them within ms.
DETACH_WAIT_S = 1.0
IPC_RMID = 0


def release_segment(datadir: Path) -> None:
    """Remove the System V segment recorded in `datadir`'s postmaster.pid once no process is
    attached to it: the postmaster that made it is gone. One still in use is left alone."""
    try:
        lines = (datadir / "postmaster.pid").read_text().splitlines()
        key, shmid = (int(field) for field in lines[SEGMENT_LINE].split())
    except (OSError, IndexError, ValueError):
        return  # a clean shutdown removed both, or it never got that far
    deadline = time.monotonic() + DETACH_WAIT_S
    while (attached := _attached(key, shmid)) != 0:
        if attached is None or time.monotonic() > deadline:
            return
        time.sleep(0.01)
    import ctypes

    ctypes.CDLL(None, use_errno=True).shmctl(shmid, IPC_RMID, None)


def _attached(key: int, shmid: int) -> int | None:
    """How many processes the segment has attached, None when there is no such segment."""
    try:
        rows = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    except OSError:
        return None
    for row in rows:
        fields = row.split()
        if int(fields[0]) == key and int(fields[1]) == shmid:
            return int(fields[6])
    return None
