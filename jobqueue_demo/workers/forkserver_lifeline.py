"""Imported only inside the multiprocessing forkserver, as a preload: ties it to the run's process.

The workers, forked from the forkserver, inherit `PID` and compare their parent with it.
"""

from __future__ import annotations

import os

from .lifeline import RUN_PID_ENV, die_with_parent

PID = os.getpid()
die_with_parent(int(os.environ.get(RUN_PID_ENV) or 0))
