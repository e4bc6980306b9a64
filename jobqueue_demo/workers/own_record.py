"""The tool's own account of a queue file's run, kept in the workers' shared memory, out of
reach of the file's SQL (docs/queue-format.md, "How the tool judges").

The tables jqd_claims, jqd_effects and jqd_done commit in the transactions the file's `work:`
names, but they live in the scratch database, where the per-run user that runs the file's SQL
can write. So each worker also counts, per job, what it saw commit: claims, effects,
completions, failures. The verdict is those counts; the tables are read only to check that
they say the same. A difference means something other than the tool wrote them (the file's
SQL reaching them), and the run fails on it.

Each count is taken only where the parent never kills (a worker killed while holding the lock
would leave it held), so a kill cannot leave a commit uncounted.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Kind(enum.IntEnum):
    CLAIMED = 0  # a committed claim took the job
    EFFECT = 1  # the job's effect ran and its record committed
    DONE = 2  # the job's completion committed
    FAILED = 3  # the file's `fail` committed for the job
    INJECTED = 4  # --fail-rate made the job's effect fail


# Which table holds each kind the tool also writes in the database.
TABLES = {Kind.CLAIMED: "jqd_claims", Kind.EFFECT: "jqd_effects", Kind.DONE: "jqd_done"}


class Record:
    """Counts per kind and job in one shared array; slot 0 of each kind: how many jobs have any."""

    def __init__(self, ctx, jobs: int):
        self.jobs = jobs
        self.array = ctx.RawArray("i", len(Kind) * (jobs + 1))
        self.lock = ctx.Lock()

    def add(self, kind: Kind, ids: list[int]) -> None:
        base = kind * (self.jobs + 1)
        with self.lock:
            for job in ids:
                if self.array[base + job] == 0:
                    self.array[base] += 1
                self.array[base + job] += 1

    def count(self, kind: Kind, job: int) -> int:
        return self.array[kind * (self.jobs + 1) + job]

    def jobs_with(self, kind: Kind) -> int:
        return self.array[kind * (self.jobs + 1)]

    def counts(self, kind: Kind) -> dict[int, int]:
        base = kind * (self.jobs + 1)
        return {job: n for job, n in enumerate(self.array[base + 1 : base + self.jobs + 1], start=1) if n}


def injected_failure(job: int, rate: float) -> bool:
    """Whether --fail-rate makes job `job`'s first execution fail: floor(N * rate) of jobs 1..N,
    spread evenly over the ids, so a run's failures are known before it starts."""
    return int(job * rate) != int((job - 1) * rate)


@dataclass(frozen=True)
class Verdict:
    """What the record says, and the first place the tables disagree with it (None: they agree)."""

    completed: int
    done_twice: int
    left_claimed: int
    failed: int  # failed by the file's `fail` and never completed (a file without `retry`)
    effects: int
    repeats: int  # executions beyond each job's first
    run_again: int  # jobs whose effect ran again though no killed worker held them
    injected: int  # jobs whose first execution --fail-rate made fail
    fail_runs: int  # the file's `fail` committed, per job
    tampered: str | None


def verdict(record: Record, tables: dict[Kind, dict[int, int]], killed_held: set[int], retries: bool) -> Verdict:
    done = record.counts(Kind.DONE)
    claimed = record.counts(Kind.CLAIMED)
    effects = record.counts(Kind.EFFECT)
    failed = record.counts(Kind.FAILED)
    ended_failed = 0 if retries else sum(1 for job in failed if job not in done)
    return Verdict(
        completed=len(done),
        done_twice=sum(1 for n in done.values() if n > 1),
        left_claimed=sum(1 for job in claimed if job not in done and (retries or job not in failed)),
        failed=ended_failed,
        effects=sum(effects.values()),
        repeats=sum(effects.values()) - len(effects),
        run_again=sum(1 for job, n in effects.items() if n > 1 and job not in killed_held),
        injected=record.jobs_with(Kind.INJECTED),
        fail_runs=sum(failed.values()),
        tampered=_difference(record, tables),
    )


def _difference(record: Record, tables: dict[Kind, dict[int, int]]) -> str | None:
    for kind, table in TABLES.items():
        mine = record.counts(kind)
        theirs = tables[kind]
        for job in sorted(set(mine) | set(theirs), key=lambda j: (not isinstance(j, int), str(j))):
            if mine.get(job, 0) != theirs.get(job, 0):
                return (
                    f"{table} holds {theirs.get(job, 0)} row(s) for job {job}, the workers committed "
                    f"{mine.get(job, 0)}: something other than the tool wrote the tool's record"
                )
    return None
