"""The `locks` step on PostgreSQL: the sessions' locks as pg_locks lists them.

PostgreSQL keeps row locks in the rows themselves, not in its lock table: pg_locks lists a
row lock only while someone waits for it (as the waiter's tuple lock and its wait for the
holder's transaction). Table locks (relation) are listed always, granted or awaited.
"""

from __future__ import annotations

from .locks import COLUMNS
from .pg_waits import PgWaitMonitor

NOTE = (
    "PostgreSQL keeps row locks in the rows: pg_locks shows one only while someone waits for it "
    "(a tuple lock, and a wait for the holder's transaction); table locks are always listed"
)


def lock_table(monitor: PgWaitMonitor, names: dict[int, str]):
    if not names:
        return COLUMNS, (), NOTE
    pids = ",".join(str(int(p)) for p in names)
    found = monitor.rows(
        "SELECT l.pid, c.relname, l.locktype, l.mode, l.page, l.tuple, l.transactionid, l.granted "
        "FROM pg_locks l LEFT JOIN pg_class c ON c.oid = l.relation "
        f"WHERE l.pid IN ({pids}) AND l.locktype IN ('relation', 'tuple', 'transactionid') "
        # A session's own transaction id lock is how others wait for it, not a lock it waits on.
        "AND (l.locktype <> 'transactionid' OR NOT l.granted) "
        "AND (c.oid IS NULL OR c.relnamespace <> 'pg_catalog'::regnamespace)"
    )
    rows = [
        (names[int(pid)], relname, None, mode, _record(locktype, page, item, xid), "granted" if granted == "t" else "waiting")
        for pid, relname, locktype, mode, page, item, xid, granted in found
    ]
    return COLUMNS, tuple(sorted(rows, key=lambda r: (r[0], r[1] or "", r[4] or ""))), NOTE


def _record(locktype: str, page: str | None, item: str | None, xid: str | None) -> str | None:
    if locktype == "tuple":
        return f"({page},{item})"
    if locktype == "transactionid":
        return f"transaction {xid}"
    return None
