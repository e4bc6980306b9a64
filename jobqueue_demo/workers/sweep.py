"""The bench: claim strategies x worker counts x isolation levels, against the same-run ceiling.

The ceiling is the `own-rows` strategy: the same transaction as every other strategy (lock,
effect, work, done, completion, commit) but on rows no other worker touches, so whatever it
cannot reach is the machine's and the server's limit, not contention's. Each step of the sweep
runs the ceiling next to the strategies, so a noisy neighbour skews both alike.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from ..engine.types import ServerInfo
from ..errors import UsageError, stop_of
from .crew import ISOLATIONS, MAX_WORKERS, WorkersConfig, WorkersSummary, run_workers, validate
from .own_queue import run_queue_file
from .strategies import REGISTRY

CEILING = next(s.name for s in REGISTRY if s.ceiling)
SWEPT_STRATEGIES = tuple(s.name for s in REGISTRY if s.swept)
SWEEPABLE = tuple(s.name for s in REGISTRY if not s.ceiling)
WORKER_COUNTS = (1, 2, 4, 8, 16)
# The default sweep finishes in about a minute on two cores; --full runs WORKER_COUNTS x FULL_JOBS.
QUICK_WORKERS = (2, 8)
QUICK_JOBS = 400
FULL_JOBS = 1000
HEADLINE_WORKERS = 8
MAX_REPEAT = 20


@dataclass(frozen=True)
class SweepConfig:
    strategies: tuple[str, ...] = SWEPT_STRATEGIES
    workers: tuple[int, ...] = WORKER_COUNTS
    isolations: tuple[str, ...] = ISOLATIONS
    jobs: int = 1000
    batch: int = 1
    work_ms: float = 1.0
    repeat: int = 1
    kill: int = 0
    queues: tuple = ()  # queue files (scenario/queue_file.QueueFile), run next to the strategies

    @property
    def runs(self) -> int:
        return len(self.isolations) * len(self.workers) * (1 + len(self.strategies) + len(self.queues)) * self.repeat


def parse_names(text: str, known: tuple[str, ...] | dict, what: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))  # each once, as --workers
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise UsageError(f"unknown {what} {', '.join(unknown) or '(none given)'}: choose from {', '.join(known)}")
    return names


def parse_counts(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(sorted({int(n) for n in text.split(",") if n.strip()}))
    except ValueError:
        raise UsageError(f"--workers takes comma-separated whole numbers like 1,2,4,8,16, got {text!r}") from None
    if not counts or counts[0] < 1 or counts[-1] > MAX_WORKERS:
        raise UsageError(f"--workers counts must be from 1 to {MAX_WORKERS}, got {text!r}")
    return counts


def validate_sweep(config: SweepConfig) -> None:
    if not 1 <= config.repeat <= MAX_REPEAT:
        raise UsageError(f"--repeat must be from 1 to {MAX_REPEAT}, got {config.repeat}")
    if config.kill and min(config.workers) < 2:
        raise UsageError("--kill needs at least 2 workers in every step, so that a worker survives")
    if config.kill >= min(config.workers):  # every step kills as many: the smallest must keep one
        raise UsageError(f"--kill must be from 0 to {min(config.workers) - 1} so that a worker survives "
                         f"in every step, got {config.kill}")
    for strategy in (CEILING, *config.strategies, *config.queues):
        for isolation in config.isolations:
            validate(_step_config(config, strategy, isolation, max(config.workers)))


@dataclass
class SweepRow:
    run: WorkersSummary  # the median run of this step
    ceiling_share: float

    def as_dict(self) -> dict:
        return {**self.run.as_dict(), "ceiling_share": self.ceiling_share}


@dataclass
class Headline:
    isolation: str
    workers: int
    skip_locked_vs_for_update: float | None
    skip_locked_share_of_ceiling: float | None


@dataclass
class SweepResult:
    server: str
    jobs: int
    work_ms: float
    batch: int
    repeat: int
    kill: int
    rows: list[SweepRow]
    headlines: list[Headline] = field(default_factory=list)
    deadlocks: dict[str, int] = field(default_factory=dict)  # isolation -> all strategies' deadlocks
    # The stop signal that ended the sweep early: `rows` are the groups finished before it.
    stopped: BaseException | None = field(default=None, repr=False)

    def as_dict(self) -> dict:
        return {
            "server": self.server,
            "jobs": self.jobs,
            "work_ms": self.work_ms,
            "batch": self.batch,
            "repeat": self.repeat,
            "kill": self.kill,
            "rows": [row.as_dict() for row in self.rows],
            "headlines": [asdict(h) for h in self.headlines],
            "deadlocks": self.deadlocks,
            "stopped": None if self.stopped is None else str(stop_of(self.stopped)),
        }


def _step_config(config: SweepConfig, strategy, isolation: str, workers: int) -> WorkersConfig:
    """One run's config; `strategy` a strategy's name or a queue file."""
    # The ceiling's rows are nobody else's: a killed worker's would never be done.
    kill = 0 if strategy == CEILING else min(config.kill, workers - 1)
    queue = None if isinstance(strategy, str) else strategy
    return WorkersConfig(
        strategy=strategy if queue is None else f"queue {queue.name}", isolation=isolation, workers=workers,
        jobs=config.jobs, batch=config.batch, work_ms=config.work_ms, kill=kill, queue=queue,
    )


def _run(config: WorkersConfig, server: ServerInfo) -> WorkersSummary:
    if config.queue is not None:
        return run_queue_file(config, server)
    return run_workers(config, server)


RowCallback = Callable[[SweepRow], None]
StepCallback = Callable[[int, str], None]  # runs done so far, the run about to start


def sweep(
    config: SweepConfig, server: ServerInfo, on_row: RowCallback | None = None, on_step: StepCallback | None = None
) -> SweepResult:
    """Run every step; each (isolation, workers) group starts with its ceiling."""
    validate_sweep(config)
    rows = []
    counter = _Counter(on_step)
    stopped = None
    try:
        for isolation in config.isolations:
            for workers in config.workers:
                rows.extend(_group(config, server, isolation, workers, on_row, counter))
        counter.step("done")
    except KeyboardInterrupt as stop:
        stopped = stop  # the groups finished so far still make a table
    result = SweepResult(server.label, config.jobs, config.work_ms, config.batch, config.repeat, config.kill, rows)
    result.stopped = stopped
    result.headlines = [_headline(rows, isolation, config.workers) for isolation in config.isolations]
    result.deadlocks = {
        i: sum(r.run.deadlocks for r in rows if r.run.isolation == i and r.run.strategy != CEILING) for i in config.isolations
    }
    return result


@dataclass
class _Counter:
    on_step: StepCallback | None
    done: int = 0

    def step(self, label: str) -> None:
        if self.on_step is not None:
            self.on_step(self.done, label)


def _group(config: SweepConfig, server: ServerInfo, isolation: str, workers: int, on_row, counter) -> list[SweepRow]:
    """The ceiling and each strategy at one worker count; repeats interleave, the median run counts."""
    names = (CEILING, *config.strategies, *config.queues)
    runs: list[list[WorkersSummary]] = [[] for _ in names]
    for _ in range(config.repeat):
        for i, name in enumerate(names):
            step = _step_config(config, name, isolation, workers)
            counter.step(f"{isolation} {step.strategy} x{workers}")
            run = _run(step, server)
            if run.stopped is not None:
                raise run.stopped  # a group cut short has no median to show
            runs[i].append(run)
            counter.done += 1
    medians = [_median_run(found) for found in runs]
    ceiling = medians[0].jobs_per_s
    rows = [_row(median, ceiling) for median in medians]
    for row in rows:
        if on_row is not None:
            on_row(row)
    return rows


def _median_run(runs: list[WorkersSummary]) -> WorkersSummary:
    ordered = sorted(runs, key=lambda s: s.jobs_per_s)
    return ordered[(len(ordered) - 1) // 2]


def _row(run: WorkersSummary, ceiling: float) -> SweepRow:
    return SweepRow(run, round(run.jobs_per_s / ceiling, 3) if ceiling else 0.0)


def _headline(rows: list[SweepRow], isolation: str, counts: tuple[int, ...]) -> Headline:
    workers = HEADLINE_WORKERS if HEADLINE_WORKERS in counts else max(counts)
    step = {r.run.strategy: r for r in rows if r.run.isolation == isolation and r.run.workers == workers}
    skip = step.get("skip-locked")
    for_update = step.get("for-update")
    return Headline(
        isolation=isolation,
        workers=workers,
        skip_locked_vs_for_update=round(skip.run.jobs_per_s / for_update.run.jobs_per_s, 2) if skip and for_update else None,
        skip_locked_share_of_ceiling=skip.ceiling_share if skip else None,
    )


# -- the plot ----------------------------------------------------------------------------


def write_plot(result: SweepResult, path: str) -> bool:
    """jobs/s against workers, one panel per isolation level; False when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    isolations = list(dict.fromkeys(r.run.isolation for r in result.rows))
    figure, axes = plt.subplots(1, len(isolations), figsize=(6 * len(isolations), 4.5), squeeze=False, sharey=True)
    for ax, isolation in zip(axes[0], isolations):
        _plot_panel(ax, [r.run for r in result.rows if r.run.isolation == isolation], isolation)
    axes[0][0].set_ylabel("jobs/s")
    figure.suptitle(f"{result.server}: {result.jobs} jobs, work {result.work_ms:g} ms in the transaction")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return True


def _plot_panel(ax, rows: list[WorkersSummary], isolation: str) -> None:
    for strategy in dict.fromkeys(r.strategy for r in rows):
        mine = [r for r in rows if r.strategy == strategy]
        style = {"linestyle": "--", "color": "black"} if strategy == CEILING else {"marker": "o"}
        label = "ceiling (own rows)" if strategy == CEILING else strategy
        ax.plot([r.workers for r in mine], [r.jobs_per_s for r in mine], label=label, **style)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted({r.workers for r in rows}), [str(w) for w in sorted({r.workers for r in rows})])
    ax.set_xlabel("workers")
    ax.set_title(isolation)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
