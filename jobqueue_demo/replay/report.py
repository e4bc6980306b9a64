"""What a deadlock report says, whichever engine printed it: the transactions of the cycle,
the statement each was running, the lock each waited for and held, and the victim."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import ReportError

MAX_REPORT_BYTES = 1 << 20


@dataclass(frozen=True)
class Field:
    """One field of an InnoDB record as the report prints it: its bytes (None for SQL NULL),
    and whether InnoDB printed only its first bytes of a longer value."""

    data: bytes | None
    truncated: bool = False


@dataclass(frozen=True)
class Record:
    """A record a lock is on: the supremum pseudo-record, or an index entry's fields; on
    PostgreSQL a tuple's place, e.g. (0,2)."""

    supremum: bool = False
    fields: tuple[Field, ...] = ()
    tuple_id: str = ""
    heap_no: str = ""


@dataclass(frozen=True)
class ReportLock:
    table: str
    index: str  # "" for a table lock, or on PostgreSQL
    mode: str  # X, S, IX...; on PostgreSQL ShareLock, ExclusiveLock...
    kind: str  # engine/types.py's words: record, next-key, gap, insert intention, table; on PostgreSQL pg_locks' locktype
    record: Record | None = None
    trx_id: str = ""
    place: tuple = ()  # space, page, heap no (InnoDB): the same record in two lock lines
    database: str = ""

    def text(self) -> str:
        """E.g. "X next-key lock on jobs state_id", "ShareLock on a transaction"."""
        if self.kind == "transactionid":  # PostgreSQL: a row is waited for through the transaction holding it
            place = f" {self.record.tuple_id}" if self.record is not None and self.record.tuple_id else ""
            return f"{self.mode} on the transaction holding {self.table or 'a row'}{place}"
        if not self.index:
            return f"{self.mode} {self.kind} lock" + (f" on {self.table}" if self.table else "")
        where = " (supremum)" if self.record is not None and self.record.supremum else ""
        return f"{self.mode} {self.kind} lock on {self.table} {self.index}{where}"


@dataclass(frozen=True)
class ReportParty:
    number: int  # the report's own numbering, (1), (2)...
    trx_id: str
    thread_id: str  # thread id (InnoDB), process id (PostgreSQL)
    statement: str
    waits: ReportLock | None
    holds: ReportLock | None  # the lock of its own that another party of the cycle waits for
    blocked_by: int | None = None  # the number of the party holding what it waits for


@dataclass(frozen=True)
class DeadlockReport:
    engine: str  # the registry name of the engine that printed it
    form: str  # e.g. "MariaDB 10.6+"
    parties: tuple[ReportParty, ...]
    victim: int
    innodb: bool  # InnoDB's: locks on index records, MySQL's SQL dialect
    notes: tuple[str, ...] = field(default=())

    def party(self, number: int | None) -> ReportParty | None:
        return next((p for p in self.parties if p.number == number), None)

    def tables(self) -> list[str]:
        return sorted({lock.table for p in self.parties for lock in (p.waits, p.holds) if lock is not None and lock.table})


def checked_size(path: str, data: bytes) -> str:
    """The report's text; a ReportError when it is too big to be a report."""
    if len(data) > MAX_REPORT_BYTES:
        raise ReportError(path, f"{len(data)} bytes: a deadlock report is at most 1 MiB; paste the deadlock's section only")
    return data.decode("utf-8", "replace")
