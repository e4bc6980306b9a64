"""What runs inside each worker process: claim strategies and the claim-work-commit loop.

A worker owns two connections: `conn` for the claim transaction, `effects` for the job's
external effect, written on its own autocommit connection so that it survives a rollback of
the claim (the way an e-mail, once sent, stays sent). Counters live in shared memory so the
parent can read them live and they survive a SIGKILL.
"""

from __future__ import annotations

import enum
import random
import signal
import sys
import time
from dataclasses import dataclass
from typing import NoReturn

import MySQLdb

from ..engine import mysql_errors as errs
from .lifeline import die_with_parent
from ..engine.server import ConnectParams
from .strategies import STRATEGIES

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


@dataclass(frozen=True)
class WorkerSpec:
    index: int
    params: ConnectParams
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


@dataclass
class WorkerFailed:
    message: str


class Retry(Exception):
    """The attempt was rolled back by a lock error; the worker tries again."""


# -- strategies ----------------------------------------------------------------


class LockingSelect:
    """SELECT ... ORDER BY id LIMIT k with a locking clause (or none: the broken naive claim)."""

    def __init__(self, clause: str):
        self.clause = clause
        # MariaDB reports a NOWAIT failure as 1205, the number of a lock wait timeout.
        self.nowait = clause.endswith("NOWAIT")

    def claim(self, worker: Claimer) -> list[int]:
        return worker.ids(
            f"SELECT id FROM jobs WHERE state = 'queued' ORDER BY id LIMIT {worker.spec.batch}{self.clause}"
        )

    def exhausted(self, worker: Claimer) -> bool:
        return not worker.jobs_remain()


class UpdateLimit:
    """Mark rows first, then read back which ones: the claim before SKIP LOCKED existed."""

    nowait = False

    def claim(self, worker: Claimer) -> list[int]:
        index = worker.spec.index
        worker.execute(
            f"UPDATE jobs SET state = 'running', worker = {index} "
            f"WHERE state = 'queued' ORDER BY id LIMIT {worker.spec.batch}"
        )
        if worker.conn.affected_rows() == 0:
            return []
        return worker.ids(f"SELECT id FROM jobs WHERE state = 'running' AND worker = {index}")

    def exhausted(self, worker: Claimer) -> bool:
        return not worker.jobs_remain()


class OwnRows:
    """The ceiling: each worker locks rows only it ever touches (job id - 1 = index mod workers)."""

    nowait = False

    def claim(self, worker: Claimer) -> list[int]:
        spec = worker.spec
        first = spec.index + 1 + spec.workers * worker.completed_jobs
        ids = list(range(first, spec.jobs + 1, spec.workers))[: spec.batch]
        if not ids:
            return []
        return worker.ids(f"SELECT id FROM jobs WHERE id IN ({_id_list(ids)}) AND state = 'queued' FOR UPDATE")

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
        return self.expired(worker) or worker.ids(
            f"SELECT id FROM jobs WHERE state = 'queued' ORDER BY id LIMIT {worker.spec.batch} FOR UPDATE SKIP LOCKED"
        )

    def expired(self, worker: Claimer) -> list[int]:
        # A plain read finds the candidates, then a locking read by primary key takes record locks
        # only: a locking scan of the `running` range would gap-lock the place where other
        # workers' claims insert their ('running', id) entries, the shape docs/workers.md explains.
        batch = worker.spec.batch
        found = worker.ids(f"SELECT id FROM jobs WHERE state = 'running' AND lease_until < NOW(6) LIMIT {batch}")
        if not found:
            return []
        return worker.ids(
            f"SELECT id FROM jobs WHERE id IN ({_id_list(found)}) AND state = 'running'"
            " AND lease_until < NOW(6) FOR UPDATE SKIP LOCKED"
        )

    def exhausted(self, worker: Claimer) -> bool:
        return not worker.jobs_remain()


RECIPES = {
    "select": lambda strategy: LockingSelect(strategy.clause),
    "update-limit": lambda strategy: UpdateLimit(),
    "own-rows": lambda strategy: OwnRows(),
    "lease": lambda strategy: Lease(strategy.heartbeat),
}


def _id_list(ids: list[int]) -> str:
    return ", ".join(str(int(i)) for i in ids)


# -- the worker ----------------------------------------------------------------


class Claimer:
    """One worker's loop: look for jobs, claim, write the effect, work, complete, commit."""

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
        self.conn = self._connect()
        self.effects = spec.params.connect(database=spec.database)

    def _connect(self):
        conn = self.spec.params.connect(database=self.spec.database)
        for sql in self.spec.session_sql:
            conn.query(sql.encode())
        self.bump(Field.THREAD_ID, conn.thread_id())
        return conn

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

    # -- SQL

    def execute(self, sql: str) -> None:
        self.conn.query(sql.encode())

    def ids(self, sql: str) -> list[int]:
        self.execute(sql)
        return [int(row[0]) for row in self.conn.store_result().fetch_row(0)]

    def jobs_remain(self) -> bool:
        # A plain read in autocommit: a fresh snapshot that sees every commit so far.
        self.execute("SELECT 1 FROM jobs WHERE state <> 'done' LIMIT 1")
        return bool(self.conn.store_result().fetch_row(1))

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
                _pause(EMPTY_BACKOFF_MS, empties)
                looking = time.monotonic()

    def attempt(self, looking: float) -> bool:
        """One transaction; False when there was nothing to claim. Raises Retry after a lock error."""
        try:
            self.execute("BEGIN")
            ids = self.recipe.claim(self)
            self.bump(Field.CLAIMS)
            if not ids:
                self.execute("ROLLBACK")
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
        except MySQLdb.MySQLError as exc:
            self.rolled_back(exc)
        self.claim_ms.append((claimed - looking) * 1000)
        self.failures_in_a_row = 0
        return True

    def take_lease(self, ids: list[int]) -> None:
        """Mark the claimed jobs running under a fresh lease and token, and commit the claim."""
        self.token = random.getrandbits(62)
        self.execute(
            f"UPDATE jobs SET state = 'running', worker = {self.spec.index}, token = {self.token}, "
            f"lease_until = {self._lease_end()} WHERE id IN ({_id_list(ids)})"
        )
        self.execute("COMMIT")

    def _lease_end(self) -> str:
        return f"NOW(6) + INTERVAL {round(self.spec.lease_ms * 1000)} MICROSECOND"

    def work(self, ids: list[int]) -> None:
        """The simulated job; a heartbeat worker extends its lease a few times per lease period."""
        left = self.spec.work_ms / 1000
        beat = self.spec.lease_ms / 3000 if self.strategy.lease and self.recipe.heartbeat else left
        while left > 0:
            pause = min(left, beat)
            time.sleep(pause)
            left -= pause
            if left > 0:
                self.execute(
                    f"UPDATE jobs SET lease_until = {self._lease_end()} "
                    f"WHERE id IN ({_id_list(ids)}) AND token = {self.token}"
                )

    def still_leased(self, ids: list[int]) -> list[int]:
        """Open the completing transaction and keep the jobs whose lease is still ours."""
        self.execute("BEGIN")
        mine = self.ids(f"SELECT id FROM jobs WHERE id IN ({_id_list(ids)}) AND token = {self.token} FOR UPDATE")
        self.bump(Field.LEASES_LOST, len(ids) - len(mine))
        return mine

    def write_effects(self, ids: list[int]) -> None:
        """The job's outside-world effect: it stays even if the claim is rolled back."""
        for job in ids:
            key = job if self.spec.idempotency_key else "NULL"
            try:
                sql = (
                    f"INSERT INTO effects (job_id, worker, idem_key, at_s) "
                    f"VALUES ({job}, {self.spec.index}, {key}, {time.time():.6f})"
                )
                self.effects.query(sql.encode())
                self.bump(Field.EFFECTS)
            except MySQLdb.IntegrityError as exc:
                if exc.args[0] != errs.ER_DUP_ENTRY:
                    raise
                self.bump(Field.DEDUPLICATED)

    def complete(self, ids: list[int]) -> None:
        if ids:
            listed = _id_list(ids)
            self.execute(f"UPDATE jobs SET state = 'done', worker = {self.spec.index} WHERE id IN ({listed})")
            rows = ", ".join(f"({job}, {self.spec.index})" for job in ids)
            self.execute(f"INSERT INTO completions (job_id, worker) VALUES {rows}")
        # The parent kills only while holding this lock and seeing IN_TXN, so a killed worker
        # never committed, and no worker dies holding the lock.
        with self.shared.commit_locks[self.spec.index]:
            self.set(Field.PHASE, Phase.COMMITTING)
        self.execute("COMMIT")
        self.completed_jobs += len(ids)
        self.release()
        self.bump(Field.COMPLETED, len(ids))
        self.shared.last_commit[self.spec.index] = time.monotonic()

    def rolled_back(self, exc: MySQLdb.MySQLError) -> NoReturn:
        """Count a lock error or a second completion, end the transaction, and raise Retry."""
        errno = exc.args[0] if exc.args else None
        counter = self._counter_for(errno)
        if counter is None:
            raise exc
        # After 1213 the server has already rolled back; after 1205, 3572 and 1062 only the
        # statement was, and the claim's locks would be kept until this ROLLBACK.
        self.execute("ROLLBACK")
        self.release()
        self.bump(counter)
        if counter is Field.DUPLICATED:
            raise Retry
        self.bump(Field.RETRIES)
        self.failures_in_a_row += 1
        if counter is Field.NOWAIT_FAILURES:
            _pause(NOWAIT_BACKOFF_MS, self.failures_in_a_row)
        raise Retry

    def _counter_for(self, errno: int | None) -> Field | None:
        if errno == errs.ER_LOCK_DEADLOCK:
            return Field.DEADLOCKS
        if errno == errs.ER_DUP_ENTRY:
            return Field.DUPLICATED
        if errno == errs.ER_LOCK_NOWAIT or (errno == errs.ER_LOCK_WAIT_TIMEOUT and self.recipe.nowait):
            return Field.NOWAIT_FAILURES
        if errno == errs.ER_LOCK_WAIT_TIMEOUT:
            return Field.LOCK_TIMEOUTS
        return None


def _pause(backoff_ms: tuple[float, float], attempt: int) -> None:
    """Sleep a random time under an exponentially growing cap (full jitter)."""
    first, largest = backoff_ms
    cap = min(largest, first * 2 ** min(attempt, 16))
    time.sleep(random.uniform(0, cap) / 1000)


def worker_main(spec: WorkerSpec, shared: Shared, results) -> None:
    """Entry point of a worker process: connect, report ready, wait for go, work, report."""
    # Ctrl-C reaches the whole process group; the parent decides and kills us itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_forkserver()
    try:
        claimer = Claimer(spec, shared)
        shared.ready.release()
        shared.go.wait()
        claimer.run()
        results.send(WorkerDone(claimer.claim_ms))
    except Exception as exc:  # every failure goes back to the parent as one line
        results.send(WorkerFailed(f"worker {spec.index}: {_describe(exc)}"))
    finally:
        results.close()


def _die_with_forkserver() -> None:
    """Get SIGKILL when the forkserver exits, which it does when the run's process dies."""
    preloaded = sys.modules.get("jobqueue_demo.workers.forkserver_lifeline")
    die_with_parent(preloaded.PID if preloaded is not None else 0)


def _describe(exc: Exception) -> str:
    if isinstance(exc, MySQLdb.MySQLError) and len(exc.args) == 2:
        return f"ERROR {exc.args[0]}: {exc.args[1]}"
    return str(exc) or type(exc).__name__
