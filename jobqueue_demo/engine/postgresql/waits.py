"""Seeing, from the control connection, which PostgreSQL sessions are blocked and on whom.

The way isolationtester does it: `pg_isolation_test_session_is_blocked(pid, interesting)`,
true when the backend waits for a lock held (or awaited first) by one of the interesting
backends, or for a safe snapshot; the interesting ones are every backend on the scratch
database. A role that may not call it (it is PUBLIC by default, but may be revoked) asks
`pg_blocking_pids(pid)` instead. The blocker is named from pg_blocking_pids, the lock from
pg_locks: a row lock shows as the tuple lock its waiter holds or awaits (relation, page and
item, and the row-lock strength: FOR UPDATE...) while it waits for the holder's transaction to end.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..types import ADVISORY, HOLDS, QUEUED, ROW, TABLE, Edge, TrxStatus, WaitInfo
from . import control

PROBE = "pg_isolation_test_session_is_blocked"
# A row lock's heavyweight tuple lock is taken in the table-lock mode that stands for the
# row-lock strength (PostgreSQL's lockmode of a LockTupleMode): named here as SQL names it.
ROW_LOCK_MODE = (
    "CASE l.mode WHEN 'AccessExclusiveLock' THEN 'FOR UPDATE' WHEN 'ExclusiveLock' THEN 'FOR NO KEY UPDATE' "
    "WHEN 'RowShareLock' THEN 'FOR SHARE' WHEN 'AccessShareLock' THEN 'FOR KEY SHARE' ELSE l.mode END"
)


# What a wait event says is waited for; a lock of another type (virtualxid, object...) is
# called by its type.
_KINDS = {"relation": TABLE, "tuple": ROW, "transactionid": ROW, "advisory": ADVISORY, "SafeSnapshot": "safe snapshot"}


def _kind(event: str | None) -> str:
    return _KINDS.get(event or "", f"{event} lock")


# The columns of pg_locks that name what a lock is on (its lock tag).
LOCK_TAG = "l.locktype, l.database, l.relation, l.page, l.tuple, l.virtualxid, l.transactionid, l.classid, l.objid, l.objsubid"


def _array(ids) -> str:
    return "'{" + ",".join(str(int(i)) for i in ids) + "}'::int[]"


@dataclass(frozen=True)
class Sighting:
    """One backend's wait as pg_stat_activity and pg_locks showed it."""

    kind: str  # ROW, TABLE or "safe snapshot"
    blockers: frozenset[int]  # pg_blocking_pids (and pg_safe_snapshot_blocking_pids)
    relation: str
    locktype: str  # tuple, transactionid, relation...
    mode: str  # FOR UPDATE... for a row, the lock mode otherwise
    row: str  # "page,item" of a tuple lock
    xid: str
    statement: str

    def lock(self) -> str:
        """What is locked, e.g. "jobs row (0,1)", "jobs"; the mode asked for is `mode`."""
        if self.locktype == "tuple":
            return f"{self.relation} row ({self.row})"
        if self.locktype == "relation":
            return self.relation
        if self.locktype == "transactionid":
            return f"transaction {self.xid}"
        return self.locktype

    def info(self, edges: tuple[Edge, ...] = ()) -> WaitInfo:
        return WaitInfo(self.kind, tuple(sorted(self.blockers)), self.lock(), edges, self.mode)


class PgWaitMonitor:
    """Queries one control connection (on the scratch database); it never runs a statement that can block.

    The scenario owns `public` there and may define functions and operators: the connection's
    search_path is empty (scratch.py), so every name here is pg_catalog's, and the one
    operator is spelled out as well."""

    mysql = False
    # The releaser of a lock grants it to the waiter in the shared lock table before it
    # wakes it, and a deadlock victim leaves the wait queue before its error is sent: what
    # the probe says is current, and one sighting of a wait is enough (as for isolationtester).
    exact = True
    # Row locks live in the rows (xmax), not in pg_locks: nothing counts a transaction's.
    counts_row_locks = False

    def __init__(self, control_conn):
        self.control = control_conn
        self._seen: dict[int, Sighting] = {}  # the waits of the last blocked() call
        # The last cycle of waits seen, each backend's wait and the one of the cycle it waits
        # for: once PostgreSQL breaks a cycle only its server log tells it (deadlock.py).
        self.cycle: dict[int, tuple[Sighting, int]] | None = None
        self._probe = control.flag(control_conn, f"SELECT has_function_privilege('{PROBE}(integer, integer[])', 'EXECUTE')")
        # A new backend (a new database, too) reads the catalog entries a query needs on its
        # first use, about 2 ms for these: paid here, not while a step's wait is being timed.
        self.blocked([0])
        self.describe(0, ROW)
        self.in_cycle([0])

    def rows(self, sql: str) -> tuple:
        return control.rows(self.control, sql)

    def _sightings(self, where: str) -> dict[int, Sighting]:
        """The waits of the backends `where` selects (on pg_stat_activity a), with the lock each
        waits for: the tuple lock first, which a row lock's waiter holds (or awaits behind an
        earlier waiter) while it waits on the holder's transactionid."""
        found = self.rows(
            "SELECT a.pid, a.wait_event, pg_blocking_pids(a.pid) OPERATOR(pg_catalog.||) pg_safe_snapshot_blocking_pids(a.pid), "
            "lk.relname, lk.locktype, lk.mode, lk.page, lk.tuple, lk.transactionid, a.query "
            "FROM pg_stat_activity a LEFT JOIN LATERAL ("
            f"SELECT c.relname, l.locktype, CASE l.locktype WHEN 'tuple' THEN {ROW_LOCK_MODE} ELSE l.mode END AS mode, "
            "l.page, l.tuple, l.transactionid FROM pg_locks l LEFT JOIN pg_class c ON c.oid = l.relation "
            "WHERE l.pid = a.pid AND (NOT l.granted OR l.locktype = 'tuple') "
            "ORDER BY l.locktype <> 'tuple', l.granted LIMIT 1) lk ON true "
            f"WHERE {where}"
        )
        return {
            int(pid): Sighting(_kind(event), frozenset(_pids(blockers)), relation or "", locktype or "",
                               mode or "", f"{page},{item}", xid or "", query or "")
            for pid, event, blockers, relation, locktype, mode, page, item, xid, query in found
        }

    def blocked(self, thread_ids: list[int]) -> dict[int, str]:
        """Backend pid -> kind of lock it waits for, for those that wait on a lock now."""
        if not thread_ids:
            return {}
        # The wait event filters first: the probe (or pg_blocking_pids, which reads the whole
        # lock table) runs only for a backend that sleeps on a lock, or on a safe snapshot
        # (SERIALIZABLE READ ONLY DEFERRABLE), at all. Who blocks it and on which lock come
        # with each sighting, so that describe() tells the wait without another round trip.
        if self._probe:
            test = f"{PROBE}(a.pid, ARRAY(SELECT pid FROM pg_stat_activity WHERE datname = current_database()))"
        else:
            test = "cardinality(pg_blocking_pids(a.pid)) > 0"
        self._seen = self._sightings(
            f"a.pid = ANY({_array(thread_ids)}) AND (a.wait_event_type = 'Lock' OR a.wait_event = 'SafeSnapshot') AND {test}"
        )
        return {pid: seen.kind for pid, seen in self._seen.items()}

    def in_cycle(self, thread_ids: list[int]) -> bool:
        """Whether some of these backends wait for each other in a cycle: PostgreSQL looks for
        one only after deadlock_timeout, and until then the cycle is there to see. A backend
        found waiting for nobody any more counts too: the deadlock check has just broken the
        cycle, and the victim's error and the survivor's answer are on their way."""
        found = self.rows(
            f"SELECT p, pg_blocking_pids(p) OPERATOR(pg_catalog.||) pg_safe_snapshot_blocking_pids(p) FROM unnest({_array(thread_ids)}) p"
        )
        edges = {int(p): _pids(blockers) for p, blockers in found}
        broken = not all(edges.values())
        # Broken since the last sighting: the cycle is the one the sighting showed.
        cycle = _cycle({pid: set(seen.blockers) for pid, seen in self._seen.items()} if broken else edges)
        if cycle:
            self.cycle = {pid: (self._seen[pid], blocked_by) for pid, blocked_by in cycle.items() if pid in self._seen}
        elif not broken:
            self.cycle = None
        return broken or bool(cycle)

    def record_locks_held(self) -> dict[int, int]:
        """None counted: PostgreSQL keeps row locks in the rows themselves (counts_row_locks)."""
        return {}

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
        """Who blocks the backend (pg_blocking_pids), which lock it asks for, in which mode,
        and for each blocker whether it holds that lock or is ahead of it in the queue (pg_locks)."""
        pid = int(thread_id)
        seen = self._seen.get(pid)
        if seen is None or not seen.blockers:
            seen = self._sightings(f"a.pid = {pid}").get(pid)
        return seen.info(self._edges(pid, seen.blockers)) if seen else WaitInfo(kind, ())

    def _edges(self, pid: int, blockers: frozenset[int]) -> tuple[Edge, ...]:
        """pg_blocking_pids names the holders of a conflicting lock and the backends whose
        conflicting request waits ahead in the queue alike: pg_locks tells them apart, by
        the lock each has on what `pid` waits for, granted or not. A tuple lock is only a place
        in the row's queue, taken by the first waiter: who holds it is queued too."""
        if not blockers:
            return ()
        found = self.rows(
            f"SELECT l.pid, l.granted, CASE l.locktype WHEN 'tuple' THEN {ROW_LOCK_MODE} ELSE l.mode END, {LOCK_TAG} "
            f"FROM pg_catalog.pg_locks l WHERE l.pid OPERATOR(pg_catalog.=) ANY ({_array([pid, *blockers])})"
        )
        waited = next((r[3:] for r in found if int(r[0]) == pid and r[1] != "t"), None)
        edges = []
        for blocker in sorted(blockers):
            same = [(granted == "t", mode, tag[0]) for b, granted, mode, *tag in found if int(b) == blocker and tuple(tag) == waited]
            held = next(((mode, locktype) for granted, mode, locktype in same if granted), None)
            if held and held[1] != "tuple":
                # A transaction's id lock is how others wait for its row locks: no mode to tell.
                edges.append(Edge(blocker, HOLDS, "" if held[1] == "transactionid" else held[0]))
            elif same:
                edges.append(Edge(blocker, QUEUED, same[0][1]))
            else:
                edges.append(Edge(blocker, HOLDS))
        return tuple(edges)

    def describe_from_lock_tables(self, thread_id: int) -> WaitInfo:
        return self.describe(thread_id, ROW)


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


def _cycle(edges: dict[int, set[int]]) -> dict[int, int]:
    """The backends on a cycle of waits, each with the one of the cycle it waits for."""
    on = {start for start in edges if _reaches(edges, start, start, set())}
    return {pid: min(edges[pid] & on) for pid in on}
