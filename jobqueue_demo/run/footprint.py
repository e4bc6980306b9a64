"""`--show-locks`: how many rows each statement locked, set against how many it returned.

The engine counts the record locks each transaction holds (engine/mysql/waits.py says how, and
what is counted); read right after each statement answers, the growth since that session's
previous statement is what this statement locked.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..engine.seam import WaitMonitor
from ..errors import UsageError
from . import events as ev


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
        now = self.monitor.record_locks_held().get(self.sessions[event.session].thread_id, 0)
        before = self.held.get(event.session, 0)
        self.held[event.session] = now
        if now <= before:
            return None
        return ev.LocksTaken(event.index, event.session, returned(event.result), event.result.is_rows, now - before, now)
