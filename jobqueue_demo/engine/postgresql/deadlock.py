"""The deadlock a 40P01 broke, as a DeadlockCycle (deadlock.py), from what the wait monitor
saw while the cycle stood.

PostgreSQL prints the cycle only to its server log (and in the error's DETAIL, as text). But
it breaks a cycle only after deadlock_timeout, and until then the settle step sees it: the
wait monitor keeps each backend's wait (pg_waits.in_cycle), and this turns that into the
parties of the cycle, numbered in backend order, so the transcript, the JSON events and the
lesson page tell a PostgreSQL deadlock as they tell InnoDB's.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..types import WHOLE_TABLE, DeadlockCycle, Lock, Party

ROW = "row"


def read_deadlock(monitor, sessions: Mapping[int, str], victim: int) -> DeadlockCycle | None:
    """The cycle that just rolled back backend `victim`; None when the monitor saw none with it."""
    waits, monitor.cycle = monitor.cycle, None
    if not waits or victim not in waits:
        return None
    numbers = {pid: n for n, pid in enumerate(sorted(waits), 1)}
    parties = tuple(
        Party(numbers[pid], pid, seen.statement, _lock(seen), None, numbers.get(blocked_by))
        for pid, (seen, blocked_by) in sorted(waits.items())
    )
    return DeadlockCycle(parties, numbers[victim]).named(sessions)


def _lock(seen) -> Lock:
    if seen.locktype == "relation":
        return Lock(seen.relation, "", seen.mode, WHOLE_TABLE)
    if seen.locktype == "tuple":
        return Lock(seen.relation, "", seen.mode, ROW, seen.row)
    return Lock(seen.relation, "", seen.mode, seen.locktype)
