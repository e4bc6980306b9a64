"""Why a workers run stopped completing jobs: the waits-for picture, read from the server.

When no job completes for the stall window the run ends with exit 1, and this says who waits
for whom, in which lock mode, on which index record, and how many rows each waiter has
locked. MariaDB: INFORMATION_SCHEMA.INNODB_LOCK_WAITS / INNODB_LOCKS / INNODB_TRX, plus the
waiting lock's full mode ("X insert intention", "X locks gap before rec") from SHOW ENGINE
INNODB STATUS, which the tables shorten to "X". MySQL 8 (written from its manual, not run
here): performance_schema.data_lock_waits and data_locks, whose LOCK_MODE is already full
(e.g. "X,INSERT_INTENTION").
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

from ..errors import ServerError, StuckError
from ..engine.waits import THREAD_ID, TRX_HEADER

WAITING_MODE = re.compile(r"trx id \d+ (lock[ _]mode \S+[^\n]*?) waiting")


@dataclass(frozen=True)
class LockWait:
    waiter: str  # "worker 3", or "thread 812" for a connection that is not a worker of this run
    blocker: str
    mode: str  # the waiting lock's mode, as complete as the server tells it
    blocking_mode: str
    table: str
    index: str
    record: str  # the index record, e.g. "supremum pseudo-record" or "'queued', 779"
    waiter_rows_locked: int
    waiter_lock_structs: int
    waiter_active_s: int
    statement: str

    def line(self) -> str:
        return (
            f"{self.waiter} (trx active {self.waiter_active_s} s, {self.waiter_rows_locked:,} rows locked, "
            f"{self.waiter_lock_structs:,} lock structs) in {self.statement} waits for {self.mode} "
            f"on {self.table}.{self.index} record {self.record}"
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


class WorkersStuck(StuckError):
    """No job completed for the stall window; `diagnosis` says what the workers wait for."""

    def __init__(self, message: str, diagnosis: Diagnosis):
        super().__init__(message)
        self.diagnosis = diagnosis


def diagnose(scratch, threads: dict[int, int]) -> Diagnosis:
    """The lock waits of the run's workers (`threads`: server thread id -> worker index)."""
    if not threads:
        return Diagnosis(note="no worker is running")
    try:
        if scratch.server.flavor == "MySQL":
            waits = _mysql_waits(scratch, threads)
        else:
            waits = _mariadb_waits(scratch, threads, _waiting_modes(scratch))
    except ServerError as exc:
        # e.g. a DSN user without PROCESS: the stall is still reported, with what is missing.
        return Diagnosis(note=f"the server did not show its locks ({exc})")
    return Diagnosis(waits=sorted(waits, key=lambda w: (-w.waiter_active_s, w.waiter)), note=_note(waits))


def _name(thread, threads: dict[int, int]) -> str:
    if thread is None:
        return "a transaction with no client thread"
    thread = int(thread)
    return f"worker {threads[thread]}" if thread in threads else f"thread {thread} (not a worker of this run)"


def _text(value) -> str:
    if value is None:
        return ""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _waiting_modes(scratch) -> dict[int, tuple[str, str]]:
    """Thread id -> (the full mode of the lock it waits for, its monitor block), from the InnoDB monitor's text."""
    text = _text(scratch.rows("SHOW ENGINE INNODB STATUS")[0][-1])
    out = {}
    starts = [m.start() for m in TRX_HEADER.finditer(text)] + [len(text)]
    for begin, end in zip(starts, starts[1:]):
        block = text[begin:end]
        thread, mode = THREAD_ID.search(block), WAITING_MODE.search(block)
        if thread and mode:
            full = mode.group(1).replace("lock_mode ", "").replace("lock mode ", "")
            out[int(thread.group(1))] = (full, " ".join(block.split()))
    return out


def _full_mode(modes: dict[int, tuple[str, str]], thread, query) -> str | None:
    """The monitor's mode, if its text shows the same statement waiting (the tables are read at another moment)."""
    found = modes.get(int(thread))
    statement = " ".join(_text(query).split())
    return found[0] if found and statement and statement in found[1] else None


def _mariadb_waits(scratch, threads: dict[int, int], modes: dict[int, tuple[str, str]]) -> list[LockWait]:
    rows = scratch.rows(
        "SELECT r.trx_mysql_thread_id, b.trx_mysql_thread_id, rl.lock_mode, bl.lock_mode, rl.lock_table,"
        " rl.lock_index, rl.lock_data, r.trx_rows_locked, r.trx_lock_structs,"
        " TIMESTAMPDIFF(SECOND, r.trx_started, NOW()), r.trx_query"
        " FROM information_schema.INNODB_LOCK_WAITS w"
        " JOIN information_schema.INNODB_TRX r ON r.trx_id = w.requesting_trx_id"
        " JOIN information_schema.INNODB_TRX b ON b.trx_id = w.blocking_trx_id"
        " JOIN information_schema.INNODB_LOCKS rl ON rl.lock_id = w.requested_lock_id"
        " JOIN information_schema.INNODB_LOCKS bl ON bl.lock_id = w.blocking_lock_id"
        f" WHERE r.trx_mysql_thread_id IN ({', '.join(str(int(t)) for t in threads)})"
    )
    return [_wait(row, threads, _full_mode(modes, row[0], row[-1])) for row in rows]


def _mysql_waits(scratch, threads: dict[int, int]) -> list[LockWait]:
    rows = scratch.rows(
        "SELECT rt.PROCESSLIST_ID, bt.PROCESSLIST_ID, rl.LOCK_MODE, bl.LOCK_MODE,"
        " CONCAT(rl.OBJECT_SCHEMA, '.', rl.OBJECT_NAME), rl.INDEX_NAME, rl.LOCK_DATA,"
        " r.trx_rows_locked, r.trx_lock_structs, TIMESTAMPDIFF(SECOND, r.trx_started, NOW()), r.trx_query"
        " FROM performance_schema.data_lock_waits w"
        " JOIN performance_schema.data_locks rl ON rl.ENGINE_LOCK_ID = w.REQUESTING_ENGINE_LOCK_ID"
        " JOIN performance_schema.data_locks bl ON bl.ENGINE_LOCK_ID = w.BLOCKING_ENGINE_LOCK_ID"
        " JOIN performance_schema.threads rt ON rt.THREAD_ID = w.REQUESTING_THREAD_ID"
        " JOIN performance_schema.threads bt ON bt.THREAD_ID = w.BLOCKING_THREAD_ID"
        " JOIN information_schema.INNODB_TRX r ON r.trx_mysql_thread_id = rt.PROCESSLIST_ID"
        f" WHERE rt.PROCESSLIST_ID IN ({', '.join(str(int(t)) for t in threads)})"
    )
    return [_wait(row, threads, None) for row in rows]


def _wait(row: tuple, threads: dict[int, int], full_mode: str | None) -> LockWait:
    waiter, blocker, mode, blocking_mode, table, index, record, rows_locked, structs, active, query = row
    return LockWait(
        waiter=_name(waiter, threads),
        blocker=_name(blocker, threads),
        mode=full_mode or _text(mode),
        blocking_mode=_text(blocking_mode),
        table=_text(table).replace("`", "").rpartition(".")[2],
        index=_text(index),
        record=_text(record) or "(not shown by the server)",
        waiter_rows_locked=int(rows_locked or 0),
        waiter_lock_structs=int(structs or 0),
        waiter_active_s=int(active or 0),
        statement=" ".join(_text(query).split()) or "(between statements)",
    )


def _note(waits: list[LockWait]) -> str:
    """Name the shape docs/workers.md explains when the picture shows it."""
    if any("insert intention" in w.mode.lower().replace("_", " ") and "supremum" in w.record for w in waits):
        return (
            "completions wait with an insert-intention lock on the supremum of an index page that "
            "claims gap-locked under REPEATABLE READ: see 'The livelock' in docs/workers.md"
        )
    return ""
