"""The `locks` step: the current lock footprint of the sessions, from what the server offers.

MySQL 8 lists every InnoDB lock (performance_schema.data_locks) and every metadata lock.
MariaDB lists InnoDB locks only while someone waits for them (INNODB_LOCKS), so for the rest
it shows how many rows each transaction has locked (INNODB_TRX), and metadata locks when the
metadata_lock_info plugin is loaded (the embedded server loads it).
"""

from __future__ import annotations

from ..types import COLUMNS, names_on
from .control import text as control_text
from .scratch import literal
from .waits import WaitMonitor, metadata_lock_info_active


def lock_table(monitor: WaitMonitor, schema: str, names: dict[int, str]):
    """(columns, rows, note) for the sessions named in `names` (thread id -> session), each
    read on its own node of a cluster."""
    rows: list[tuple] = []
    note = ""
    for node, one in monitor.by_node():
        local = names_on(node, names)
        if local:
            found, note = _node_lock_table(one, schema, local)
            rows += found
    return COLUMNS, tuple(sorted(rows, key=lambda r: (r[0], r[1] or "", r[4] or ""))), note


def _node_lock_table(monitor: WaitMonitor, schema: str, names: dict[int, str]) -> tuple[list[tuple], str]:
    if monitor.mysql:
        return (
            _mysql_row_locks(monitor, names) + _mysql_metadata_locks(monitor, schema, names),
            "every InnoDB and metadata lock, from performance_schema",
        )
    rows = _mariadb_row_locks(monitor, names)
    rows += _mariadb_trx_summary(monitor, names)
    mdl = _mariadb_metadata_locks(monitor, schema, names)
    rows += mdl or []
    note = (
        "MariaDB lists InnoDB row locks only while someone waits for them; other rows show "
        "each transaction's count of locked rows"
    )
    if mdl is None:
        note += "; metadata locks are not visible without the metadata_lock_info plugin"
    return rows, note


def _ids(names: dict[int, str]) -> str:
    return ",".join(str(int(t)) for t in names)


def _mariadb_row_locks(monitor, names) -> list[tuple]:
    rows = monitor.fresh_rows(
        "SELECT t.trx_mysql_thread_id, l.lock_table, l.lock_index, l.lock_mode, l.lock_data, "
        "EXISTS (SELECT 1 FROM information_schema.INNODB_LOCK_WAITS w WHERE w.requested_lock_id = l.lock_id) "
        "FROM information_schema.INNODB_LOCKS l "
        "JOIN information_schema.INNODB_TRX t ON t.trx_id = l.lock_trx_id "
        f"WHERE t.trx_mysql_thread_id IN ({_ids(names)})",
    )
    return [
        (names[int(tid)], _table(control_text(table)), control_text(index), control_text(mode), control_text(data), "waiting" if int(control_text(waits)) else "granted")
        for tid, table, index, mode, data, waits in rows
    ]


def _mariadb_trx_summary(monitor, names) -> list[tuple]:
    """Each transaction's count of the rows it holds. InnoDB's trx_rows_locked counts a
    waiting row lock too (a session that only waits showed `1 row(s) ... held`): it is taken
    off, as it is listed as waiting."""
    rows = monitor.rows(
        "SELECT t.trx_mysql_thread_id, t.trx_rows_locked, t.trx_tables_locked, "
        "EXISTS (SELECT 1 FROM information_schema.INNODB_LOCKS l "
        "WHERE l.lock_id = t.trx_requested_lock_id AND l.lock_type = 'RECORD') "
        "FROM information_schema.INNODB_TRX t "
        f"WHERE t.trx_mysql_thread_id IN ({_ids(names)})",
        innodb_is=True,
    )
    return [
        (names[int(tid)], None, None, None, f"{_held_rows(rows_locked, waits)} row(s) in {control_text(tables)} table(s)", "held")
        for tid, rows_locked, tables, waits in rows
    ]


def _held_rows(rows_locked, waits_for_a_row) -> int:
    return int(control_text(rows_locked)) - (1 if int(control_text(waits_for_a_row)) else 0)


def _mariadb_metadata_locks(monitor, schema: str, names) -> list[tuple] | None:
    if not metadata_lock_info_active(monitor):
        return None
    rows = monitor.rows(
        "SELECT THREAD_ID, TABLE_NAME, LOCK_MODE FROM information_schema.METADATA_LOCK_INFO "
        f"WHERE TABLE_SCHEMA = {literal(schema)} AND TABLE_NAME <> '' AND THREAD_ID IN ({_ids(names)})",
    )
    return [(names[int(tid)], control_text(table), "(metadata)", control_text(mode), None, "granted") for tid, table, mode in rows]


def _mysql_row_locks(monitor, names) -> list[tuple]:
    rows = monitor.rows(
        "SELECT t.PROCESSLIST_ID, l.OBJECT_NAME, l.INDEX_NAME, l.LOCK_MODE, l.LOCK_DATA, l.LOCK_STATUS "
        "FROM performance_schema.data_locks l JOIN performance_schema.threads t ON t.THREAD_ID = l.THREAD_ID "
        f"WHERE t.PROCESSLIST_ID IN ({_ids(names)})",
    )
    return [_mysql_row(names, r) for r in rows]


def _mysql_metadata_locks(monitor, schema: str, names) -> list[tuple]:
    rows = monitor.rows(
        "SELECT t.PROCESSLIST_ID, m.OBJECT_NAME, '(metadata)', m.LOCK_TYPE, NULL, m.LOCK_STATUS "
        "FROM performance_schema.metadata_locks m JOIN performance_schema.threads t ON t.THREAD_ID = m.OWNER_THREAD_ID "
        f"WHERE m.OBJECT_SCHEMA = {literal(schema)} AND t.PROCESSLIST_ID IN ({_ids(names)})",
    )
    return [_mysql_row(names, r) for r in rows]


def _mysql_row(names, row) -> tuple:
    tid, table, index, mode, data, status = (control_text(v) for v in row)
    return (names[int(tid)], table, index, mode, data, "waiting" if status in ("WAITING", "PENDING") else "granted")


def _table(name: str | None) -> str | None:
    return name.split(".")[-1].strip("`") if name else name

