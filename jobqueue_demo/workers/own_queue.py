"""Workers on a queue file's SQL (docs/queue-format.md): the user's own claim, completion and
rescue, run by the same crew, kills and stall watch as a built-in strategy.

The file's SQL runs as the per-run user, in a confined scratch database. The tool judges the
run by tables of its own, never by the file's: `jqd_claims` (what each committed claim took),
`jqd_effects` (each execution of a job's effect, in the transaction the file's `work:` names)
and `jqd_done` (with each committed completion). The loader refuses any statement of the file
that names them.

The queue is duck-typed here (a scenario/queue_file.QueueSql): workers/ imports nothing of
scenario/, and the object reaches the worker processes pickled.
"""

from __future__ import annotations

import functools
import random
import threading
import time
from dataclasses import dataclass, replace

from ..engine.types import ClaimError, ServerInfo
from ..errors import DemoError, ScenarioError, ServerError
from . import claimers
from .claimers import EMPTY_BACKOFF_MS, Claimer, Field, Phase, Retry, Shared, pause
from .crew import (
    Crew,
    Killer,
    QueueCheck,
    Scratch,
    WorkersConfig,
    WorkersSummary,
    summarise,
    supervise,
    waits_since,
    Watch,
)

TOOL_TABLES = (
    "CREATE TABLE jqd_claims (job_id INT NOT NULL, worker INT NOT NULL)",
    "CREATE TABLE jqd_effects (job_id INT NOT NULL, worker INT NOT NULL, at_s DOUBLE PRECISION NOT NULL)",
    "CREATE TABLE jqd_done (job_id INT NOT NULL, worker INT NOT NULL)",
)
# What a real worker retries: the transaction was rolled back (or must be) and a new attempt may pass.
RETRIED = {
    "deadlock": Field.DEADLOCKS,
    "serialization-failure": Field.SERIALIZATION_FAILURES,
    "lock-not-available": Field.LOCK_TIMEOUTS,
}
IDLE_S = 1.0  # nothing claimable this long (or three rescue periods) and the worker stops
COMPLETION_TRIES = 20  # a completion after the claim's commit, tried again this often before the job is left claimed
ENQUEUE_PAUSE_S = 0.002  # between the enqueuer's jobs under --enqueue-during


@dataclass(frozen=True)
class FileSpec:
    index: int
    queue: object  # the engine's QueueEngine: connect()
    params: object  # the per-run user's connection parameters
    database: str
    sql: object  # the file's QueueSql for this engine
    path: str
    session_sql: tuple[str, ...]
    batch: int
    work_ms: float
    jobs: int


def _label(part: str, i: int) -> str:
    return f"{part}[{i}]"


class Statements:
    """Runs the file's statements on one connection; an error names the file's line."""

    def __init__(self, conn, path: str, worker: int, counts: dict[str, int]):
        self.conn = conn
        self.path = path
        self.worker = worker
        self.counts = counts

    def run(self, part: str, i: int, statement, values: dict[str, str]) -> list[int]:
        """The first column of the rows the statement returns, as job ids."""
        try:
            return self.conn.ids(statement.bind({"worker": str(self.worker), **values}))
        except (TypeError, ValueError):
            raise ScenarioError(self.path, f"{_label(part, i)}: returned rows whose first column is not a job id "
                                           "(a whole number)", statement.line) from None
        except ClaimError as exc:
            if exc.kind in RETRIED:
                label = _label(part, i)
                self.counts[label] = self.counts.get(label, 0) + 1
                raise
            # Not what a worker retries: the file's SQL is wrong for this server, told at its line.
            raise ScenarioError(self.path, f"{_label(part, i)}: {exc}", statement.line) from None

    def tool(self, label: str, sql: str) -> None:
        """One of the tool's statements (COMMIT, its record): a retried error counted under `label`."""
        try:
            self.conn.execute(sql)
        except ClaimError as exc:
            if exc.kind in RETRIED:
                self.counts[label] = self.counts.get(label, 0) + 1
            raise

    def taking(self, part: str, statements, values: dict[str, str]) -> list[int]:
        """The statements in order; the first that returns rows gives the job ids, bound as
        :job (that statement runs once per job) and :jobs in the later ones. [] when none
        does before a statement needs them."""
        ids: list[int] | None = None
        for i, statement in enumerate(statements):
            if ids is None and (statement.uses("job") or statement.uses("jobs")):
                return []
            if statement.uses("job"):
                for job in ids:
                    self.run(part, i, statement, {**values, "job": str(job)})
                continue
            rows = self.run(part, i, statement, {**values, "jobs": ", ".join(map(str, ids or ()))})
            if ids is None and rows:
                ids = rows
        return ids or []

    def per_job(self, part: str, statements, jobs: list[int]) -> None:
        for job in jobs:
            for i, statement in enumerate(statements):
                self.run(part, i, statement, {"job": str(job)})


class FileClaimer(Claimer):
    """One worker on the file's SQL: claim, record, work, complete, commit (docs/queue-format.md)."""

    def __init__(self, spec: FileSpec, shared: Shared):
        self.spec = spec
        self.shared = shared
        self.sql = spec.sql
        self.base = spec.index * claimers.N_FIELDS
        self.claim_ms: list[float] = []
        self.failures_in_a_row = 0
        self.retried_by_statement: dict[str, int] = {}
        self.conn = spec.queue.connect(spec.params, spec.database, spec.session_sql)
        self.bump(Field.THREAD_ID, self.conn.session_id)
        self.run_sql = Statements(self.conn, spec.path, spec.index, self.retried_by_statement)
        self.idle_s = max(IDLE_S, 3 * self.sql.rescue_ms / 1000)

    def run(self) -> None:
        idle_since, empties = None, 0
        while True:
            looking = time.monotonic()
            try:
                held = self.attempt(looking)
            except Retry:
                continue
            if held:
                idle_since, empties = None, 0
                continue
            now = time.monotonic()
            idle_since = idle_since or now
            if now - idle_since > self.idle_s or self.all_done():
                return
            empties += 1
            pause(EMPTY_BACKOFF_MS, empties)

    def all_done(self) -> bool:
        return self.conn.ids("SELECT COUNT(DISTINCT job_id) FROM jqd_done")[0] >= self.spec.jobs

    def attempt(self, looking: float) -> bool:
        try:
            # On a Galera node even BEGIN can answer ERROR 1213 (a write set applied there aborted
            # what the connection held): every statement is counted by what it is.
            self.run_sql.tool("begin", "BEGIN")
            ids = self.claim()
            self.bump(Field.CLAIMS)
            if not ids:
                self.run_sql.tool("rollback", "ROLLBACK")
                self.bump(Field.EMPTY)
                return False
            self.claim_ms.append((time.monotonic() - looking) * 1000)
            self.record("jqd_claims", ids)
            if self.sql.work == "after-commit":
                self.run_sql.tool("commit (claim)", "COMMIT")
                # Killable from here: a kill lands after the claim committed, the job in the
                # hands of a worker that is gone, which the file's rescue is for.
                self.hold(ids)
                self.record_effects(ids)
                self.work()
                self.complete_later(ids)
            else:
                self.hold(ids)
                self.record_effects(ids)
                self.work()
                self.complete_now(ids)
        except ClaimError as exc:
            self.rolled_back(exc)
        self.failures_in_a_row = 0
        return True

    def claim(self) -> list[int]:
        return self.run_sql.taking("claim", self.sql.claim, {"batch": str(self.spec.batch)})

    def record(self, table: str, ids: list[int]) -> None:
        rows = ", ".join(f"({int(job)}, {self.spec.index})" for job in ids)
        self.run_sql.tool(f"record ({table})", f"INSERT INTO {table} (job_id, worker) VALUES {rows}")

    def record_effects(self, ids: list[int]) -> None:
        at = time.time()
        rows = ", ".join(f"({int(job)}, {self.spec.index}, {at:.6f})" for job in ids)
        self.run_sql.tool("record (jqd_effects)", f"INSERT INTO jqd_effects (job_id, worker, at_s) VALUES {rows}")
        self.bump(Field.EFFECTS, len(ids))

    def work(self) -> None:
        if self.spec.work_ms:
            time.sleep(self.spec.work_ms / 1000)

    def complete_now(self, ids: list[int]) -> None:
        self.run_sql.per_job("complete", self.sql.complete, ids)
        self.record("jqd_done", ids)
        self.commit_held(ids)

    def complete_later(self, ids: list[int]) -> None:
        """The completion in a transaction of its own, tried again after a retried error; a job
        whose completion never passes stays claimed, for the file's rescue to find."""
        for _ in range(COMPLETION_TRIES):
            try:
                self.run_sql.tool("begin", "BEGIN")
                self.complete_now(ids)
                return
            except ClaimError as exc:
                if exc.kind not in RETRIED:
                    raise
                self.conn.rollback()
                self.bump(RETRIED[exc.kind])
                self.bump(Field.RETRIES)
        self.release()

    def commit_held(self, ids: list[int]) -> None:
        # As Claimer.complete: the parent kills only while holding this lock and seeing IN_TXN.
        with self.shared.commit_locks[self.spec.index]:
            self.set(Field.PHASE, Phase.COMMITTING)
        self.run_sql.tool("commit", "COMMIT")
        self.release()
        self.bump(Field.COMPLETED, len(ids))
        self.shared.last_commit[self.spec.index] = time.monotonic()

    def _counter_for(self, kind: str | None) -> Field | None:
        return RETRIED.get(kind)


# -- the parent's side: setup, the rescuer and enqueuer, the check -------------------------


class Helper(threading.Thread):
    """The rescuer (every rescue_ms) or the enqueuer (--enqueue-during), on a connection of its own."""

    def __init__(self, name: str, conn, path: str, counts: dict[str, int], step, every_s: float):
        super().__init__(name=name, daemon=True)
        self.sql = Statements(conn, path, -1, counts)
        self.conn = conn
        self.step = step
        self.every_s = every_s
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.wait(self.every_s):
                if self.step(self) is False:
                    return
        except BaseException as exc:  # told by the parent after the run
            self.error = exc

    def transaction(self, run) -> bool:
        """One transaction of what `run(statements)` sends; False when a retried error rolled it back."""
        try:
            self.conn.begin()
            run(self.sql)
            self.conn.commit()
            return True
        except ClaimError as exc:
            if exc.kind not in RETRIED:
                raise
            self.conn.rollback()
            return False


def rescuer(sql) -> object:
    def step(helper: Helper) -> None:
        helper.transaction(lambda run: run.taking("rescue", sql.rescue, {}))

    return step


def enqueuer(sql, jobs: list[int]) -> object:
    left = list(jobs)

    def step(helper: Helper) -> bool:
        if not left:
            return False
        if helper.transaction(lambda run: run.per_job("enqueue", sql.enqueue, left[:1])):
            left.pop(0)
        return True

    return step


def run_queue_file(config: WorkersConfig, server: ServerInfo, on_progress=None) -> WorkersSummary:
    sql = config.queue.for_engine(server.engine)
    path = config.queue.path
    with Scratch(server, confine=server.seam.confines(server)) as scratch:
        params = scratch.database.session_params
        user = scratch.queue.connect(params, scratch.name, ())
        first = config.jobs // 2 if config.enqueue_during else config.jobs
        _prepare(user, sql, path, first)
        crew = Crew(config.workers, max(1, len(server.nodes)))
        counts: dict[str, int] = {}
        helpers = _helpers(config, sql, path, scratch, params, counts, first)
        try:
            summary = _run(config, server, scratch, crew, sql, path, params, helpers, on_progress)
        finally:
            for helper in helpers:
                helper.stop.set()
                helper.join()
            crew.stop()
            scratch.kill_threads(crew.thread_ids())
        for helper in helpers:
            if isinstance(helper.error, DemoError):
                raise helper.error  # the file's SQL refused at its line: exit 2, as in a worker
            if helper.error is not None:
                raise ServerError(f"the {helper.name}: {helper.error}")
        for statement, count in counts.items():
            crew.retried_by_statement[statement] = crew.retried_by_statement.get(statement, 0) + count
        return _checked(summary, user, config, crew)


def _prepare(user, sql, path: str, jobs: int) -> None:
    """The file's schema and the tool's tables, then the first jobs in one transaction, as the per-run user."""
    run = Statements(user, path, -1, {})
    for i, statement in enumerate(sql.setup):
        run.run("setup", i, statement, {})
    for table in TOOL_TABLES:
        user.execute(table)
    user.begin()
    run.per_job("enqueue", sql.enqueue, list(range(1, jobs + 1)))
    user.commit()


def _helpers(config, sql, path, scratch, params, counts, first: int) -> list[Helper]:
    helpers = []
    if sql.rescue:
        conn = scratch.queue.connect(params, scratch.name, ())
        helpers.append(Helper("rescuer", conn, path, counts, rescuer(sql), sql.rescue_ms / 1000))
    if config.enqueue_during:
        conn = scratch.queue.connect(params, scratch.name, ())
        helpers.append(Helper("enqueuer", conn, path, counts, enqueuer(sql, list(range(first + 1, config.jobs + 1))), ENQUEUE_PAUSE_S))
    return helpers


def _run(config, server, scratch, crew, sql, path, params, helpers, on_progress) -> WorkersSummary:
    dialect = server.dialect
    settings = dialect.set_session(
        [dialect.isolation_setting(config.isolation), dialect.row_lock_timeout(claimers.LOCK_WAIT_TIMEOUT_S)]
    )
    specs = [
        FileSpec(
            i, scratch.queue, _on_node(server, params, i), scratch.name, sql, path, (settings,), config.batch,
            config.work_ms, config.jobs,
        )
        for i in range(config.workers)
    ]
    killer = Killer(config.kill, config.jobs, random.Random())
    crew.start(specs, functools.partial(claimers.worker_main, make=FileClaimer))
    crew.wait_ready()
    waits_before = scratch.row_lock_waits()
    started = crew.go()
    for helper in helpers:
        helper.start()
    supervise(crew, scratch, killer, Watch(config, started, waits_before, on_progress))
    killer.wait_for_notice(scratch)
    scratch.settle()
    ended = max(crew.shared.last_commit, default=started)
    waits = waits_since(scratch, waits_before)
    counted = QueueCheck(0, 0, 0, 0, 0, [None] * len(killer.kills))
    return summarise(config, server, crew, counted, killer.kills, max(ended - started, 1e-9), waits)


def _on_node(server: ServerInfo, params, index: int):
    """The per-run user's parameters on worker `index`'s node: on a cluster worker i talks to
    node i mod N + 1, as the built-in strategies' workers do."""
    if not server.nodes:
        return params
    node = server.nodes[index % len(server.nodes)]
    return replace(node, user=params.user, password=params.password, database=params.database)


def _checked(summary: WorkersSummary, user, config: WorkersConfig, crew: Crew) -> WorkersSummary:
    """The tool's verdict from its own tables, read after every worker has stopped."""

    def value(sql: str) -> int:
        return user.ids(sql)[0]

    completed = value("SELECT COUNT(DISTINCT job_id) FROM jqd_done")
    effects = value("SELECT COUNT(*) FROM jqd_effects")
    distinct = value("SELECT COUNT(DISTINCT job_id) FROM jqd_effects")
    # Completed twice, not merely run twice: a job whose worker died after its effect runs again
    # after any rescue (at least once); that shows as the effects' repeats.
    done_twice = value("SELECT COUNT(*) FROM (SELECT job_id FROM jqd_done GROUP BY job_id HAVING COUNT(*) > 1) twice")
    left = value(
        "SELECT COUNT(DISTINCT job_id) FROM jqd_claims WHERE job_id NOT IN (SELECT job_id FROM jqd_done)"
    )
    return replace(
        summary,
        strategy=f"queue {config.queue.name}",
        completed=completed,
        jobs_per_s=round(completed / summary.seconds, 1),
        lost=config.jobs - completed - left,
        effects=effects,
        external_duplicates=effects - distinct,
        done_twice=done_twice,
        left_claimed=left,
        retried_by_statement=dict(sorted(crew.retried_by_statement.items())),
    )
