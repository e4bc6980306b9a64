"""Seeing, from the control connection, which sessions are blocked and on whom.

The session sockets only say "no answer yet"; whether that means "still working" or "waiting
for a lock" is asked of the server: InnoDB's transaction list for row locks, the process list
for metadata and table locks.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

from ..types import (
    GAP,
    GAP_ONLY,
    HOLDS,
    INSERT_INTENTION,
    INSERT_INTENTION_ONLY,
    METADATA,
    NEXT_KEY,
    QUEUED,
    RECORD,
    ROW,
    TABLE,
    Edge,
    TrxStatus,
    WaitInfo,
    on_node,
)
from .control import rows as control_rows
from .control import text as control_text


def _lock_kind(state: str | None) -> str | None:
    """Metadata and table lock waits show in the process list; row lock waits do not."""
    if not state:
        return None
    lowered = state.lower()
    if "metadata lock" in lowered:
        return METADATA
    if lowered.startswith("waiting for") and ("lock" in lowered or "table flush" in lowered):
        return TABLE
    if lowered == "locked":
        return TABLE
    return None


# InnoDB fills its INFORMATION_SCHEMA tables (INNODB_TRX, INNODB_LOCKS, INNODB_LOCK_WAITS)
# from a cache it refreshes only when nobody has read it for 0.1 s: polled faster, they never
# change. Fast polling therefore reads SHOW ENGINE INNODB STATUS (built on each call, about
# 0.2 ms), and the cached tables are read only once the cache has been left alone long enough.
INNODB_IS_IDLE_S = 0.11
# Every transaction block starts so, whatever its state (ACTIVE, not started, COMMITTED IN
# MEMORY, recovered PREPARED...): splitting on any of them keeps lines with their own block.
TRX_HEADER = re.compile(r"^---TRANSACTION ", re.MULTILINE)
WAITING_LOCK = re.compile(r"index (\S+) of table `[^`]*`\.`([^`]*)` trx id \d+ lock.mode (\S+)(.*)(?:\n.*?heap no (\d+) )?")
# The record a lock is on: heap number 1 of every index page is its supremum, the end of the page.
SUPREMUM_HEAP_NO = "1"
THREAD_ID = re.compile(r"(?:MySQL|MariaDB) thread id (\d+)")
WAIT_KINDS = {RECORD: ROW, NEXT_KEY: ROW, GAP_ONLY: GAP, INSERT_INTENTION_ONLY: INSERT_INTENTION}


# performance_schema.data_locks writes the kind into LOCK_MODE: X,GAP, X,INSERT_INTENTION...
MYSQL_LOCK_FLAGS = (("INSERT_INTENTION", INSERT_INTENTION_ONLY), ("GAP", GAP_ONLY), ("REC_NOT_GAP", RECORD))


def innodb_lock_kind(flags: str, supremum: bool) -> str:
    """RECORD, GAP_ONLY, NEXT_KEY or INSERT_INTENTION_ONLY, from the words after a lock's mode
    in InnoDB's monitor output ("locks rec but not gap", "insert intention"...)."""
    if "insert intention" in flags:
        return INSERT_INTENTION_ONLY
    if "locks gap before rec" in flags:
        return GAP_ONLY
    if "locks rec but not gap" in flags:
        return RECORD
    # A plain X or S on the supremum can only cover the gap before it: there is no row.
    return GAP_ONLY if supremum else NEXT_KEY


def transaction_blocks(text: str) -> Iterator[tuple[int, str]]:
    """(client thread id, its block) for each transaction of the monitor output that has a client."""
    starts = [m.start() for m in TRX_HEADER.finditer(text)] + [len(text)]
    for begin, end in zip(starts, starts[1:]):
        block = text[begin:end]
        thread = THREAD_ID.search(block)
        if thread:
            yield int(thread.group(1)), block


def parse_innodb_status(text: str) -> dict[int, TrxStatus]:
    """Thread id -> its transaction's state, from the TRANSACTIONS part of the monitor output."""
    out = {}
    for thread, block in transaction_blocks(text):
        lock_wait = any(line.startswith("LOCK WAIT") for line in block.splitlines())
        header = block.split("\n", 1)[0]
        wanted = WAITING_LOCK.search(block) if lock_wait else None
        waiting_for = f"{wanted.group(2)} {wanted.group(1)} {wanted.group(3)}" if wanted else ""
        kind = WAIT_KINDS[innodb_lock_kind(wanted.group(4), wanted.group(5) == SUPREMUM_HEAP_NO)] if wanted else ROW
        out[thread] = TrxStatus(", ACTIVE" in header, lock_wait, waiting_for, kind)
    return out


class WaitMonitor:
    """Queries one control connection; it must never run a statement that can itself block."""

    # InnoDB's view of a wait can lag: a freed waiter or a deadlock victim shows LOCK WAIT for
    # a moment after the fact, so a wait is believed on its second sighting (run/settle.py).
    exact = False
    # SHOW ENGINE INNODB STATUS counts each transaction's record locks (--show-locks).
    counts_row_locks = True

    def __init__(self, control, flavor: str):
        self.control = control
        self.mysql = flavor == "MySQL"
        self._innodb_is_read = 0.0

    def rows(self, sql: str, innodb_is: bool = False) -> tuple:
        """Run a query on the control connection; `innodb_is` when it reads InnoDB's cached tables."""
        if innodb_is:
            idle = time.monotonic() - self._innodb_is_read
            if idle < INNODB_IS_IDLE_S:
                time.sleep(INNODB_IS_IDLE_S - idle)
        found = control_rows(self.control, sql)
        if innodb_is:
            self._innodb_is_read = time.monotonic()
        return found

    def by_node(self) -> tuple[tuple[int, WaitMonitor], ...]:
        """Each node's monitor with its number: one server is node 1 (galera/node_waits.py has a cluster's)."""
        return ((1, self),)

    def fresh_rows(self, sql: str) -> tuple:
        """Read InnoDB's cached tables after leaving the cache alone long enough to refresh."""
        self._innodb_is_read = time.monotonic()
        return self.rows(sql, innodb_is=True)

    def transactions(self) -> dict[int, TrxStatus]:
        rows = self.rows("SHOW ENGINE INNODB STATUS")
        return parse_innodb_status(control_text(rows[0][2]) if rows else "")

    def _process_states(self) -> dict[int, str | None]:
        # SHOW PROCESSLIST costs a tenth of a query on information_schema.PROCESSLIST,
        # which builds a temporary table on every call.
        return {int(control_text(row[0])): control_text(row[6]) for row in self.rows("SHOW PROCESSLIST")}

    def _in_schema(self, schema: str) -> set[int]:
        """The connections whose current database is `schema` (SHOW PROCESSLIST's db)."""
        return {int(control_text(row[0])) for row in self.rows("SHOW PROCESSLIST") if control_text(row[3]) == schema}

    def blocked(self, thread_ids: list[int]) -> dict[int, str]:
        """Thread id -> kind of lock it waits for, for those that wait on a lock now."""
        if not thread_ids:
            return {}
        transactions = self.transactions()
        out = {}
        for tid in thread_ids:
            status = transactions.get(int(tid))
            if status and status.lock_wait:
                out[int(tid)] = ROW
        if len(out) < len(thread_ids):
            states = self._process_states()
            for tid in thread_ids:
                kind = _lock_kind(states.get(int(tid)))
                if kind and int(tid) not in out:
                    out[int(tid)] = kind
        return out

    def in_cycle(self, thread_ids: list[int]) -> bool:
        """Whether these waits form a cycle. InnoDB breaks one the moment it forms, before it
        can be seen; a cycle it cannot see (a row lock and a metadata lock) ends by timeout."""
        return False

    def record_locks_held(self) -> dict[int, int]:
        """Thread id -> the index records its transaction has locked (record_locks_held)."""
        return record_locks_held(self)

    def alive(self, thread_id: int) -> bool:
        """Whether the server still has this connection or an active transaction of it."""
        if int(thread_id) in self._process_states():
            return True
        status = self.transactions().get(int(thread_id))
        return bool(status and status.active)

    def describe(self, thread_id: int, kind: str, schema: str) -> WaitInfo:
        if kind == ROW:
            return self._row_wait(thread_id, schema)
        return self._metadata_wait(thread_id, kind, schema)

    def _row_wait(self, thread_id: int, schema: str) -> WaitInfo:
        if not self.mysql:
            deduced = self._sole_holder(thread_id, schema)
            if deduced is not None:
                return deduced
        return self.describe_from_lock_tables(thread_id)

    def describe_from_lock_tables(self, thread_id: int) -> WaitInfo:
        """A row lock wait as the server's lock tables tell it, the record included."""
        if self.mysql:
            sql = (
                "SELECT b.PROCESSLIST_ID, l.OBJECT_NAME, l.INDEX_NAME, l.LOCK_MODE, l.LOCK_DATA "
                "FROM performance_schema.data_lock_waits w "
                "JOIN performance_schema.threads r ON r.THREAD_ID = w.REQUESTING_THREAD_ID "
                "JOIN performance_schema.threads b ON b.THREAD_ID = w.BLOCKING_THREAD_ID "
                "LEFT JOIN performance_schema.data_locks l ON l.ENGINE_LOCK_ID = w.REQUESTING_ENGINE_LOCK_ID "
                f"WHERE r.PROCESSLIST_ID = {int(thread_id)}"
            )
        else:
            sql = (
                "SELECT b.trx_mysql_thread_id, l.lock_table, l.lock_index, l.lock_mode, l.lock_data "
                "FROM information_schema.INNODB_LOCK_WAITS w "
                "JOIN information_schema.INNODB_TRX r ON r.trx_id = w.requesting_trx_id "
                "JOIN information_schema.INNODB_TRX b ON b.trx_id = w.blocking_trx_id "
                "LEFT JOIN information_schema.INNODB_LOCKS l ON l.lock_id = w.requested_lock_id "
                f"WHERE r.trx_mysql_thread_id = {int(thread_id)}"
            )
        rows = self.rows(sql, innodb_is=not self.mysql)
        if not rows and not self.mysql:
            # The cache idles on every reader's clock, not just ours: another client's read
            # (a run just before this one) can leave it stale. Once left alone, it refreshes.
            rows = self.fresh_rows(sql)
        blockers = tuple(sorted({int(r[0]) for r in rows}))
        table, index, mode, data = (control_text(v) or "" for v in rows[0][1:]) if rows else ("", "", "", "")
        lock = " ".join(p for p in (_table_name(table), index, mode, f"({data})" if data else "") if p)
        return WaitInfo(self._row_kind(thread_id, mode, data), blockers, lock)

    def _row_kind(self, thread_id: int, mode: str, data: str) -> str:
        """MySQL's lock tables say which kind a lock is in its mode (X,GAP, X,INSERT_INTENTION);
        MariaDB's print X for all of them, and only its monitor output tells them apart."""
        if self.mysql:
            flags = set(mode.split(",")[1:])
            found = next((kind for flag, kind in MYSQL_LOCK_FLAGS if flag in flags), None)
            return WAIT_KINDS[found or (GAP_ONLY if data.startswith("supremum") else NEXT_KEY)]
        status = self.transactions().get(int(thread_id))
        return status.waiting_kind if status else ROW

    def _sole_holder(self, thread_id: int, schema: str) -> WaitInfo | None:
        """The blocker, when only one other transaction is active in the run's scratch schema:
        only an active transaction holds row locks, and only the run's own connections use its
        tables, so it must be that one. This needs no read of InnoDB's cached lock tables,
        which would be stale when read again within 0.1 s (a second wait soon after the first),
        and which other clients' reads of them keep stale on a busy shared server."""
        transactions = self.transactions()
        ours = self._in_schema(schema) if schema else None
        others = [tid for tid, trx in transactions.items()
                  if trx.active and tid != int(thread_id) and (ours is None or tid in ours)]
        mine = transactions.get(int(thread_id))
        if len(others) != 1 or mine is None or not mine.lock_wait:
            return None
        return WaitInfo(mine.waiting_kind, (others[0],), mine.waiting_for)

    def _metadata_wait(self, thread_id: int, kind: str, schema: str) -> WaitInfo:
        """Who stands in the way of a metadata lock request: the sessions holding a lock on a
        table of the scratch schema that the request conflicts with, and those whose earlier
        request, still waiting, it queues behind (mdl.py).

        MySQL 8 lists pending and granted metadata locks; MariaDB needs the metadata_lock_info
        plugin (the embedded server loads it) and lists granted ones only, so a waiting request
        is known by its statement (mdl.REQUESTS). Without either, the blocker is not named
        rather than guessed; a request of unknown mode is told by every granted lock.
        """
        from . import mdl  # its patterns compiled only when a run meets a metadata lock wait

        if self.mysql:
            granted, pending, mine = self._mysql_metadata_locks(thread_id, schema)
        elif metadata_lock_info_active(self):
            granted, pending, mine = self._mariadb_metadata_locks(thread_id, schema)
        else:
            return WaitInfo(kind, ())
        holding = [(t, table, mode) for t, table, mode in granted if not mine or mdl.waits_for_granted(mine, mode)]
        ahead = [(t, mode) for t, mode in pending if mine and mode and mdl.queued_behind(mine, mode)]
        if self.mysql and holding:
            # MySQL shows no order of its waiters: a request is told as queued behind another
            # only when no granted lock explains its wait, so that one must be ahead of it.
            ahead = []
        edges = [Edge(t, HOLDS, mdl.mode_name(mode)) for t, _, mode in holding]
        edges += [Edge(t, QUEUED, mdl.mode_name(mode)) for t, mode in ahead]
        tables = {table for _, table, _ in holding}
        return WaitInfo(kind, (), tables.pop() if len(tables) == 1 else "", tuple(edges), mine and mdl.mode_name(mine))

    def _mariadb_metadata_locks(self, thread_id: int, schema: str):
        """(granted locks of others as (thread, table, mode), earlier waiters as (thread, mode),
        the waiter's own request) from METADATA_LOCK_INFO and the process list."""
        from . import mdl

        escaped = schema.replace("'", "''")
        granted = self.rows(
            "SELECT THREAD_ID, TABLE_NAME, LOCK_MODE FROM information_schema.METADATA_LOCK_INFO "
            f"WHERE TABLE_SCHEMA = '{escaped}' AND TABLE_NAME <> '' AND THREAD_ID <> {int(thread_id)} "
            # InnoDB's purge briefly holds a table's metadata lock after changes, as thread
            # 0 or a daemon: no session to name, and gone before the waiter notices.
            f"AND {CLIENT_THREAD}"
        )
        waiting = self.rows(
            "SELECT ID, INFO, TIME_MS FROM information_schema.PROCESSLIST "
            f"WHERE DB = '{escaped}' AND STATE = 'Waiting for table metadata lock'"
        )
        since = {int(t): float(control_text(ms) or 0) for t, _, ms in waiting}
        mine = next((control_text(info) for t, info, _ in waiting if int(t) == int(thread_id)), None)
        # Waiting longer than the waiter: queued before it.
        ahead = [(int(t), mdl.requested(control_text(info))) for t, info, _ in waiting
                 if int(t) != int(thread_id) and since[int(t)] > since.get(int(thread_id), 0.0)]
        holders = sorted((int(t), control_text(table), control_text(mode)) for t, table, mode in granted if t is not None)
        return holders, sorted(ahead), mdl.requested(mine)

    def _mysql_metadata_locks(self, thread_id: int, schema: str):
        """The same from performance_schema.metadata_locks, which lists requests still waiting
        (written from MySQL 8.4's manual: no MySQL server runs here)."""
        escaped = schema.replace("'", "''")
        found = self.rows(
            "SELECT t.PROCESSLIST_ID, m.OBJECT_NAME, m.LOCK_TYPE, m.LOCK_STATUS FROM performance_schema.metadata_locks m "
            "JOIN performance_schema.threads t ON t.THREAD_ID = m.OWNER_THREAD_ID "
            f"WHERE m.OBJECT_TYPE = 'TABLE' AND m.OBJECT_SCHEMA = '{escaped}'"
        )
        rows = [(int(t), control_text(table), control_text(mode), control_text(status)) for t, table, mode, status in found if t is not None]
        asked = [(table, mode) for t, table, mode, status in rows if t == int(thread_id) and status == "PENDING"]
        mine = asked[0][1] if asked else ""
        if asked:  # only the locks on the table it waits for
            rows = [r for r in rows if r[1] == asked[0][0]]
        granted = sorted((t, table, mode) for t, table, mode, status in rows if status == "GRANTED" and t != int(thread_id))
        pending = sorted((t, mode) for t, _, mode, status in rows if status == "PENDING" and t != int(thread_id))
        return granted, pending, mine


CLIENT_THREAD = "THREAD_ID IN (SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND <> 'Daemon')"


def metadata_lock_info_active(monitor: WaitMonitor) -> bool:
    return bool(
        monitor.rows(
            "SELECT 1 FROM information_schema.PLUGINS WHERE PLUGIN_NAME = 'METADATA_LOCK_INFO' "
            "AND PLUGIN_STATUS = 'ACTIVE'"
        )
    )


def _table_name(table: str | None) -> str:
    """`scratch`.`jobs` -> jobs: the scratch database's name is noise in a lesson."""
    if not table:
        return ""
    return table.split(".")[-1].strip("`")


ROW_LOCKS = re.compile(r"(\d+) row lock\(s\)")


def record_locks_held(monitor: WaitMonitor) -> dict[int, int]:
    """Thread id -> the index records its transaction has locked, for transactions holding
    any, on every node of a cluster (the run's ids: galera/node_waits.py).

    InnoDB counts them per transaction (INNODB_TRX.trx_rows_locked, and the "N row lock(s)"
    line of SHOW ENGINE INNODB STATUS). The status text is built on every call, while
    INNODB_TRX comes from a cache refreshed only after 0.1 s without readers (waits.py), so
    the count is read from the status text: read right after a statement answers, it already
    holds that statement's locks. Records, not rows: a row locked through a secondary index
    and the primary key counts twice, and the next-key lock past the last entry (the
    supremum) counts too.
    """
    out = {}
    for node, one in monitor.by_node():
        rows = one.rows("SHOW ENGINE INNODB STATUS")
        for thread, block in transaction_blocks(control_text(rows[0][2]) if rows else ""):
            count = ROW_LOCKS.search(block)
            if count:
                out[on_node(node, thread)] = int(count.group(1))
    return out
