"""Every lock wait of some backends on PostgreSQL, with its holder: the stall picture of
workers/stall.py, in the row form engine/mysql/lock_waits.py documents.

The waiter's ungranted lock comes from pg_locks, its blockers from pg_blocking_pids(), each
blocker's mode from its granted lock on the same object. A row-lock wait shows as a wait
for ShareLock on the holder's transaction id; the row itself is the tuple lock the waiter
already holds (page, item: the row's ctid), in the table named. What PostgreSQL does not
keep, the row says it lacks: row locks live in the rows' headers, so there is no count of the
rows a transaction has locked nor of its lock structures, and no index record (a row lock is
on the heap tuple, not on an index entry).
"""

from __future__ import annotations

from ..queue_sql import id_list

WAITS = (
    "SELECT a.pid, b.pid, w.mode || ' (' || w.locktype || ')', h.mode,"
    # relname, not ::regclass (which names the schema too outside the search_path, empty here).
    " (SELECT c.relname FROM pg_catalog.pg_class c WHERE c.oid = coalesce(w.relation, t.relation)), '',"
    " CASE WHEN coalesce(w.page, t.page) IS NOT NULL"
    " THEN 'ctid (' || coalesce(w.page, t.page) || ',' || coalesce(w.tuple, t.tuple) || ')'"
    " WHEN w.transactionid IS NOT NULL THEN 'a row written by transaction ' || w.transactionid END,"
    " NULL, NULL, extract(epoch FROM clock_timestamp() - a.xact_start)::int, a.query"
    " FROM pg_stat_activity a"
    " JOIN pg_locks w ON w.pid = a.pid AND NOT w.granted"
    " CROSS JOIN LATERAL unnest(pg_blocking_pids(a.pid)) AS b(pid)"
    " LEFT JOIN pg_locks h ON h.pid = b.pid AND h.granted AND h.locktype = w.locktype"
    " AND h.transactionid IS NOT DISTINCT FROM w.transactionid AND h.relation IS NOT DISTINCT FROM w.relation"
    " AND h.page IS NOT DISTINCT FROM w.page AND h.tuple IS NOT DISTINCT FROM w.tuple"
    " LEFT JOIN pg_locks t ON t.pid = a.pid AND t.granted AND t.locktype = 'tuple'"
)


def lock_waits(scratch, backends: list[int]) -> list[tuple[tuple, str | None]]:
    """Each wait of `backends` as (row, None): PostgreSQL's modes are already whole."""
    rows = scratch.rows(f"{WAITS} WHERE a.pid IN ({id_list(backends)}) ORDER BY a.pid, b.pid")
    return [(tuple(row), None) for row in rows]
