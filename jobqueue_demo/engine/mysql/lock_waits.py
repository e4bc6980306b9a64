"""Every row-lock wait of some threads, with its holder: the picture workers/stall.py explains.

MariaDB: INFORMATION_SCHEMA.INNODB_LOCK_WAITS / INNODB_LOCKS / INNODB_TRX, plus the waiting
lock's full mode ("X insert intention", "X locks gap before rec") from SHOW ENGINE INNODB
STATUS, which the tables shorten to "X". MySQL 8 (written from its manual, not run here):
performance_schema.data_lock_waits and data_locks, whose LOCK_MODE is already full (e.g.
"X,INSERT_INTENTION").
"""

from __future__ import annotations

import re

from ..types import as_text
from .scratch import ScratchDatabase
from .waits import transaction_blocks

WAITING_MODE = re.compile(r"trx id \d+ (lock[ _]mode \S+[^\n]*?) waiting")


def row_lock_waits(scratch: ScratchDatabase, threads: list[int]) -> list[tuple[tuple, str | None]]:
    """Each wait of `threads` as (row, full mode or None). A row is the waiter's and the
    holder's thread ids, both lock modes, table, index, record, the waiter's rows locked, lock
    structures, seconds active and statement, as the server gives them; errors are ServerError."""
    if scratch.server.flavor == "MySQL":
        return _mysql_waits(scratch, threads)
    return _mariadb_waits(scratch, threads, _waiting_modes(scratch))


def _waiting_modes(scratch) -> dict[int, tuple[str, str]]:
    """Thread id -> (the full mode of the lock it waits for, its monitor block), from the InnoDB monitor's text."""
    text = as_text(scratch.rows("SHOW ENGINE INNODB STATUS")[0][-1])
    out = {}
    for thread, block in transaction_blocks(text):
        mode = WAITING_MODE.search(block)
        if mode:
            full = mode.group(1).replace("lock_mode ", "").replace("lock mode ", "")
            out[thread] = (full, " ".join(block.split()))
    return out


def _full_mode(modes: dict[int, tuple[str, str]], thread, query) -> str | None:
    """The monitor's mode, if its text shows the same statement waiting (the tables are read at another moment)."""
    found = modes.get(int(thread))
    statement = " ".join(as_text(query).split())
    return found[0] if found and statement and statement in found[1] else None


def _mariadb_waits(scratch, threads: list[int], modes: dict[int, tuple[str, str]]) -> list[tuple]:
    rows = scratch.rows(
        "SELECT r.trx_mysql_thread_id, b.trx_mysql_thread_id, rl.lock_mode, bl.lock_mode, rl.lock_table,"
        " rl.lock_index, rl.lock_data, r.trx_rows_locked, r.trx_lock_structs,"
        " TIMESTAMPDIFF(SECOND, r.trx_started, NOW()), r.trx_query"
        " FROM information_schema.INNODB_LOCK_WAITS w"
        " JOIN information_schema.INNODB_TRX r ON r.trx_id = w.requesting_trx_id"
        " JOIN information_schema.INNODB_TRX b ON b.trx_id = w.blocking_trx_id"
        " JOIN information_schema.INNODB_LOCKS rl ON rl.lock_id = w.requested_lock_id"
        " JOIN information_schema.INNODB_LOCKS bl ON bl.lock_id = w.blocking_lock_id"
        f" WHERE r.trx_mysql_thread_id IN ({', '.join(str(int(t)) for t in threads)})"
    )
    return [(row, _full_mode(modes, row[0], row[-1])) for row in rows]


def _mysql_waits(scratch, threads: list[int]) -> list[tuple]:
    rows = scratch.rows(
        "SELECT rt.PROCESSLIST_ID, bt.PROCESSLIST_ID, rl.LOCK_MODE, bl.LOCK_MODE,"
        " CONCAT(rl.OBJECT_SCHEMA, '.', rl.OBJECT_NAME), rl.INDEX_NAME, rl.LOCK_DATA,"
        " r.trx_rows_locked, r.trx_lock_structs, TIMESTAMPDIFF(SECOND, r.trx_started, NOW()), r.trx_query"
        " FROM performance_schema.data_lock_waits w"
        " JOIN performance_schema.data_locks rl ON rl.ENGINE_LOCK_ID = w.REQUESTING_ENGINE_LOCK_ID"
        " JOIN performance_schema.data_locks bl ON bl.ENGINE_LOCK_ID = w.BLOCKING_ENGINE_LOCK_ID"
        " JOIN performance_schema.threads rt ON rt.THREAD_ID = w.REQUESTING_THREAD_ID"
        " JOIN performance_schema.threads bt ON bt.THREAD_ID = w.BLOCKING_THREAD_ID"
        " JOIN information_schema.INNODB_TRX r ON r.trx_mysql_thread_id = rt.PROCESSLIST_ID"
        f" WHERE rt.PROCESSLIST_ID IN ({', '.join(str(int(t)) for t in threads)})"
    )
    return [(row, None) for row in rows]
