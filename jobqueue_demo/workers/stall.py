"""Why a workers run stopped completing jobs: the waits-for picture, read from the server.

When no job completes for the stall window the run ends with exit 1, and this says who waits
for whom, in which lock mode, on which index record, and how many rows each waiter has
locked. The server's lock tables are read by the engine (engine/queue_sql.py's `lock_waits`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..engine.lock_waits import as_text
from ..errors import ServerError


@dataclass(frozen=True)
class LockWait:
    waiter: str  # "worker 3", or "thread 812" for a connection that is not a worker of this run
    blocker: str
    mode: str  # the waiting lock's mode, as complete as the server tells it
    blocking_mode: str
    table: str
    index: str
    record: str  # the index record, e.g. "supremum pseudo-record" or "'queued', 779"
    waiter_rows_locked: int | None  # None where the server keeps no count (PostgreSQL)
    waiter_lock_structs: int | None
    waiter_active_s: int
    statement: str

    def line(self) -> str:
        counts = "".join(
            f", {n:,} {what}" for n, what in ((self.waiter_rows_locked, "rows locked"), (self.waiter_lock_structs, "lock structs"))
            if n is not None
        )
        where = f"{self.table}.{self.index}" if self.index else self.table
        return (
            f"{self.waiter} (trx active {self.waiter_active_s} s{counts}) in {self.statement} waits for {self.mode} "
            f"on {where} record {self.record}"
        )


@dataclass
class Diagnosis:
    waits: list[LockWait] = field(default_factory=list)
    note: str = ""

    def lines(self) -> list[str]:
        """One line per waiting lock, its blockers named together."""
        if not self.waits:
            return [self.note or "no worker waits for a lock: the server, not a lock, is what stalls"]
        grouped: dict[tuple, list[str]] = {}
        for w in self.waits:
            grouped.setdefault((w.line(), w.blocking_mode), []).append(w.blocker)
        lines = [f"{line}, held ({mode}) by {', '.join(blockers)}" for (line, mode), blockers in grouped.items()]
        return lines + ([self.note] if self.note else [])

    def as_dict(self) -> dict:
        return {"waits": [asdict(w) for w in self.waits], "note": self.note}


def diagnose(scratch, threads: dict[int, int]) -> Diagnosis:
    """The lock waits of the run's workers (`scratch`: crew.Scratch; `threads`: server thread id -> worker index)."""
    if not threads:
        return Diagnosis(note="no worker is running")
    try:
        waits = [_wait(row, threads, full_mode) for row, full_mode in scratch.queue.lock_waits(scratch.database, list(threads))]
    except ServerError as exc:
        # e.g. a DSN user without PROCESS: the stall is still reported, with what is missing.
        return Diagnosis(note=f"the server did not show its locks ({exc})")
    return Diagnosis(waits=sorted(waits, key=lambda w: (-w.waiter_active_s, w.waiter)), note=_note(waits))


def _name(thread, threads: dict[int, int]) -> str:
    if thread is None:
        return "a transaction with no client thread"
    thread = int(thread)
    return f"worker {threads[thread]}" if thread in threads else f"thread {thread} (not a worker of this run)"


def _wait(row: tuple, threads: dict[int, int], full_mode: str | None) -> LockWait:
    waiter, blocker, mode, blocking_mode, table, index, record, rows_locked, structs, active, query = row
    return LockWait(
        waiter=_name(waiter, threads),
        blocker=_name(blocker, threads),
        mode=full_mode or as_text(mode),
        blocking_mode=as_text(blocking_mode),
        table=as_text(table).replace("`", "").rpartition(".")[2],
        index=as_text(index),
        record=as_text(record) or "(not shown by the server)",
        waiter_rows_locked=_count(rows_locked),
        waiter_lock_structs=_count(structs),
        waiter_active_s=int(active or 0),
        statement=" ".join(as_text(query).split()) or "(between statements)",
    )


def _count(value) -> int | None:
    return None if value is None else int(value)


def _note(waits: list[LockWait]) -> str:
    """Name the shape docs/workers.md explains when the picture shows it."""
    if any("insert intention" in w.mode.lower().replace("_", " ") and "supremum" in w.record for w in waits):
        return (
            "completions wait with an insert-intention lock on the supremum of an index page that "
            "claims gap-locked under REPEATABLE READ: see 'The livelock' in docs/workers.md"
        )
    return ""
