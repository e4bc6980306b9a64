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
    # The releaser of a lock grants it to the waiter in the shared lock table before it
    # wakes it, and a deadlock victim leaves the wait queue before its error is sent: what
    # the probe says is current, and one sighting of a wait is enough (as for isolationtester).
    exact = True
    # Row locks live in the rows (xmax), not in pg_locks: nothing counts a transaction's.
    counts_row_locks = False

    def __init__(self, control_conn):
        self.control = control_conn
        self._seen: dict[int, WaitInfo] = {}  # the waits of the last blocked() call
        self._probe = control.flag(control_conn, f"SELECT has_function_privilege('{PROBE}(integer, integer[])', 'EXECUTE')")
        # A new backend (a new database, too) reads the catalog entries a query needs on its
        # first use, about 2 ms for these: paid here, not while a step's wait is being timed.
        self.blocked([0])
        self.describe(0, ROW)
        self.in_cycle([0])

    def rows(self, sql: str) -> tuple:
        return control.rows(self.control, sql)

    def blocked(self, thread_ids: list[int]) -> dict[int, str]:
        """Backend pid -> kind of lock it waits for, for those that wait on a lock now."""
        if not thread_ids:
            return {}
        # The wait event filters first: the probe (or pg_blocking_pids, which reads the whole
        # lock table) runs only for a backend that sleeps on a lock at all.
        if self._probe:
            test = f"{PROBE}(a.pid, ARRAY(SELECT pid FROM pg_stat_activity WHERE datname = current_database()))"
        else:
            test = "cardinality(pg_blocking_pids(a.pid)) > 0"
        # Who blocks it and on which lock come with each sighting: the wait is confirmed on the
        # next poll, and describe() then tells it without another round trip.
        found = self.rows(
            "SELECT a.pid, a.wait_event, pg_blocking_pids(a.pid), "
            f"({self._lock_sql('a.pid')}) FROM pg_stat_activity a "
            f"WHERE a.pid = ANY({_array(thread_ids)}) AND a.wait_event_type = 'Lock' AND {test}"
        )
        kinds = {int(pid): TABLE if event == "relation" else ROW for pid, event, _, _ in found}
        self._seen = {int(pid): WaitInfo(kinds[int(pid)], tuple(sorted(_pids(blockers))), lock or "") for pid, _, blockers, lock in found}
        return kinds

    def in_cycle(self, thread_ids: list[int]) -> bool:
        """Whether some of these backends wait for each other in a cycle: PostgreSQL looks for
        one only after deadlock_timeout, and until then the cycle is there to see. A backend
        found waiting for nobody any more counts too: the deadlock check has just broken the
        cycle, and the victim's error and the survivor's answer are on their way."""
        found = self.rows(
            f"SELECT p, pg_blocking_pids(p) || pg_safe_snapshot_blocking_pids(p) FROM unnest({_array(thread_ids)}) p"
        )
        edges = {int(p): _pids(blockers) for p, blockers in found}
        if not all(edges.values()):
            return True
        return any(_reaches(edges, start, start, set()) for start in edges)

    def alive(self, thread_id: int) -> bool:
        """Whether the server still has this backend."""
        return bool(self.rows(f"SELECT 1 FROM pg_stat_activity WHERE pid = {int(thread_id)}"))

    def transactions(self) -> dict[int, TrxStatus]:
        """Backend pid -> its transaction's state, for every client backend but this one."""
        found = self.rows(
            "SELECT pid, xact_start IS NOT NULL, wait_event_type = 'Lock' FROM pg_stat_activity "
            "WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
        )
        return {int(pid): TrxStatus(active == "t", waiting == "t") for pid, active, waiting in found}

    def describe(self, thread_id: int, kind: str, schema: str = "") -> WaitInfo:
        """Who holds what the backend waits for (pg_blocking_pids), and which lock (pg_locks)."""
        pid = int(thread_id)
        seen = self._seen.get(pid)
        if seen is not None and seen.kind == kind and seen.blockers:
            return seen
        found = self.rows(f"SELECT pg_blocking_pids({pid}), ({self._lock_sql(pid)})")
        blockers = tuple(sorted(_pids(found[0][0]))) if found else ()
        return WaitInfo(kind, blockers, (found[0][1] or "") if found else "")

    def describe_from_lock_tables(self, thread_id: int) -> WaitInfo:
        return self.describe(thread_id, ROW)

    @staticmethod
    def _lock_sql(pid: int | str) -> str:
        """The lock awaited, as text. The tuple lock first: a row lock's waiter holds it (or
        awaits it behind an earlier waiter) while it waits on the holder's transactionid."""
        return (
            "SELECT CASE l.locktype WHEN 'tuple' THEN format('%s tuple (%s,%s) %s', c.relname, l.page, l.tuple, l.mode) "
            "WHEN 'relation' THEN format('%s %s', c.relname, l.mode) "
            "WHEN 'transactionid' THEN format('transaction %s %s', l.transactionid, l.mode) "
            "ELSE format('%s %s', l.locktype, l.mode) END "
            "FROM pg_locks l LEFT JOIN pg_class c ON c.oid = l.relation "
            f"WHERE l.pid = {pid} AND (NOT l.granted OR l.locktype = 'tuple') "
            "ORDER BY l.locktype <> 'tuple', l.granted LIMIT 1"
        )

def _pids(array_text: str | None) -> set[int]:
    """{1,2} (an int[] in text form) as a set."""
    return {int(p) for p in (array_text or "").strip("{}").split(",") if p}


def _reaches(edges: dict[int, set[int]], node: int, target: int, seen: set[int]) -> bool:
    for nxt in edges.get(node, ()):
        if nxt == target:
            return True
        if nxt not in seen:
            seen.add(nxt)
            if _reaches(edges, nxt, target, seen):
                return True
    return False
