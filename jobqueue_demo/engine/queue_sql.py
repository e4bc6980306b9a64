"""The workers' SQL, seen from workers/: one connection per worker that claims, leases and
completes jobs, and the run-wide reads the crew needs. Each engine writes its own spelling in
its own module (mysql/queue.py, postgresql/queue.py), reached as `server.seam.queue()`, so workers/
never names an engine and a new engine touches engine/ only.

What is the same on every engine sits here: the statements that are plain SQL, and a driver
error turned into a `ClaimError` with a portable class (`deadlock`, `lock-not-available`,
`duplicate-key`, `serialization-failure`, or None for anything a claim loop must not retry).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

# Locking clauses of a claim's SELECT, by the registry's names (workers/strategies.py).
LOCKS = {"skip-locked": " FOR UPDATE SKIP LOCKED", "wait": " FOR UPDATE", "nowait": " FOR UPDATE NOWAIT", "none": ""}


def id_list(ids: list[int]) -> str:
    return ", ".join(str(int(i)) for i in ids)


class WorkerConnection:
    """One worker's connection (autocommit on, transactions begun explicitly).

    An engine's subclass sets `session_id` (what the server lists the connection as) and
    implements `_run(sql)` → (rows, rowcount), raising ClaimError, plus the statements it
    spells differently: `claim_update`, `expired`, `lease_end`.
    """

    session_id: int

    def _run(self, sql: str) -> tuple[list[tuple], int]:
        raise NotImplementedError

    def execute(self, sql: str) -> int:
        return self._run(sql)[1]

    def ids(self, sql: str) -> list[int]:
        return [int(row[0]) for row in self._run(sql)[0]]

    def rows(self, sql: str) -> list[tuple]:
        return self._run(sql)[0]

    def begin(self) -> None:
        self.execute("BEGIN")

    def commit(self) -> None:
        self.execute("COMMIT")

    def rollback(self) -> None:
        self.execute("ROLLBACK")

    def jobs_remain(self) -> bool:
        # A plain read in autocommit: a fresh snapshot that sees every commit so far.
        return bool(self.ids("SELECT 1 FROM jobs WHERE state <> 'done' LIMIT 1"))

    def claim_select(self, batch: int, lock: str) -> list[int]:
        return self.ids(f"SELECT id FROM jobs WHERE state = 'queued' ORDER BY id LIMIT {int(batch)}{LOCKS[lock]}")

    def claim_ids(self, ids: list[int]) -> list[int]:
        return self.ids(f"SELECT id FROM jobs WHERE id IN ({id_list(ids)}) AND state = 'queued' FOR UPDATE")

    def claim_update(self, worker: int, batch: int) -> list[int]:
        raise NotImplementedError

    def expired(self, batch: int) -> list[int]:
        raise NotImplementedError

    def lease_end(self, lease_ms: float) -> str:
        raise NotImplementedError

    def take_lease(self, ids: list[int], worker: int, token: int, lease_ms: float) -> None:
        self.execute(
            f"UPDATE jobs SET state = 'running', worker = {int(worker)}, token = {int(token)}, "
            f"lease_until = {self.lease_end(lease_ms)} WHERE id IN ({id_list(ids)})"
        )

    def extend_lease(self, ids: list[int], token: int, lease_ms: float) -> None:
        self.execute(
            f"UPDATE jobs SET lease_until = {self.lease_end(lease_ms)} WHERE id IN ({id_list(ids)}) AND token = {int(token)}"
        )

    def still_leased(self, ids: list[int], token: int) -> list[int]:
        return self.ids(f"SELECT id FROM jobs WHERE id IN ({id_list(ids)}) AND token = {int(token)} FOR UPDATE")

    def write_effect(self, job: int, worker: int, idempotency_key: bool, at_s: float) -> None:
        key = int(job) if idempotency_key else "NULL"
        self.execute(
            f"INSERT INTO effects (job_id, worker, idem_key, at_s) VALUES ({int(job)}, {int(worker)}, {key}, {at_s:.6f})"
        )

    def complete(self, ids: list[int], worker: int) -> None:
        self.execute(f"UPDATE jobs SET state = 'done', worker = {int(worker)} WHERE id IN ({id_list(ids)})")
        rows = ", ".join(f"({int(job)}, {int(worker)})" for job in ids)
        self.execute(f"INSERT INTO completions (job_id, worker) VALUES {rows}")


@dataclass(frozen=True)
class QueueEngine:
    """What the crew asks of an engine besides the workers' own connections. Picklable: the
    worker processes receive it and call `connect`."""

    worker_type: ClassVar[type]  # the engine's WorkerConnection, around a connection of its driver

    def connect(self, params, database: str, session_sql: tuple[str, ...]) -> WorkerConnection:
        """A worker's connection to the scratch database, its session settings applied."""
        worker = self.worker_type(params.connect(database=database))
        for sql in session_sql:
            worker.execute(sql)
        return worker

    def schema(self, state_order: str) -> tuple[str, ...]:
        raise NotImplementedError

    def lock_wait_count(self, scratch) -> int | None:
        """A server counter of row-lock waits, or None where the engine keeps none."""
        raise NotImplementedError

    def sessions_present(self, scratch, session_ids: list[int]) -> set[int]:
        raise NotImplementedError

    def lock_waits(self, scratch, session_ids: list[int]) -> list[tuple[tuple, str | None]]:
        """Each lock wait of `session_ids`, in the row form engine/mysql/lock_waits.py documents."""
        raise NotImplementedError
