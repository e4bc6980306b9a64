"""What runs inside each worker process: claim strategies and the claim-work-commit loop.

A worker owns two connections: `conn` for the claim transaction, `effects` for the job's
external effect, written on its own autocommit connection so that it survives a rollback of
the claim (the way an e-mail, once sent, stays sent). The SQL is the engine's
(engine/queue_sql.py); errors arrive by portable class. Counters live in shared memory so the
parent can read them live and they survive a SIGKILL.
"""

from __future__ import annotations

import enum
import random
import signal
import sys
import time
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn

from ..engine.types import ClaimError
from .lifeline import die_with_parent
from .strategies import STRATEGIES

if TYPE_CHECKING:
    from ..engine.seam import Queue

# A worker that waits this long for one row lock retries instead of hanging the run;
# the server default (50 s) would make a stuck demo look frozen.
LOCK_WAIT_TIMEOUT_S = 10
NOWAIT_BACKOFF_MS = (0.2, 8.0)  # first and largest back-off after a NOWAIT failure
EMPTY_BACKOFF_MS = (1.0, 20.0)  # ... and after finding nothing to claim while jobs remain
MAX_BATCH = 1000


class Field(enum.IntEnum):
    """Per-worker slots in the shared counter array."""

    COMPLETED = 0
    CLAIMS = 1
    EMPTY = 2
    DEADLOCKS = 3
    LOCK_TIMEOUTS = 4
    NOWAIT_FAILURES = 5
    RETRIES = 6
    DUPLICATED = 7
    EFFECTS = 8
    DEDUPLICATED = 9
    PHASE = 10
    THREAD_ID = 11
    HELD = 12
    LEASES_LOST = 13  # a lease that expired while its worker still worked: the job ran twice
    SERIALIZATION_FAILURES = 14  # PostgreSQL under REPEATABLE READ: a claimed row changed since the snapshot


N_FIELDS = len(Field)


class Phase(enum.IntEnum):
    IDLE = 0
    IN_TXN = 1  # holds claimed rows; a kill now lands before the commit
    COMMITTING = 2


@dataclass
class Shared:
    """Shared-memory state of one run, passed to each worker process when it starts."""

    counters: object  # RawArray('q', workers * N_FIELDS)
    last_commit: object  # RawArray('d', workers): time.monotonic() of each worker's last commit
    held: object  # RawArray('q', workers * MAX_BATCH): the job ids a worker holds uncommitted
    commit_locks: list  # one Lock per worker; the parent holds it while it kills that worker
    ready: object  # Semaphore released once per connected worker
    go: object  # Event: start claiming
    record: object = None  # a queue file's run: the tool's own account of it (own_record.Record)


@dataclass(frozen=True)
class WorkerSpec:
    index: int
    queue: Queue
    params: object  # the server's connection parameters, passed to queue.connect
    database: str
    strategy: str
    session_sql: tuple[str, ...]
    batch: int
    work_ms: float
    idempotency_key: bool
    workers: int
    jobs: int
    lease_ms: float = 0.0


@dataclass
class WorkerDone:
    claim_ms: list[float]
    retried_by_statement: dict = field(default_factory=dict)  # a queue file's run: retries by statement
    deadlocked_by_statement: dict = field(default_factory=dict)  # ... and of those, the deadlocks


@dataclass
class WorkerFailed:
    message: str


class Retry(Exception):
    """The attempt was rolled back by a lock error; the worker tries again."""


# -- strategies ----------------------------------------------------------------


class LockingSelect:
    """SELECT ... ORDER BY id LIMIT k with a lock (or none: the broken naive claim)."""

    def __init__(self, lock: str):
        self.lock = lock
        # The engines report a NOWAIT failure with the class of a lock wait timeout.
        self.nowait = lock == "nowait"

    def claim(self, worker: Claimer) -> list[int]:
        return worker.conn.claim_select(worker.spec.batch, self.lock)

    def exhausted(self, worker: Claimer) -> bool:
        return not worker.conn.jobs_remain()


class UpdateLimit:
    """Mark rows first, then take which ones: the claim before SKIP LOCKED existed."""

    nowait = False

    def claim(self, worker: Claimer) -> list[int]:
        return worker.conn.claim_update(worker.spec.index, worker.spec.batch)

    def exhausted(self, worker: Claimer) -> bool:
        return not worker.conn.jobs_remain()


class OwnRows:
    """The ceiling: each worker locks rows only it ever touches (job id - 1 = index mod workers)."""

    nowait = False

    def claim(self, worker: Claimer) -> list[int]:
        spec = worker.spec
        first = spec.index + 1 + spec.workers * worker.completed_jobs
        ids = list(range(first, spec.jobs + 1, spec.workers))[: spec.batch]
        return worker.conn.claim_ids(ids) if ids else []

    def exhausted(self, worker: Claimer) -> bool:
        return True


class Lease:
    """Claim in a short transaction of its own: mark the jobs `running` under a lease and an owner
    token, commit, then work outside any transaction; a job whose lease expired is claimed again.

    With `heartbeat` the worker extends its lease while it works, so the lease can be short
    whatever the job's length.
    """

    nowait = False

    def __init__(self, heartbeat: bool):
        self.heartbeat = heartbeat

    def claim(self, worker: Claimer) -> list[int]:
        batch = worker.spec.batch
        return worker.conn.expired(batch) or worker.conn.claim_select(batch, "skip-locked")

    def exhausted(self, worker: Claimer) -> bool:
        return not worker.conn.jobs_remain()


RECIPES = {
    "select": lambda strategy: LockingSelect(strategy.lock),
    "update-limit": lambda strategy: UpdateLimit(),
    "own-rows": lambda strategy: OwnRows(),
    "lease": lambda strategy: Lease(strategy.heartbeat),
}

# What a retryable error counts as, by portable class; any other error ends the worker.
COUNTERS = {
    "deadlock": Field.DEADLOCKS,
    "duplicate-key": Field.DUPLICATED,
    "lock-not-available": Field.LOCK_TIMEOUTS,
    "serialization-failure": Field.SERIALIZATION_FAILURES,
}


# -- the worker ----------------------------------------------------------------


class Claimer:
    """One worker's loop: look for jobs, claim, write the effect, work, complete, commit.

    `conn` holds the claim transaction; `effects` writes the job's external effect on a
    connection of its own, so that it survives a rollback of the claim.
    """

    def __init__(self, spec: WorkerSpec, shared: Shared):
        self.spec = spec
        self.shared = shared
        self.strategy = STRATEGIES[spec.strategy]
        self.recipe = RECIPES[self.strategy.claim](self.strategy)
        self.token = 0  # the owner token of the current lease
        self.base = spec.index * N_FIELDS
        self.completed_jobs = 0
        self.failures_in_a_row = 0
        self.claim_ms: list[float] = []
        self.retried_by_statement: dict[str, int] = {}  # a queue file's claimer counts them (own_queue.py)
        self.deadlocked_by_statement: dict[str, int] = {}
        self.conn = spec.queue.connect(spec.params, spec.database, spec.session_sql)
        self.bump(Field.THREAD_ID, self.conn.session_id)
        self.effects = spec.queue.connect(spec.params, spec.database, ())

    # -- shared memory

    def bump(self, field: Field, by: int = 1) -> None:
        self.shared.counters[self.base + field] += by

    def set(self, field: Field, value: int) -> None:
        self.shared.counters[self.base + field] = value

    def hold(self, ids: list[int]) -> None:
        start = self.spec.index * MAX_BATCH
        self.shared.held[start : start + len(ids)] = ids
        self.set(Field.HELD, len(ids))
        self.set(Field.PHASE, Phase.IN_TXN)

    def release(self) -> None:
        self.set(Field.PHASE, Phase.IDLE)
        self.set(Field.HELD, 0)

    # -- the loop

    def run(self) -> None:
        looking = time.monotonic()
        empties = 0
        while True:
            try:
                held = self.attempt(looking)
            except Retry:
                continue
            if held:
                looking, empties = time.monotonic(), 0
            elif self.recipe.exhausted(self):
                return
            else:
                empties += 1
                pause(EMPTY_BACKOFF_MS, empties)
                looking = time.monotonic()

    def attempt(self, looking: float) -> bool:
        """One transaction; False when there was nothing to claim. Raises Retry after a lock error."""
        try:
            self.conn.begin()
            ids = self.recipe.claim(self)
            self.bump(Field.CLAIMS)
            if not ids:
                self.conn.rollback()
                self.bump(Field.EMPTY)
                return False
            claimed = time.monotonic()
            if self.strategy.lease:
                self.take_lease(ids)
            self.write_effects(ids)
            # Killable from here to the commit: a kill now leaves an effect whose job is
            # redone, the case the external-duplicates count is about.
            self.hold(ids)
            self.work(ids)
            if self.strategy.lease:
                ids = self.still_leased(ids)
            self.complete(ids)
        except ClaimError as exc:
            self.rolled_back(exc)
        self.claim_ms.append((claimed - looking) * 1000)
        self.failures_in_a_row = 0
        return True

    def take_lease(self, ids: list[int]) -> None:
        """Mark the claimed jobs running under a fresh lease and token, and commit the claim."""
        self.token = random.getrandbits(62)
        self.conn.take_lease(ids, self.spec.index, self.token, self.spec.lease_ms)
        self.conn.commit()

    def work(self, ids: list[int]) -> None:
        """The simulated job; a heartbeat worker extends its lease a few times per lease period."""
        left = self.spec.work_ms / 1000
        beat = self.spec.lease_ms / 3000 if self.strategy.lease and self.recipe.heartbeat else left
        while left > 0:
            pause = min(left, beat)
            time.sleep(pause)
            left -= pause
            if left > 0:
                self.conn.extend_lease(ids, self.token, self.spec.lease_ms)

    def still_leased(self, ids: list[int]) -> list[int]:
        """Open the completing transaction and keep the jobs whose lease is still ours."""
        self.conn.begin()
        mine = self.conn.still_leased(ids, self.token)
        self.bump(Field.LEASES_LOST, len(ids) - len(mine))
        return mine

    def write_effects(self, ids: list[int]) -> None:
        """The job's outside-world effect: it stays even if the claim is rolled back."""
        for job in ids:
            try:
                self.effects.write_effect(job, self.spec.index, self.spec.idempotency_key, time.time())
                self.bump(Field.EFFECTS)
            except ClaimError as exc:
                if exc.kind != "duplicate-key":
                    raise
                self.bump(Field.DEDUPLICATED)

    def complete(self, ids: list[int]) -> None:
        if ids:
            self.conn.complete(ids, self.spec.index)
        # The parent kills only while holding this lock and seeing IN_TXN, so a killed worker
        # never committed, and no worker dies holding the lock.
        with self.shared.commit_locks[self.spec.index]:
            self.set(Field.PHASE, Phase.COMMITTING)
        self.conn.commit()
        self.completed_jobs += len(ids)
        self.release()
        self.bump(Field.COMPLETED, len(ids))
        self.shared.last_commit[self.spec.index] = time.monotonic()

    def rolled_back(self, exc: ClaimError) -> NoReturn:
        """Count a lock error or a second completion, end the transaction, and raise Retry."""
        counter = self._counter_for(exc.kind)
        if counter is None:
            raise exc
        # After a deadlock MariaDB has already rolled back, PostgreSQL has aborted the
        # transaction; after a lock timeout or a duplicate MariaDB rolled back only the
        # statement, and the claim's locks would be kept until this ROLLBACK.
        self.conn.rollback()
        self.release()
        self.bump(counter)
        if counter is Field.DUPLICATED:
            raise Retry
        self.bump(Field.RETRIES)
        self.failures_in_a_row += 1
        if counter is Field.NOWAIT_FAILURES:
            pause(NOWAIT_BACKOFF_MS, self.failures_in_a_row)
        raise Retry

    def _counter_for(self, kind: str | None) -> Field | None:
        counter = COUNTERS.get(kind)
        if counter is Field.LOCK_TIMEOUTS and self.recipe.nowait:
            return Field.NOWAIT_FAILURES
        return counter


def pause(backoff_ms: tuple[float, float], attempt: int) -> None:
    """Sleep a random time under an exponentially growing cap (full jitter)."""
    first, largest = backoff_ms
    cap = min(largest, first * 2 ** min(attempt, 16))
    time.sleep(random.uniform(0, cap) / 1000)


def worker_main(spec, shared: Shared, results, make: Callable = None) -> None:
    """Entry point of a worker process: connect, report ready, wait for go, work, report.
    `make`: the claimer's class (Claimer; own_queue.FileClaimer for a queue file's SQL)."""
    # Ctrl-C reaches the whole process group; the parent decides and kills us itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_forkserver()
    try:
        claimer = (make or Claimer)(spec, shared)
        shared.ready.release()
        shared.go.wait()
        claimer.run()
        results.send(WorkerDone(claimer.claim_ms, claimer.retried_by_statement, claimer.deadlocked_by_statement))
    except Exception as exc:  # every failure goes back to the parent as one line
        results.send(WorkerFailed(f"worker {spec.index}: {describe(exc)}"))
    finally:
        results.close()


def die_with_forkserver() -> None:
    """Get SIGKILL when the forkserver exits, which it does when the run's process dies."""
    preloaded = sys.modules.get("jobqueue_demo.workers.forkserver_lifeline")
    die_with_parent(preloaded.PID if preloaded is not None else 0)


def describe(exc: Exception) -> str:
    return str(exc) or type(exc).__name__
