"""`--show-locks`: how many rows each statement locked, set against how many it returned.

InnoDB counts the record locks of each transaction (INNODB_TRX.trx_rows_locked, and the
"N row lock(s)" line of SHOW ENGINE INNODB STATUS). The status text is built on every call,
while INNODB_TRX comes from a cache refreshed only after 0.1 s without readers (see waits.py),
so the count is read from the status text right after each statement answers: the growth
since that session's previous statement is what this statement locked. The count is of index
records, so a row locked through a secondary index and the primary key counts twice, and
the next-key lock past the last entry (the supremum) counts too; the lesson text says so.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from ..engine.waits import WaitMonitor, transaction_blocks
from ..errors import UsageError
from . import events as ev

ROW_LOCKS = re.compile(r"(\d+) row lock\(s\)")


def rows_locked(status_text: str) -> dict[int, int]:
    """Thread id -> record locks its transaction holds, for transactions holding any."""
    out = {}
    for thread, block in transaction_blocks(status_text):
        count = ROW_LOCKS.search(block)
        if count:
            out[thread] = int(count.group(1))
    return out


def returned(result) -> int | None:
    """Rows a statement handed back (read) or changed (written); None for an error."""
    if result.error is not None:
        return None
    if result.is_rows:
        return len(result.rows) + result.omitted
    return result.affected or 0


class Footprint:
    """Follows a run's events, adding a LocksTaken after each statement that locked rows."""

    def __init__(self, monitor: WaitMonitor, sessions: dict):
        if not monitor.counts_row_locks:
            raise UsageError(
                "--show-locks needs the server's count of each transaction's row locks (InnoDB's); "
                "this server keeps row locks in the rows themselves and counts none"
            )
        self.monitor = monitor
        self.sessions = sessions  # the driver's, by name: a reconnect replaces an entry
        self.held: dict[str, int] = {}

    def follow(self, events: Iterator[ev.Event]) -> Iterator[ev.Event]:
        for event in events:
            yield event
            if isinstance(event, ev.Completed):
                taken = self._taken(event)
                if taken is not None:
                    yield taken

    def _taken(self, event: ev.Completed) -> ev.LocksTaken | None:
        rows = self.monitor.rows("SHOW ENGINE INNODB STATUS")
        text = rows[0][2] if rows else ""
        counts = rows_locked(text.decode("utf-8", "replace") if isinstance(text, bytes) else text)
        now = counts.get(self.sessions[event.session].thread_id, 0)
        before = self.held.get(event.session, 0)
        self.held[event.session] = now
        if now <= before:
            return None
        return ev.LocksTaken(event.index, event.session, returned(event.result), event.result.is_rows, now - before, now)
