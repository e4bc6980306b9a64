"""Worker processes die with the run's process, whatever ends it (SIGKILL included).

The chain is run process -> multiprocessing forkserver -> workers. Each link asks Linux to
SIGKILL it when its parent exits (prctl PR_SET_PDEATHSIG), then checks that the parent is
still the one it was forked by: a parent that died before the request was made would
otherwise leave it running. Elsewhere than Linux a worker of a killed run finishes the queue.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

# prctl's option from <linux/prctl.h>, as engine/throwaway.py arms the servers with it.
PR_SET_PDEATHSIG = 1
# The run's pid, read by the forkserver when it starts (it inherits the environment).
RUN_PID_ENV = "JOBQUEUE_DEMO_RUN_PID"


def die_with_parent(expected_parent: int) -> None:
    """SIGKILL this process when its parent exits; exit at once if `expected_parent` is already gone."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if expected_parent and os.getppid() != expected_parent:
        os._exit(1)
