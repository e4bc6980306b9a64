"""Seeing, from the control connection, which PostgreSQL sessions are blocked and on whom.

The way isolationtester does it: `pg_isolation_test_session_is_blocked(pid, interesting)`,
true when the backend waits for a lock held (or awaited first) by one of the interesting
backends, or for a safe snapshot; the interesting ones are every backend on the scratch
database. A role that may not call it (it is PUBLIC by default, but may be revoked) asks
`pg_blocking_pids(pid)` instead. The blocker is named from pg_blocking_pids, the lock from
pg_locks: a row lock shows as the tuple lock its waiter holds or awaits (relation, page and
item) while it waits for the holder's transaction to end.
"""

from __future__ import annotations

from . import pg_control as control
from .waits import ROW, TABLE, TrxStatus, WaitInfo

PROBE = "pg_isolation_test_session_is_blocked"


def _array(ids) -> str:
    return "'{" + ",".join(str(int(i)) for i in ids) + "}'::int[]"


class PgWaitMonitor:
    """Queries one control connection (on the scratch database); it never runs a statement that can block."""

    mysql = False

    def __init__(self, control_conn):
        self.control = control_conn
        self._probe = control.flag(control_conn, f"SELECT has_function_privilege('{PROBE}(integer, integer[])', 'EXECUTE')")

    def rows(self, sql: str) -> tuple:
        return control.rows(self.control, sql)

    def blocked(self, thread_ids: list[int]) -> dict[int, str]:
        """Backend pid -> kind of lock it waits for, for those that wait on a lock now."""
        if not thread_ids:
            return {}
        if self._probe:
            test = f"{PROBE}(p, ARRAY(SELECT pid FROM pg_stat_activity WHERE datname = current_database()))"
        else:
            test = "cardinality(pg_blocking_pids(p)) > 0"
        found = self.rows(
            "SELECT p, (SELECT l.locktype FROM pg_locks l WHERE l.pid = p AND NOT l.granted LIMIT 1) "
            f"FROM unnest({_array(thread_ids)}) p WHERE {test}"
        )
        return {int(pid): TABLE if locktype == "relation" else ROW for pid, locktype in found}

    def alive(self, thread_id: int) -> bool:
        """Whether the server still has this backend."""
        return bool(self.rows(f"SELECT 1 FROM pg_stat_activity WHERE pid = {int(thread_id)}"))

    def transactions(self) -> dict[int, TrxStatus]:
        """Backend pid -> its transaction's state, for the backends on the scratch database."""
        found = self.rows(
            "SELECT pid, xact_start IS NOT NULL, wait_event_type = 'Lock' FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return {int(pid): TrxStatus(active == "t", waiting == "t") for pid, active, waiting in found}

    def describe(self, thread_id: int, kind: str, schema: str = "") -> WaitInfo:
        """Who holds what the backend waits for (pg_blocking_pids), and which lock (pg_locks)."""
        pid = int(thread_id)
        blockers = self.rows(f"SELECT unnest(pg_blocking_pids({pid})) ORDER BY 1")
        return WaitInfo(kind, tuple(int(b[0]) for b in blockers), self._lock(pid))

    def describe_from_lock_tables(self, thread_id: int) -> WaitInfo:
        return self.describe(thread_id, ROW)

    def _lock(self, pid: int) -> str:
        # The tuple lock first: a row lock's waiter holds it (or awaits it behind an earlier
        # waiter) while it waits on the holder's transactionid.
        found = self.rows(
            "SELECT l.locktype, c.relname, l.mode, l.page, l.tuple, l.transactionid FROM pg_locks l "
            "LEFT JOIN pg_class c ON c.oid = l.relation "
            f"WHERE l.pid = {pid} AND (NOT l.granted OR l.locktype = 'tuple') "
            "ORDER BY l.locktype <> 'tuple', l.granted LIMIT 1"
        )
        if not found:
            return ""
        locktype, relation, mode, page, item, xid = found[0]
        if locktype == "tuple":
            return f"{relation} tuple ({page},{item}) {mode}"
        if locktype == "relation":
            return f"{relation} {mode}"
        if locktype == "transactionid":
            return f"transaction {xid} {mode}"
        return f"{locktype} {mode}"
