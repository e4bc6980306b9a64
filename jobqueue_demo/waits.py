"""Seeing, from the control connection, which sessions are blocked and on whom.

The session sockets only say "no answer yet"; whether that means "still working" or "waiting
for a lock" is asked of the server: InnoDB's transaction list for row locks, the process list
for metadata and table locks.
"""

from __future__ import annotations

from dataclasses import dataclass

ROW = "row lock"
METADATA = "metadata lock"
TABLE = "table lock"


@dataclass(frozen=True)
class WaitInfo:
    kind: str  # ROW, METADATA or TABLE
    blockers: tuple[int, ...]  # thread ids holding what is waited for, when the server tells
    lock: str = ""  # e.g. "jobs PRIMARY X record (1)"


def _lock_kind(state: str | None, trx_state: str | None) -> str | None:
    if trx_state == "LOCK WAIT":
        return ROW
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


class WaitMonitor:
    """Queries one control connection; it must never run a statement that can itself block."""

    def __init__(self, control, flavor: str):
        self.control = control
        self.mysql = flavor == "MySQL"

    def _rows(self, sql: str) -> tuple:
        self.control.query(sql.encode())
        stored = self.control.store_result()
        return stored.fetch_row(0) if stored is not None else ()

    def blocked(self, thread_ids: list[int]) -> dict[int, str]:
        """Thread id -> kind of lock it waits for, for those that wait on a lock now."""
        if not thread_ids:
            return {}
        ids = ",".join(str(int(t)) for t in thread_ids)
        rows = self._rows(
            "SELECT p.ID, p.STATE, t.trx_state FROM information_schema.PROCESSLIST p "
            "LEFT JOIN information_schema.INNODB_TRX t ON t.trx_mysql_thread_id = p.ID "
            f"WHERE p.ID IN ({ids})"
        )
        out = {}
        for tid, state, trx_state in rows:
            kind = _lock_kind(_s(state), _s(trx_state))
            if kind:
                out[int(tid)] = kind
        return out

    def alive(self, thread_id: int) -> bool:
        """Whether the server still has this connection or its transaction."""
        rows = self._rows(
            f"SELECT 1 FROM information_schema.PROCESSLIST WHERE ID = {int(thread_id)} "
            f"UNION ALL SELECT 1 FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = {int(thread_id)}"
        )
        return bool(rows)

    def describe(self, thread_id: int, kind: str, schema: str) -> WaitInfo:
        if kind == ROW:
            return self._row_wait(thread_id)
        return WaitInfo(kind, self._metadata_holders(thread_id, schema))

    def _row_wait(self, thread_id: int) -> WaitInfo:
        if self.mysql:
            sql = (
                "SELECT b.trx_mysql_thread_id, l.OBJECT_NAME, l.INDEX_NAME, l.LOCK_MODE, l.LOCK_DATA "
                "FROM performance_schema.data_lock_waits w "
                "JOIN information_schema.INNODB_TRX r ON r.trx_id = w.REQUESTING_ENGINE_TRANSACTION_ID "
                "JOIN information_schema.INNODB_TRX b ON b.trx_id = w.BLOCKING_ENGINE_TRANSACTION_ID "
                "LEFT JOIN performance_schema.data_locks l ON l.ENGINE_LOCK_ID = w.REQUESTING_ENGINE_LOCK_ID "
                f"WHERE r.trx_mysql_thread_id = {int(thread_id)}"
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
        rows = self._rows(sql)
        blockers = tuple(sorted({int(r[0]) for r in rows}))
        lock = ""
        if rows:
            table, index, mode, data = (_s(v) or "" for v in rows[0][1:])
            lock = " ".join(p for p in (_table_name(table), index, mode, f"({data})" if data else "") if p)
        return WaitInfo(ROW, blockers, lock)

    def _metadata_holders(self, thread_id: int, schema: str) -> tuple[int, ...]:
        """Other connections holding metadata locks in the scratch schema.

        MySQL 8 lists pending and granted metadata locks; MariaDB needs the metadata_lock_info
        plugin (the embedded server loads it) and lists granted ones only. Without either, the
        blocker is not named rather than guessed.
        """
        if self.mysql:
            sql = (
                "SELECT DISTINCT t.PROCESSLIST_ID FROM performance_schema.metadata_locks w "
                "JOIN performance_schema.metadata_locks h ON h.OBJECT_SCHEMA = w.OBJECT_SCHEMA "
                "AND h.OBJECT_NAME = w.OBJECT_NAME AND h.LOCK_STATUS = 'GRANTED' "
                "JOIN performance_schema.threads t ON t.THREAD_ID = h.OWNER_THREAD_ID "
                "JOIN performance_schema.threads me ON me.THREAD_ID = w.OWNER_THREAD_ID "
                f"WHERE w.LOCK_STATUS = 'PENDING' AND me.PROCESSLIST_ID = {int(thread_id)} "
                f"AND t.PROCESSLIST_ID <> {int(thread_id)}"
            )
        else:
            if not self._rows(
                "SELECT 1 FROM information_schema.PLUGINS WHERE PLUGIN_NAME = 'METADATA_LOCK_INFO' "
                "AND PLUGIN_STATUS = 'ACTIVE'"
            ):
                return ()
            escaped = schema.replace("'", "''")
            sql = (
                "SELECT DISTINCT THREAD_ID FROM information_schema.METADATA_LOCK_INFO "
                f"WHERE TABLE_SCHEMA = '{escaped}' AND TABLE_NAME <> '' AND THREAD_ID <> {int(thread_id)}"
            )
        return tuple(sorted(int(r[0]) for r in self._rows(sql) if r[0] is not None))


def _s(value) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return value.decode("utf-8", "replace")


def _table_name(table: str | None) -> str:
    """`scratch`.`jobs` -> jobs: the scratch database's name is noise in a lesson."""
    if not table:
        return ""
    return table.split(".")[-1].strip("`")
