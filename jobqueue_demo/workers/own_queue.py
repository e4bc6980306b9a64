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

import contextlib
import functools
import random
import threading
import time
from dataclasses import dataclass, replace

from ..engine.types import ClaimError, ServerInfo
from ..errors import DemoError, ScenarioError, ServerError
from . import claimers
from .claimers import EMPTY_BACKOFF_MS, Claimer, Field, Phase, Retry, Shared, pause
from .cluster import agree
from .own_record import TABLES, Kind, Record, injected_failure, verdict
from .crew import (
    Crew,
    add_counts,
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
    "CREATE TABLE jqd_effects (job_id INT NOT NULL, worker INT NOT NULL)",
    "CREATE TABLE jqd_done (job_id INT NOT NULL, worker INT NOT NULL)",
)
# What a real worker retries: the transaction was rolled back (or must be) and a new attempt may pass.
RETRIED = {
    "deadlock": Field.DEADLOCKS,
    "serialization-failure": Field.SERIALIZATION_FAILURES,
    "lock-not-available": Field.LOCK_TIMEOUTS,
}
IDLE_S = 1.0  # nothing claimable this long (or three rescue periods) and the worker stops
FAIL_TRIES = 20  # the file's `fail` or `retry` for a job, tried again this often before the job is left as it is
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
    fail_rate: float = 0.0


def _label(part: str, i: int) -> str:
    return f"{part}[{i}]"


class Statements:
    """Runs the file's statements on one connection; an error names the file's line."""

    def __init__(self, conn, path: str, worker: int, counts: dict[str, int], deadlocks: dict[str, int], jobs: int = 0):
        self.conn = conn
        self.path = path
        self.worker = worker
        self.counts = counts
        self.deadlocks = deadlocks
        self.jobs = jobs  # the ids a claim may return are 1..jobs (0: not checked)

    def counted(self, label: str, exc: ClaimError) -> None:
        if exc.kind in RETRIED:
            self.counts[label] = self.counts.get(label, 0) + 1
        if exc.kind == "deadlock":
            self.deadlocks[label] = self.deadlocks.get(label, 0) + 1

    def run(self, part: str, i: int, statement, values: dict[str, str]) -> list[int]:
        """The first column of the rows the statement returns, as job ids."""
        try:
            return self.conn.ids(statement.bind({"worker": str(self.worker), **values}))
        except (TypeError, ValueError):
            raise ScenarioError(self.path, f"{_label(part, i)}: returned rows whose first column is not a job id "
                                           "(a whole number)", statement.line) from None
        except ClaimError as exc:
            if exc.kind in RETRIED:
                self.counted(_label(part, i), exc)
                raise
            # Not what a worker retries: the file's SQL is wrong for this server, told at its line.
            raise ScenarioError(self.path, f"{_label(part, i)}: {exc}", statement.line) from None

    def tool(self, label: str, sql: str) -> None:
        """One of the tool's statements (COMMIT, its record): a retried error counted under `label`."""
        try:
            self.conn.execute(sql)
        except ClaimError as exc:
            self.counted(label, exc)
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
                self.enqueued(part, i, statement, rows)
                ids = rows
        return ids or []

    def enqueued(self, part: str, i: int, statement, ids: list[int]) -> None:
        stray = next((job for job in ids if self.jobs and not 1 <= job <= self.jobs), None)
        if stray is not None:
            raise ScenarioError(self.path, f"{_label(part, i)}: returned job id {stray}, which was never enqueued "
                                           f"(the jobs are 1 to {self.jobs})", statement.line)

    def per_job(self, part: str, statements, jobs: list[int]) -> None:
        for job in jobs:
            for i, statement in enumerate(statements):
                self.run(part, i, statement, {"job": str(job)})


class FileClaimer(Claimer):
    """One worker on the file's SQL: claim, record, work, complete, commit (docs/queue-format.md).

    What it saw commit is counted in the run's Record (own_record.py) as well as written to the
    tool's tables; each count is taken where the parent does not kill (`unkillable`)."""

    def __init__(self, spec: FileSpec, shared: Shared):
        self.spec = spec
        self.shared = shared
        self.record: Record = shared.record
        self.sql = spec.sql
        self.base = spec.index * claimers.N_FIELDS
        self.claim_ms: list[float] = []
        self.failures_in_a_row = 0
        self.retried_by_statement: dict[str, int] = {}
        self.deadlocked_by_statement: dict[str, int] = {}
        self.conn = spec.queue.connect(spec.params, spec.database, spec.session_sql)
        self.bump(Field.THREAD_ID, self.conn.session_id)
        self.run_sql = Statements(
            self.conn, spec.path, spec.index, self.retried_by_statement, self.deadlocked_by_statement, spec.jobs
        )
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
        ended = self.record.jobs_with(Kind.DONE)
        if not self.sql.retry:
            ended += sum(1 for job in self.record.counts(Kind.FAILED) if not self.record.count(Kind.DONE, job))
        return ended >= self.spec.jobs

    @contextlib.contextmanager
    def unkillable(self):
        """The parent kills only while it holds this worker's commit lock and sees IN_TXN."""
        with self.shared.commit_locks[self.spec.index]:
            before = self.shared.counters[self.base + Field.PHASE]
            self.set(Field.PHASE, Phase.COMMITTING)
        try:
            yield
        finally:
            self.set(Field.PHASE, before)

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
            self.record_rows("jqd_claims", ids)
            if self.sql.work == "after-commit":
                self.after_commit(ids)
            else:
                self.in_claim(ids)
        except ClaimError as exc:
            self.rolled_back(exc)
        self.failures_in_a_row = 0
        return True

    def claim(self) -> list[int]:
        return self.run_sql.taking("claim", self.sql.claim, {"batch": str(self.spec.batch)})

    def in_claim(self, ids: list[int]) -> None:
        self.hold(ids)
        failing = self.failing(ids)
        if failing:
            # The job raised inside its transaction: a library rolls that back, then fails the job.
            self.run_sql.tool("rollback", "ROLLBACK")
            self.failed(failing)
            return
        self.record_rows("jqd_effects", ids)
        self.bump(Field.EFFECTS, len(ids))
        self.work()
        self.complete_now(ids, (Kind.CLAIMED, Kind.EFFECT, Kind.DONE))

    def after_commit(self, ids: list[int]) -> None:
        with self.unkillable():
            self.run_sql.tool("commit (claim)", "COMMIT")
            self.record.add(Kind.CLAIMED, ids)
        # Killable from here: a kill lands after the claim committed, the job in the hands of a
        # worker that is gone, which the file's rescue is for.
        self.hold(ids)
        failing = self.failing(ids)
        ran = [job for job in ids if job not in failing]
        if ran:
            with self.unkillable():
                self.record_rows("jqd_effects", ran)
                self.record.add(Kind.EFFECT, ran)
            self.bump(Field.EFFECTS, len(ran))
        self.work()
        if failing:
            self.failed(failing)
        if ran:
            self.complete_later(ran)

    def failing(self, ids: list[int]) -> list[int]:
        """The jobs whose effect --fail-rate makes fail this time (each job's first execution only)."""
        failing = [
            job for job in ids
            if injected_failure(job, self.spec.fail_rate) and not self.record.count(Kind.INJECTED, job)
        ]
        if failing:
            with self.unkillable():
                self.record.add(Kind.INJECTED, failing)
        return failing

    def record_rows(self, table: str, ids: list[int]) -> None:
        rows = ", ".join(f"({int(job)}, {self.spec.index})" for job in ids)
        self.run_sql.tool(f"record ({table})", f"INSERT INTO {table} (job_id, worker) VALUES {rows}")

    def work(self) -> None:
        if self.spec.work_ms:
            time.sleep(self.spec.work_ms / 1000)

    def complete_now(self, ids: list[int], kinds: tuple[Kind, ...]) -> None:
        self.run_sql.per_job("complete", self.sql.complete, ids)
        self.record_rows("jqd_done", ids)
        with self.unkillable():
            self.run_sql.tool("commit", "COMMIT")
            for kind in kinds:
                self.record.add(kind, ids)
        self.release()
        self.bump(Field.COMPLETED, len(ids))
        self.shared.last_commit[self.spec.index] = time.monotonic()

    def complete_later(self, ids: list[int]) -> None:
        """The completion in a transaction of its own, after the job ran. A retried error there
        is not retried: the job ran, and a queue library's worker treats a completion that
        raised as the job failing, so the file's `fail` runs for it (without one the job is left
        as the claim left it, for the file's rescue to find)."""
        try:
            self.run_sql.tool("begin", "BEGIN")
            self.complete_now(ids, (Kind.DONE,))
        except ClaimError as exc:
            if exc.kind not in RETRIED:
                raise
            self.conn.rollback()
            self.bump(RETRIED[exc.kind])
            self.failed(ids)

    def failed(self, ids: list[int]) -> None:
        """The file's `fail` for each job, then its `retry`, each in a transaction of its own."""
        if self.transaction("fail", self.sql.fail, ids, Kind.FAILED) and self.sql.retry:
            self.transaction("retry", self.sql.retry, ids, None)
        self.release()

    def transaction(self, part: str, statements, ids: list[int], kind: Kind | None) -> bool:
        """`statements` per job in one transaction, tried again after a retried error; whether it committed."""
        if not statements:
            return False
        for _ in range(FAIL_TRIES):
            try:
                self.run_sql.tool("begin", "BEGIN")
                self.run_sql.per_job(part, statements, ids)
                with self.unkillable():
                    self.run_sql.tool(f"commit ({part})", "COMMIT")
                    if kind is not None:
                        self.record.add(kind, ids)
                return True
            except ClaimError as exc:
                if exc.kind not in RETRIED:
                    raise
                self.conn.rollback()
                self.bump(RETRIED[exc.kind])
                self.bump(Field.RETRIES)
        return False

    def _counter_for(self, kind: str | None) -> Field | None:
        return RETRIED.get(kind)


# -- the parent's side: setup, the rescuer and enqueuer, the check -------------------------


class Helper(threading.Thread):
    """The rescuer (every rescue_ms) or the enqueuer (--enqueue-during), on a connection of its own."""

    def __init__(self, name: str, conn, path: str, counts: tuple[dict[str, int], dict[str, int]], step, every_s: float):
        super().__init__(name=name, daemon=True)
        self.sql = Statements(conn, path, -1, *counts)
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
        crew.shared.record = Record(crew.ctx, config.jobs)
        counts: tuple[dict[str, int], dict[str, int]] = ({}, {})
        helpers = _helpers(config, sql, path, scratch, params, counts, first)
        try:
            summary, kills = _run(config, server, scratch, crew, sql, path, params, helpers, on_progress)
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
        add_counts(crew.retried_by_statement, counts[0])
        add_counts(crew.deadlocked_by_statement, counts[1])
        summary = _checked(summary, user, config, crew, sql, kills, single_server=not server.nodes)
        if scratch.nodes is None or summary.stopped is not None:
            return summary
        # Every node's copy of every table, the file's and the tool's, read once it has applied everything.
        return replace(summary, nodes=len(server.nodes), nodes_agree=agree(scratch.nodes.copies()))


def _prepare(user, sql, path: str, jobs: int) -> None:
    """The file's schema and the tool's tables, then the first jobs in one transaction, as the per-run user."""
    run = Statements(user, path, -1, {}, {})
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
            config.work_ms, config.jobs, config.fail_rate,
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
    return summarise(config, server, crew, counted, killer.kills, max(ended - started, 1e-9), waits), killer.kills


def _on_node(server: ServerInfo, params, index: int):
    """The per-run user's parameters on worker `index`'s node: on a cluster worker i talks to
    node i mod N + 1, as the built-in strategies' workers do."""
    if not server.nodes:
        return params
    node = server.nodes[index % len(server.nodes)]
    return replace(node, user=params.user, password=params.password, database=params.database)


def _checked(summary: WorkersSummary, user, config: WorkersConfig, crew: Crew, sql, kills, single_server: bool):
    """The verdict from the workers' own count (own_record.py), the tool's tables checked
    against it, read after every worker has stopped."""
    tables = {kind: _per_job(user, table) for kind, table in TABLES.items()}
    held = {job for kill in kills for job in kill.held}
    judged = verdict(crew.shared.record, tables, held, retries=bool(sql.retry))
    return replace(
        summary,
        strategy=f"queue {config.queue.name}",
        completed=judged.completed,
        jobs_per_s=round(judged.completed / summary.seconds, 1),
        lost=config.jobs - judged.completed - judged.left_claimed - judged.failed,
        effects=judged.effects,
        external_duplicates=judged.repeats,
        done_twice=judged.done_twice,
        left_claimed=judged.left_claimed,
        run_again=judged.run_again,
        failed_jobs=judged.failed,
        failures_injected=judged.injected,
        fail_runs=judged.fail_runs,
        record_tampered=judged.tampered,
        retried_by_statement=dict(sorted(crew.retried_by_statement.items())),
        deadlocked_by_statement=dict(sorted(crew.deadlocked_by_statement.items())),
        deadlocks_are_findings=single_server,
    )


def _per_job(user, table: str) -> dict:
    """Rows per job id in one of the tool's tables; a table the file's SQL made unreadable is a difference too."""
    try:
        rows = user.rows(f"SELECT job_id, COUNT(*) FROM {table} GROUP BY job_id")
        return {(None if job is None else int(job)): int(count) for job, count in rows}
    except ClaimError as exc:
        return {f"(unreadable: {exc})": 1}
