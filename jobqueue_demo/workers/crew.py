"""Many worker processes on one queue: a claim strategy under load, faults, and the invariants.

Each worker is an OS process of its own (see claimers.py for what it runs) with its own
connections. Processes come from a multiprocessing *forkserver*: a clean, single-threaded
process that has imported the worker code once and forks each worker in milliseconds. Plain
fork would copy this process's open server sockets and threads into every worker; spawn (or a
`python -m` subprocess) would pay a fresh interpreter and database driver import per worker, seconds
for a 16-worker bench step on two cores. Shared memory (counters, the commit locks a kill
needs) passes to forkserver children as process arguments.

The run happens in a scratch database `jqd_<random>` that is dropped at the end, also after
an error or Ctrl-C; the worker processes are SIGKILLed first.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import signal
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from ..engine.seam import hold_for_life
from ..engine.types import STATE_ORDERS, ServerInfo, on_node
from ..errors import STOP_WORDS, ServerError, UsageError, WorkersStuck, stop_of
from . import claimers
from .claimers import MAX_BATCH, Field, Phase, Shared, WorkerDone, WorkerFailed, WorkerSpec
from .lifeline import RUN_PID_ENV
from .stall import diagnose
from .strategies import STRATEGIES

ISOLATIONS = ("read-committed", "repeatable-read")
MAX_WORKERS = 64
MAX_JOBS = 1_000_000
MAX_WORK_MS = 10_000
MAX_LEASE_MS = 600_000
INSERT_CHUNK = 5000
READY_TIMEOUT_S = 30.0
# A run with no completed job for this long is stuck (or the server is); long enough for
# the slowest strategy at the largest --work-ms.
STALL_S = 30.0
# The control connection's longest wait for an answer: a server silent this long is gone
# (exit 3), found well within the stall window; the run's default step timeout.
ANSWER_TIMEOUT_S = 10.0
# Below a few supervising ticks a run would count its own start as a stall.
STALL_RANGE_S = (0.1, 3600)
PROGRESS_EVERY_S = 0.25
# How long no job may complete before the supervisor asks the server whether it still answers.
QUIET_S = 1.0
TICK_S = 0.02
# While a kill waits for a worker in its transaction, or for the server to drop the killed
# worker's thread, tick this often. PROCESSLIST is built on each read (unlike InnoDB's cached
# INNODB_TRX), so polling it this fast gives exact answers.
NOTICE_POLL_S = 0.001
NOTICE_TIMEOUT_S = 30.0
# Kills land between 10 % and 60 % of the jobs, so there is work left for the others.
KILL_WINDOW = (0.1, 0.6)

@dataclass(frozen=True)
class WorkersConfig:
    strategy: str = "skip-locked"
    isolation: str = "repeatable-read"
    workers: int = 4
    jobs: int = 1000
    batch: int = 1
    work_ms: float = 1.0
    kill: int = 0
    idempotency_key: bool = False
    state_order: str = "done-last"
    lease_ms: float | None = None  # None: the strategy's default
    stall_s: float = STALL_S
    # A queue file (scenario/queue_file.QueueFile) whose SQL the workers run instead of a strategy's.
    queue: object | None = None
    enqueue_during: bool = False  # half the jobs are enqueued while the workers claim (queue files)
    fail_rate: float = 0.0  # a queue file's run: the share of jobs whose first execution fails (own_record.py)

    @property
    def lease(self) -> float:
        """The lease in ms for the lease strategies, 0 for the others."""
        strategy = STRATEGIES.get(self.strategy)
        if strategy is None or not strategy.lease:
            return 0.0
        return strategy.lease_ms if self.lease_ms is None else self.lease_ms


def validate(config: WorkersConfig) -> None:
    """Raise UsageError (one line) for values that cannot make a meaningful run."""
    if config.queue is None and config.strategy not in STRATEGIES:
        raise UsageError(f"unknown strategy {config.strategy!r}: choose from {', '.join(STRATEGIES)}")
    if config.isolation not in ISOLATIONS:
        raise UsageError(f"unknown isolation {config.isolation!r}: choose from {', '.join(ISOLATIONS)}")
    _in_range("workers", config.workers, 1, MAX_WORKERS)
    _in_range("jobs", config.jobs, 1, MAX_JOBS)
    _in_range("batch", config.batch, 1, min(MAX_BATCH, config.jobs))
    _in_range("work-ms", config.work_ms, 0, MAX_WORK_MS)
    if not 0 <= config.kill < config.workers:
        raise UsageError(f"--kill must be from 0 to {config.workers - 1} so that a worker survives, got {config.kill}")
    if config.enqueue_during and config.queue is None:
        raise UsageError("--enqueue-during needs --queue: the built-in strategies enqueue every job at the start")
    _in_range("fail-rate", config.fail_rate, 0, 1)
    if config.fail_rate and (config.queue is None or not all(sql.fail for sql in config.queue.variants.values())):
        raise UsageError("--fail-rate needs a queue file with fail: (what your queue runs when a job fails)")
    if config.kill and config.queue is None and STRATEGIES[config.strategy].ceiling:
        raise UsageError(f"{config.strategy} cannot take --kill: no other worker ever claims a killed worker's rows")
    if config.state_order not in STATE_ORDERS:
        raise UsageError(f"unknown state order {config.state_order!r}: choose from {', '.join(STATE_ORDERS)}")
    if config.lease_ms is not None:
        _in_range("lease-ms", config.lease_ms, 1, MAX_LEASE_MS)
    _in_range("stall", config.stall_s, *STALL_RANGE_S)


def _in_range(name: str, value: float, low: float, high: float) -> None:
    if not (low <= value <= high) or (isinstance(value, float) and math.isnan(value)):
        raise UsageError(f"--{name} must be from {low:,} to {high:,}, got {value:,}")


# -- what the caller sees --------------------------------------------------------


@dataclass(frozen=True)
class WorkerView:
    index: int
    state: str  # running, done, killed
    completed: int
    claims: int
    empty: int
    deadlocks: int
    lock_timeouts: int
    nowait_failures: int
    retries: int
    leases_lost: int = 0
    serialization_failures: int = 0


@dataclass(frozen=True)
class Progress:
    elapsed_s: float
    completed: int
    jobs: int
    workers: list[WorkerView]
    row_lock_waits: int | None
    killed: int
    row_lock_waits_scope: str = "server-wide"

    @property
    def jobs_per_s(self) -> float:
        return self.completed / self.elapsed_s if self.elapsed_s > 0 else 0.0


@dataclass
class Kill:
    worker: int
    thread_id: int
    at: float
    held: tuple[int, ...]
    noticed_ms: float | None = None
    wall: float = field(default_factory=time.time)  # the workers' clock, to compare with effects.at_s


@dataclass
class WorkersSummary:
    server: str
    strategy: str
    isolation: str
    workers: int
    jobs: int
    batch: int
    work_ms: float
    completed: int
    seconds: float
    jobs_per_s: float
    claim_ms_p50: float | None
    claim_ms_p99: float | None
    deadlocks: int
    lock_wait_timeouts: int
    nowait_failures: int
    serialization_failures: int
    row_lock_waits: int | None
    row_lock_waits_scope: str
    empty_claims: int
    retries: int
    killed: int
    notice_ms: list[float]
    rerun_ms: list[float | None]
    reclaimed: int
    lost: int
    duplicated: int
    effects: int
    external_duplicates: int
    deduplicated: int
    idempotency_key: bool
    leases_lost: int
    lease_ms: float
    state_order: str
    per_worker: list[WorkerView] = field(default_factory=list)
    nodes: int = 1  # the Galera nodes the workers were spread over
    nodes_agree: bool | None = None  # every node holds the same jobs and completions (a cluster)
    # A queue file's run: jobs whose effect committed more than once, jobs a committed claim
    # took and nobody completed, and the retried errors by the file's statement ("claim[1]").
    done_twice: int = 0
    left_claimed: int = 0
    retried_by_statement: dict = field(default_factory=dict)
    # ... jobs whose effect ran again though no killed worker held them (a completion rolled
    # back after the job ran: the job was failed and claimed again), jobs the file's `fail`
    # ended (a file without `retry`), the deadlocks by statement, which on a single server are
    # a finding (the file's statements lock in crossing orders; on a cluster a 1213 is mostly
    # certification), and the first place the tool's tables differ from its workers' own count.
    run_again: int = 0
    failed_jobs: int = 0
    failures_injected: int = 0  # --fail-rate: jobs whose first execution failed
    fail_runs: int = 0  # the file's `fail` committed, per job
    deadlocked_by_statement: dict = field(default_factory=dict)
    deadlocks_are_findings: bool = False
    record_tampered: str | None = None
    # The stop signal (a KeyboardInterrupt) that ended the run early: the figures are what the
    # workers counted until then, and the queue was not checked.
    stopped: BaseException | None = field(default=None, repr=False)

    @property
    def invariants_hold(self) -> bool:
        return (
            self.stopped is None and self.lost == 0 and self.duplicated == 0
            and self.completed + self.failed_jobs == self.jobs and self.nodes_agree is not False and self.done_twice == 0
            and self.left_claimed == 0 and self.run_again == 0 and self.record_tampered is None
            and not self.deadlock_finding
        )

    @property
    def deadlock_finding(self) -> str:
        """The deadlocks by statement when they are a finding, else ''."""
        if not self.deadlocks_are_findings or not self.deadlocked_by_statement:
            return ""
        return ", ".join(f"{where} {count:,}" for where, count in self.deadlocked_by_statement.items())

    @property
    def verdict(self) -> str:
        """One line that says whether the run kept its promises."""
        if self.stopped is not None:
            return f"{stop_of(self.stopped)} after {self.completed} of {self.jobs} job(s) completed; the queue was not checked"
        if self.invariants_hold:
            return "invariants hold: no job lost, none done twice" + (" on every node" if self.nodes > 1 else "")
        if self.record_tampered:
            return f"verdict refused: {self.record_tampered}"
        if self.nodes_agree is False:
            return "invariants violated: the nodes disagree on the jobs or completions"
        if self.strategy.startswith("queue "):
            return self._queue_verdict()
        return (
            f"invariants violated: {self.lost} lost, {self.duplicated} second completion(s), "
            f"{self.completed} of {self.jobs} completed"
        )

    def _queue_verdict(self) -> str:
        broken = [
            f"{self.lost} lost", f"{self.done_twice} done twice", f"{self.left_claimed} left claimed",
            f"{self.run_again} run again", f"{self.completed} of {self.jobs} completed",
        ]
        if self.failed_jobs:
            broken.insert(-1, f"{self.failed_jobs} failed")
        if self.lost or self.done_twice or self.left_claimed or self.run_again or self.completed + self.failed_jobs != self.jobs:
            verdict = "invariants violated: " + ", ".join(broken)
            return verdict + (f"; deadlocks at {self.deadlock_finding}" if self.deadlock_finding else "")
        return (
            f"deadlocks: {self.deadlock_finding} (the file's statements lock in crossing orders; each was "
            "rolled back and retried); no job lost, none done twice"
        )

    def as_dict(self) -> dict:
        """The summary as flat JSON-ready values, per-worker rows included."""
        out = asdict(replace(self, stopped=None))
        out["stopped"] = None if self.stopped is None else str(stop_of(self.stopped))
        out["invariants_hold"] = self.invariants_hold
        out["verdict"] = self.verdict
        return out


def percentile(values: list[float], share: float) -> float | None:
    """Nearest-rank percentile, rounded to microseconds; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(share * len(ordered)))
    return round(ordered[rank - 1], 3)


# -- the scratch database ----------------------------------------------------------


class Scratch:
    """The run's scratch database and the control connection that sets up, watches and checks it."""

    def __init__(self, server: ServerInfo, confine: bool = False):
        self.server = server
        self.queue = server.seam.queue()
        # The built-in strategies' SQL is the tool's own: no per-run user to confine it. A queue
        # file's is not (`confine`): it runs as the per-run user.
        self.database = server.seam.scratch(server, confine=confine, answer_timeout=ANSWER_TIMEOUT_S)
        self.name = self.database.name
        # On a cluster, each node's counters, the workers' threads on their nodes, a stall's
        # picture read on every node, each node's rows.
        self.nodes = self.queue.on_nodes(server, self.name) if len(server.nodes) > 1 else None

    def __enter__(self) -> Scratch:
        self.database.open()
        return self

    def __exit__(self, exc_type, *exc_info: object) -> None:
        if self.nodes is not None:
            self.nodes.close()
        # With the server gone there is nothing left to drop; keep the first error.
        self.database.close(quiet=exc_type is not None)

    def rows(self, sql: str) -> tuple:
        return self.database.rows(sql)

    def execute(self, sql: str) -> None:
        self.rows(sql)

    def value(self, sql: str) -> int:
        return int(self.rows(sql)[0][-1] or 0)

    def prepare(self, jobs: int, state_order: str = "done-last") -> None:
        for sql in self.queue.schema(state_order):
            self.execute(sql)
        for first in range(1, jobs + 1, INSERT_CHUNK):
            ids = range(first, min(first + INSERT_CHUNK, jobs + 1))
            self.execute("INSERT INTO jobs (id) VALUES " + ",".join(f"({i})" for i in ids))

    def row_lock_waits(self) -> int | None:
        """The server's count of row lock waits (server-wide), None where the engine keeps none;
        on a cluster, summed over the nodes."""
        if self.nodes is not None:
            return self.nodes.lock_wait_count()
        return self.queue.lock_wait_count(self.database)

    def threads_present(self, thread_ids: list[int]) -> set[int]:
        """Which workers' threads the server still lists; on a cluster each on its own node."""
        if self.nodes is not None:
            return self.nodes.sessions_present(thread_ids)
        return self.queue.sessions_present(self.database, thread_ids)

    def kill_threads(self, thread_ids: list[int]) -> None:
        """End the workers' server sessions so none holds a lock that DROP DATABASE waits for."""
        for thread in thread_ids:
            with contextlib.suppress(ServerError):  # already gone
                if self.nodes is not None:
                    self.nodes.kill(thread)
                else:
                    self.execute(self.server.dialect.kill_connection(thread))

    def settle(self) -> None:
        """On a cluster, node 1 (where the checks read) applies what every node committed."""
        if self.nodes is not None:
            self.nodes.settle()


@dataclass(frozen=True)
class QueueCheck:
    completed: int
    lost: int
    effects: int
    external_duplicates: int
    reclaimed: int
    rerun_ms: list[float | None]


def check(scratch: Scratch, kills: list[Kill]) -> QueueCheck:
    """The invariants, read from the database after every worker has stopped."""
    effects = scratch.value("SELECT COUNT(*) FROM effects")
    return QueueCheck(
        completed=scratch.value("SELECT COUNT(*) FROM completions"),
        lost=scratch.value(
            "SELECT COUNT(*) FROM jobs j LEFT JOIN completions c ON c.job_id = j.id"
            " WHERE j.state <> 'done' OR c.job_id IS NULL"
        ),
        effects=effects,
        external_duplicates=effects - scratch.value("SELECT COUNT(DISTINCT job_id) FROM effects"),
        reclaimed=sum(_reclaimed(scratch, kill) for kill in kills),
        rerun_ms=[_rerun_ms(scratch, kill) for kill in kills],
    )


def _rerun_ms(scratch: Scratch, kill: Kill) -> float | None:
    """From a kill to the first time another worker claimed (and so ran) a job it held."""
    if not kill.held:
        return None
    listed = ", ".join(str(j) for j in kill.held)
    first = scratch.rows(f"SELECT MIN(at_s) FROM effects WHERE job_id IN ({listed}) AND worker <> {kill.worker}")
    return None if not first or first[0][0] is None else round((float(first[0][0]) - kill.wall) * 1000, 1)


def _reclaimed(scratch: Scratch, kill: Kill) -> int:
    """How many of the jobs a killed worker held were completed by another worker."""
    if not kill.held:
        return 0
    listed = ", ".join(str(j) for j in kill.held)
    return scratch.value(f"SELECT COUNT(*) FROM completions WHERE job_id IN ({listed}) AND worker <> {kill.worker}")


# -- the worker processes ------------------------------------------------------------


VIEW_FIELDS = (
    Field.COMPLETED, Field.CLAIMS, Field.EMPTY, Field.DEADLOCKS, Field.LOCK_TIMEOUTS, Field.NOWAIT_FAILURES, Field.RETRIES,
    Field.LEASES_LOST, Field.SERIALIZATION_FAILURES,
)
_GONE = object()  # a worker's pipe closed with no message: the process died


def add_counts(into: dict[str, int], counts: dict[str, int]) -> None:
    for name, count in counts.items():
        into[name] = into.get(name, 0) + count


def _context():
    import multiprocessing.util

    # The forkserver's socket lives in this pymp-* folder, left behind if we are SIGKILLed:
    # the marker lets a later run's sweep tell it from live ones (and from other programs').
    hold_for_life(Path(multiprocessing.util.get_temp_dir()))
    ctx = multiprocessing.get_context("forkserver")
    # The forkserver starts once per process and reads this then; see lifeline.py.
    os.environ[RUN_PID_ENV] = str(os.getpid())
    ctx.set_forkserver_preload(["jobqueue_demo.workers.forkserver_lifeline", "__main__", "jobqueue_demo.workers.claimers"])
    return ctx


class Crew:
    """The worker processes of one run and their shared memory."""

    def __init__(self, workers: int, nodes: int = 1):
        ctx = _context()
        self.ctx = ctx
        self.size = workers
        self.nodes = nodes  # worker i talks to node i mod nodes + 1
        self.shared = Shared(
            counters=ctx.RawArray("q", workers * claimers.N_FIELDS),
            last_commit=ctx.RawArray("d", workers),
            held=ctx.RawArray("q", workers * MAX_BATCH),
            commit_locks=[ctx.Lock() for _ in range(workers)],
            ready=ctx.Semaphore(0),
            go=ctx.Event(),
        )
        self.processes: list = []
        self.pipes: list = []
        self.states = ["running"] * workers
        self.claim_ms: list[float] = []
        self.retried_by_statement: dict[str, int] = {}
        self.deadlocked_by_statement: dict[str, int] = {}

    def start(self, specs: list, target: Callable = claimers.worker_main) -> None:
        for spec in specs:
            reader, writer = self.ctx.Pipe(duplex=False)
            process = self.ctx.Process(target=target, args=(spec, self.shared, writer), daemon=True)
            # A stop signal waits until the process is recorded, so stop() kills it: one started
            # and then forgotten went on unpickling the shared counters the clean-up had
            # removed, and printed a traceback.
            with _stop_signals_held():
                process.start()
                self.processes.append(process)
            writer.close()
            self.pipes.append(reader)

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        for _ in range(self.size):
            while not self.shared.ready.acquire(timeout=0.1):
                self.reap()
                if time.monotonic() > deadline:
                    raise ServerError(f"the workers did not connect within {READY_TIMEOUT_S:.0f} s")

    def go(self) -> float:
        started = time.monotonic()
        self.shared.go.set()
        return started

    def counter(self, index: int, which: Field) -> int:
        return self.shared.counters[index * claimers.N_FIELDS + which]

    def total(self, which: Field) -> int:
        return sum(self.counter(i, which) for i in range(self.size))

    def thread_id(self, index: int) -> int:
        """The worker's server thread (0 before it connects); on a cluster, an id that carries
        its node (node_waits.on_node), since each node numbers its threads itself."""
        thread = self.counter(index, Field.THREAD_ID)
        return on_node(index % self.nodes + 1, thread) if thread else 0

    def thread_ids(self) -> list[int]:
        return [t for t in map(self.thread_id, range(self.size)) if t]

    @property
    def running(self) -> bool:
        return "running" in self.states

    def reap(self) -> None:
        """Collect finished workers' results; a worker's failure becomes this run's error."""
        for index, process in enumerate(self.processes):
            if self.states[index] != "running":
                continue
            message = self._message(index)
            if isinstance(message, WorkerFailed):
                raise ServerError(message.message)
            if isinstance(message, WorkerDone):
                self.claim_ms.extend(message.claim_ms)
                add_counts(self.retried_by_statement, message.retried_by_statement)
                add_counts(self.deadlocked_by_statement, message.deadlocked_by_statement)
                self.states[index] = "done"
            elif message is _GONE:
                process.join()
                raise ServerError(f"worker {index} died without a word (exit code {process.exitcode})")

    def _message(self, index: int):
        pipe = self.pipes[index]
        try:
            return pipe.recv() if pipe.poll() else None
        except EOFError:
            return _GONE

    def in_transaction(self) -> list[int]:
        return [
            i for i in range(self.size) if self.states[i] == "running" and self.counter(i, Field.PHASE) == Phase.IN_TXN
        ]

    def kill(self, index: int) -> Kill | None:
        """SIGKILL a worker that holds claimed rows, before it can commit them; None if it no longer does."""
        lock = self.shared.commit_locks[index]
        if not lock.acquire(timeout=0.05):
            return None
        try:
            if self.counter(index, Field.PHASE) != Phase.IN_TXN:
                return None
            held = self.counter(index, Field.HELD)
            start = index * MAX_BATCH
            kill = Kill(index, self.thread_id(index), time.monotonic(), tuple(self.shared.held[start : start + held]))
            os.kill(self.processes[index].pid, signal.SIGKILL)
            self.processes[index].join()
            self.states[index] = "killed"
            return kill
        finally:
            lock.release()

    def stop(self) -> None:
        """SIGKILL whatever still runs; nothing outlives the run."""
        for process in self.processes:
            if process.exitcode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGKILL)
        for process in self.processes:
            process.join()
        for pipe in self.pipes:
            pipe.close()

    def views(self) -> list[WorkerView]:
        return [self._view(i) for i in range(self.size)]

    def _view(self, i: int) -> WorkerView:
        return WorkerView(i, self.states[i], *(self.counter(i, which) for which in VIEW_FIELDS))


# -- kills -----------------------------------------------------------------------------


class Killer:
    """Kills `count` workers mid-transaction at random points of the run and times the server's notice."""

    def __init__(self, count: int, jobs: int, rng: random.Random):
        low, high = KILL_WINDOW
        self.thresholds = sorted(rng.uniform(low, high) * jobs for _ in range(count))
        self.rng = rng
        self.kills: list[Kill] = []

    @property
    def pending(self) -> list[Kill]:
        return [k for k in self.kills if k.noticed_ms is None]

    def due(self, completed: int) -> bool:
        return len(self.kills) < len(self.thresholds) and completed >= self.thresholds[len(self.kills)]

    def busy(self) -> bool:
        """Whether a kill is still to come or waits for the server's notice: then the run is
        watched closely, since a short run can pass a kill's threshold and end within one tick."""
        return len(self.kills) < len(self.thresholds) or bool(self.pending)

    def step(self, crew: Crew, scratch: Scratch, completed: int) -> None:
        if self.due(completed):
            candidates = crew.in_transaction()
            if candidates:
                kill = crew.kill(self.rng.choice(candidates))
                if kill is not None:
                    self.kills.append(kill)
        if self.pending:
            self.notice(scratch)

    def notice(self, scratch: Scratch) -> None:
        pending = self.pending
        present = scratch.threads_present([k.thread_id for k in pending])
        now = time.monotonic()
        for kill in pending:
            if kill.thread_id not in present:
                kill.noticed_ms = round((now - kill.at) * 1000, 3)

    def wait_for_notice(self, scratch: Scratch) -> None:
        deadline = time.monotonic() + NOTICE_TIMEOUT_S
        while self.pending:
            if time.monotonic() > deadline:
                raise ServerError(f"the server still lists a killed worker's connection after {NOTICE_TIMEOUT_S:.0f} s")
            self.notice(scratch)
            time.sleep(NOTICE_POLL_S)


# -- the run ------------------------------------------------------------------------------


ProgressCallback = Callable[[Progress], None]


def run_workers(config: WorkersConfig, server: ServerInfo, on_progress: ProgressCallback | None = None) -> WorkersSummary:
    """Run the workers to the end in a scratch database and return the checked summary.

    Raises WorkersStuck, with the server's waits-for picture, when no job completes for
    `config.stall_s`.
    """
    validate(config)
    with Scratch(server) as scratch:
        scratch.prepare(config.jobs, config.state_order)
        crew = Crew(config.workers, max(1, len(server.nodes)))
        try:
            if scratch.nodes is not None:
                return _on_nodes(config, server, scratch, crew, on_progress)
            return _run(config, server, scratch, crew, on_progress)
        finally:
            crew.stop()
            scratch.kill_threads(crew.thread_ids())


def _on_nodes(config: WorkersConfig, server: ServerInfo, scratch: Scratch, crew: Crew, on_progress) -> WorkersSummary:
    from .cluster import agree

    scratch.nodes.wait_for_jobs()
    summary = _run(config, server, scratch, crew, on_progress)
    if summary.stopped is not None:
        return summary
    return replace(summary, nodes=len(server.nodes), nodes_agree=agree(scratch.nodes.states()))


def _run(config: WorkersConfig, server: ServerInfo, scratch: Scratch, crew: Crew, on_progress) -> WorkersSummary:
    killer = Killer(config.kill, config.jobs, random.Random())
    started = time.monotonic()
    try:
        crew.start(_specs(config, server, scratch))
        crew.wait_ready()
        waits_before = scratch.row_lock_waits()
        started = crew.go()
        supervise(crew, scratch, killer, Watch(config, started, waits_before, on_progress))
    except KeyboardInterrupt as stop:
        return _stopped(config, server, crew, killer, started, stop)
    killer.wait_for_notice(scratch)
    scratch.settle()
    ended = max(crew.shared.last_commit, default=started)
    waits = waits_since(scratch, waits_before)
    return summarise(config, server, crew, check(scratch, killer.kills), killer.kills, max(ended - started, 1e-9), waits)


def _stopped(config: WorkersConfig, server: ServerInfo, crew: Crew, killer: Killer, started: float, stop) -> WorkersSummary:
    """What the workers counted before a stop signal; the server is asked nothing more, so the
    queue is not checked (the run's clean-up still drops it)."""
    counted = QueueCheck(crew.total(Field.COMPLETED), lost=0, effects=0, external_duplicates=0, reclaimed=0, rerun_ms=[])
    summary = summarise(config, server, crew, counted, killer.kills, max(time.monotonic() - started, 1e-9), None)
    return replace(summary, stopped=stop)


@contextlib.contextmanager
def _stop_signals_held():
    """The stop signals held back while the block runs, and delivered after it."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_WORDS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def row_lock_waits_scope(server: ServerInfo, counted: bool = True) -> str:
    """Innodb_row_lock_waits is a global counter: exact on a private server, server-wide otherwise."""
    if not counted:
        return "not counted by this server"
    return "this run" if server.embedded else "server-wide"


def waits_since(scratch: Scratch, before: int | None) -> int | None:
    now = scratch.row_lock_waits()
    return None if now is None or before is None else now - before


def _specs(config: WorkersConfig, server: ServerInfo, scratch: Scratch) -> list[WorkerSpec]:
    dialect = server.dialect
    settings = dialect.set_session(
        [dialect.isolation_setting(config.isolation), dialect.row_lock_timeout(claimers.LOCK_WAIT_TIMEOUT_S)]
    )
    return [
        WorkerSpec(
            index=i,
            queue=scratch.queue,
            # On a cluster, worker i talks to node i mod N.
            params=server.nodes[i % len(server.nodes)] if server.nodes else server.params,
            database=scratch.name,
            strategy=config.strategy,
            session_sql=(settings,),
            batch=config.batch,
            work_ms=config.work_ms,
            idempotency_key=config.idempotency_key,
            workers=config.workers,
            jobs=config.jobs,
            lease_ms=config.lease,
        )
        for i in range(config.workers)
    ]


@dataclass
class Watch:
    """What the supervising loop tracks between ticks."""

    config: WorkersConfig
    started: float
    waits_before: int | None
    on_progress: ProgressCallback | None
    last_report: float = 0.0
    last_completed: int = 0
    last_change: float = 0.0


def supervise(crew: Crew, scratch: Scratch, killer: Killer, watch: Watch) -> None:
    watch.last_change = watch.started
    while crew.running:
        crew.reap()
        completed = crew.total(Field.COMPLETED)
        killer.step(crew, scratch, completed)
        now = time.monotonic()
        if completed != watch.last_completed:
            watch.last_completed, watch.last_change = completed, now
        elif now - watch.last_change > watch.config.stall_s:
            raise WorkersStuck(
                f"no job completed for {watch.config.stall_s:g} s ({completed} of {watch.config.jobs} done)",
                diagnose(scratch, _worker_threads(crew)),
            )
        if watch.on_progress is not None and now - watch.last_report >= PROGRESS_EVERY_S:
            watch.on_progress(_progress(crew, scratch, killer, watch, now))
            watch.last_report = now
        elif now - watch.last_change > QUIET_S and now - watch.last_report >= QUIET_S:
            # No view asks the server anything (--json): a quiet queue still asks, so a server
            # that fell silent ends the run (exit 3) one answer timeout later, not after the stall window.
            scratch.value("SELECT 1")
            watch.last_report = now
        time.sleep(NOTICE_POLL_S if killer.busy() else TICK_S)


def _progress(crew: Crew, scratch: Scratch, killer: Killer, watch: Watch, now: float) -> Progress:
    return Progress(
        elapsed_s=now - watch.started,
        completed=crew.total(Field.COMPLETED),
        jobs=watch.config.jobs,
        workers=crew.views(),
        row_lock_waits=waits_since(scratch, watch.waits_before),
        killed=len(killer.kills),
        row_lock_waits_scope=row_lock_waits_scope(scratch.server, watch.waits_before is not None),
    )


def _worker_threads(crew: Crew) -> dict[int, int]:
    """The run's thread id (which carries the node on a cluster) -> worker index, for the workers that still run."""
    return {crew.thread_id(i): i for i in range(crew.size) if crew.states[i] == "running" and crew.thread_id(i)}


def summarise(
    config: WorkersConfig, server: ServerInfo, crew: Crew, checked: QueueCheck, kills: list[Kill], seconds: float, waits: int
) -> WorkersSummary:
    return WorkersSummary(
        server=server.label,
        strategy=config.strategy,
        isolation=config.isolation,
        workers=config.workers,
        jobs=config.jobs,
        batch=config.batch,
        work_ms=config.work_ms,
        completed=checked.completed,
        seconds=round(seconds, 4),
        jobs_per_s=round(checked.completed / seconds, 1),
        claim_ms_p50=percentile(crew.claim_ms, 0.50),
        claim_ms_p99=percentile(crew.claim_ms, 0.99),
        deadlocks=crew.total(Field.DEADLOCKS),
        lock_wait_timeouts=crew.total(Field.LOCK_TIMEOUTS),
        nowait_failures=crew.total(Field.NOWAIT_FAILURES),
        serialization_failures=crew.total(Field.SERIALIZATION_FAILURES),
        row_lock_waits=waits,
        row_lock_waits_scope=row_lock_waits_scope(server, waits is not None),
        empty_claims=crew.total(Field.EMPTY),
        retries=crew.total(Field.RETRIES),
        killed=len(kills),
        notice_ms=[k.noticed_ms for k in kills],
        rerun_ms=checked.rerun_ms,
        reclaimed=checked.reclaimed,
        lost=checked.lost,
        duplicated=crew.total(Field.DUPLICATED),
        effects=checked.effects,
        external_duplicates=checked.external_duplicates,
        deduplicated=crew.total(Field.DEDUPLICATED),
        idempotency_key=config.idempotency_key,
        leases_lost=crew.total(Field.LEASES_LOST),
        lease_ms=config.lease,
        state_order=config.state_order,
        per_worker=crew.views(),
    )
