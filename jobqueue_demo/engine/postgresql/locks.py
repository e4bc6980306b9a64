"""The `locks` step on PostgreSQL: the sessions' locks as pg_locks lists them.

PostgreSQL keeps row locks in the rows themselves, not in its lock table: pg_locks lists a
row lock only while someone waits for it (as the waiter's tuple lock and its wait for the
holder's transaction). Table locks (relation) are listed always, granted or awaited.
"""

from __future__ import annotations

from ..types import COLUMNS
from .waits import ROW_LOCK_MODE, PgWaitMonitor

NOTE = (
    "PostgreSQL keeps row locks in the rows: pg_locks shows one only while someone waits for it "
    "(a tuple lock, and a wait for the holder's transaction); table locks are always listed"
)


def lock_table(monitor: PgWaitMonitor, names: dict[int, str]):
    if not names:
        return COLUMNS, (), NOTE
    pids = ",".join(str(int(p)) for p in names)
    found = monitor.rows(
        # An index's lock is listed under its table, the index in its own column.
        "SELECT l.pid, coalesce(t.relname, c.relname), CASE WHEN c.relkind = 'i' THEN c.relname END, l.locktype, "
        f"CASE l.locktype WHEN 'tuple' THEN {ROW_LOCK_MODE} ELSE l.mode END, "
        "l.page, l.tuple, (SELECT h.pid FROM pg_locks h WHERE h.locktype = 'transactionid' "
        "AND h.transactionid = l.transactionid AND h.granted LIMIT 1), l.granted "
        "FROM pg_locks l LEFT JOIN pg_class c ON c.oid = l.relation "
        "LEFT JOIN pg_index i ON i.indexrelid = c.oid LEFT JOIN pg_class t ON t.oid = i.indrelid "
        f"WHERE l.pid IN ({pids}) AND l.locktype IN ('relation', 'tuple', 'transactionid') "
        # A session's own transaction id lock is how others wait for it, not a lock it waits on.
        "AND (l.locktype <> 'transactionid' OR NOT l.granted) "
        "AND (c.oid IS NULL OR c.relnamespace <> 'pg_catalog'::regnamespace)"
    )
    rows = [
        (names[int(pid)], table, index, mode, _record(locktype, page, item, holder, names), "granted" if granted == "t" else "waiting")
        for pid, table, index, locktype, mode, page, item, holder, granted in found
    ]
    return COLUMNS, tuple(sorted(rows, key=lambda r: (r[0], r[1] or "", r[2] or "", r[4] or ""))), NOTE


def _record(locktype: str, page: str | None, item: str | None, holder: str | None, names: dict[int, str]) -> str | None:
    """A tuple's (page,item); for a wait on a transaction, whose it is (its id changes every run)."""
    if locktype == "tuple":
        return f"({page},{item})"
    if locktype == "transactionid":
        return f"{names.get(int(holder), 'another session')}'s transaction" if holder else "a transaction"
    return None
