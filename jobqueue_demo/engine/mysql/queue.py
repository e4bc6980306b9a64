"""The workers' SQL on MariaDB and MySQL (see queue_sql.py for what each piece is for).

InnoDB keeps a server-wide count of row-lock waits; a claim's UPDATE can take `ORDER BY ...
LIMIT`; `NOW(6)` is the statement's start, to the microsecond.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..queue_sql import QueueEngine, WorkerConnection, id_list
from ..types import ClaimError
from . import errors as mysql_errors

# How `state` sorts, by queue_sql.STATE_ORDERS: an ENUM sorts by its list, a VARCHAR by text.
STATE_TYPES = {"done-last": "ENUM('queued', 'running', 'done')", "done-first": "VARCHAR(8)"}


def kind_of(errno: int) -> str | None:
    """The portable class of an error number (mysql_errors.CLASSES), or None."""
    return next((name for name, numbers in mysql_errors.CLASSES.items() if errno in numbers), None)


class MySqlWorker(WorkerConnection):
    def __init__(self, conn):
        self.conn = conn
        self.session_id = int(conn.thread_id())

    def _run(self, sql: str) -> tuple[list[tuple], int]:
        import MySQLdb

        try:
            self.conn.query(sql.encode())
            stored = self.conn.store_result()
            return (list(stored.fetch_row(0)) if stored is not None else []), self.conn.affected_rows()
        except MySQLdb.MySQLError as exc:
            errno = exc.args[0] if exc.args and isinstance(exc.args[0], int) else 0
            text = f"ERROR {errno}: {exc.args[1]}" if len(exc.args) == 2 else str(exc)
            raise ClaimError(kind_of(errno), text) from None

    def claim_update(self, worker: int, batch: int) -> list[int]:
        """Mark rows first, then read back which ones: the claim before SKIP LOCKED existed."""
        marked = self.execute(
            f"UPDATE jobs SET state = 'running', worker = {int(worker)} "
            f"WHERE state = 'queued' ORDER BY id LIMIT {int(batch)}"
        )
        if marked == 0:
            return []
        return self.ids(f"SELECT id FROM jobs WHERE state = 'running' AND worker = {int(worker)}")

    def expired(self, batch: int) -> list[int]:
        # A plain read finds the candidates, then a locking read by primary key takes record locks
        # only: a locking scan of the `running` range would gap-lock the place where other
        # workers' claims insert their ('running', id) entries, the shape docs/workers.md explains.
        found = self.ids(f"SELECT id FROM jobs WHERE state = 'running' AND lease_until < NOW(6) LIMIT {int(batch)}")
        if not found:
            return []
        return self.ids(
            f"SELECT id FROM jobs WHERE id IN ({id_list(found)}) AND state = 'running'"
            " AND lease_until < NOW(6) FOR UPDATE SKIP LOCKED"
        )

    def lease_end(self, lease_ms: float) -> str:
        return f"NOW(6) + INTERVAL {round(lease_ms * 1000)} MICROSECOND"


@dataclass(frozen=True)
class MySqlQueue(QueueEngine):
    worker_type = MySqlWorker

    def schema(self, state_order: str) -> tuple[str, ...]:
        return (
            f"CREATE TABLE jobs (id INT PRIMARY KEY, state {STATE_TYPES[state_order]} NOT NULL DEFAULT 'queued',"
            " worker INT NULL, lease_until DATETIME(6) NULL, token BIGINT NULL, KEY state_id (state, id)) ENGINE=InnoDB",
            # The primary key on job_id is the check: a second completion of a job fails with 1062.
            "CREATE TABLE completions (job_id INT PRIMARY KEY, worker INT NOT NULL) ENGINE=InnoDB",
            # idem_key is NULL (no key) or the job id; NULLs never collide in a UNIQUE index. at_s is
            # the worker's clock (time.time()) when it claimed the job: how soon a killed job ran again.
            "CREATE TABLE effects (seq BIGINT AUTO_INCREMENT PRIMARY KEY, job_id INT NOT NULL, worker INT NOT NULL,"
            " idem_key INT NULL, at_s DOUBLE NOT NULL DEFAULT 0, UNIQUE KEY (idem_key)) ENGINE=InnoDB",
        )

    def lock_wait_count(self, scratch) -> int | None:
        return int(scratch.rows("SHOW GLOBAL STATUS LIKE 'Innodb_row_lock_waits'")[0][-1] or 0)

    def sessions_present(self, scratch, session_ids: list[int]) -> set[int]:
        found = scratch.rows(f"SELECT ID FROM information_schema.PROCESSLIST WHERE ID IN ({id_list(session_ids)})")
        return {int(row[0]) for row in found}

    def lock_waits(self, scratch, session_ids: list[int]) -> list[tuple[tuple, str | None]]:
        from .lock_waits import row_lock_waits

        return row_lock_waits(scratch, session_ids)
