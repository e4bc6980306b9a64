"""The workers' SQL on PostgreSQL (see queue_sql.py for what each piece is for).

Where PostgreSQL differs from InnoDB here:
- `UPDATE` takes no `ORDER BY ... LIMIT`: the update-limit claim updates the rows a plain
  subquery picks, re-checking `state` on the row it updates. A worker that waited for a row
  another claimed finds it no longer queued and claims nothing (READ COMMITTED), or fails
  with 40001 (REPEATABLE READ); no skipping either way, as with MySQL's UPDATE ... LIMIT.
- Under REPEATABLE READ a locking read of a row changed since the snapshot fails with
  40001 "could not serialize access due to concurrent update", SKIP LOCKED included: the
  claim loop counts it and retries, as it does a deadlock.
- `now()` is the transaction's start; leases use `clock_timestamp()`, the moment itself.
- Row locks live in the rows' headers: no server counter of lock waits, no count of rows a
  transaction has locked.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..queue_sql import QueueEngine, WorkerConnection, id_list
from ..types import ClaimError
from . import errors as pg_errors

STATE_TYPES = {"done-last": "jobs_state", "done-first": "VARCHAR(8)"}


def claim_error(error) -> ClaimError:
    """A statement's PgError as a ClaimError: the SQLSTATE's class, the text in psql's form (a
    connection libpq lost has no SQLSTATE of the server's)."""
    if error.code == pg_errors.CONNECTION_FAILURE:
        return ClaimError("connection-lost", f"ERROR:  {error.message}")
    return ClaimError(pg_errors.class_of(error.code), f"ERROR:  {error.message} (SQLSTATE {error.code})")


class PgWorker(WorkerConnection):
    def __init__(self, conn):
        self.conn = conn
        self.session_id = conn.pgconn.backend_pid

    def _run(self, sql: str) -> tuple[list[tuple], int]:
        """Every row (as text) and the count of rows the statement touched; its error a ClaimError."""
        import time

        from .libpq import LibpqError
        from .session import collect

        try:
            self.conn.pgconn.send_query(sql.encode("utf-8"))
        except LibpqError as exc:
            raise ClaimError("connection-lost", f"ERROR:  {exc}") from None
        result = collect(self.conn.pgconn, time.perf_counter(), whole=True)
        if result.error is not None:
            raise claim_error(result.error)
        return list(result.rows), (len(result.rows) if result.columns else result.affected or 0)

    def claim_update(self, worker: int, batch: int) -> list[int]:
        return self.ids(
            f"UPDATE jobs SET state = 'running', worker = {int(worker)} WHERE state = 'queued' AND id IN "
            f"(SELECT id FROM jobs WHERE state = 'queued' ORDER BY id LIMIT {int(batch)}) RETURNING id"
        )

    def expired(self, batch: int) -> list[int]:
        # No gap locks here: one locking read finds and takes the expired leases.
        return self.ids(
            "SELECT id FROM jobs WHERE state = 'running' AND lease_until < clock_timestamp()"
            f" ORDER BY id LIMIT {int(batch)} FOR UPDATE SKIP LOCKED"
        )

    def lease_end(self, lease_ms: float) -> str:
        return f"clock_timestamp() + interval '{round(lease_ms * 1000)} microseconds'"


@dataclass(frozen=True)
class PgQueue(QueueEngine):
    worker_type = PgWorker

    def schema(self, state_order: str) -> tuple[str, ...]:
        return (
            # An enum sorts by its list, as MySQL's ENUM does.
            "CREATE TYPE jobs_state AS ENUM ('queued', 'running', 'done')",
            f"CREATE TABLE jobs (id INT PRIMARY KEY, state {STATE_TYPES[state_order]} NOT NULL DEFAULT 'queued',"
            " worker INT NULL, lease_until TIMESTAMPTZ NULL, token BIGINT NULL)",
            "CREATE INDEX state_id ON jobs (state, id)",
            # The primary key on job_id is the check: a second completion of a job fails with 23505.
            "CREATE TABLE completions (job_id INT PRIMARY KEY, worker INT NOT NULL)",
            "CREATE TABLE effects (seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, job_id INT NOT NULL,"
            " worker INT NOT NULL, idem_key INT NULL UNIQUE, at_s DOUBLE PRECISION NOT NULL DEFAULT 0)",
        )

    def lock_wait_count(self, scratch) -> int | None:
        return None

    def sessions_present(self, scratch, session_ids: list[int]) -> set[int]:
        found = scratch.rows(f"SELECT pid FROM pg_stat_activity WHERE pid IN ({id_list(session_ids)})")
        return {int(row[0]) for row in found}

    def lock_waits(self, scratch, session_ids: list[int]) -> list[tuple[tuple, str | None]]:
        from .lock_waits import lock_waits

        return lock_waits(scratch, session_ids)
