"""A queue file as a Scenario for `explore --queue`: two claimers A and B (an enqueuer E with
`enqueue_during`, a rescuer R when the file has `rescue:`), each running the file's statements
once, so that explore's every interleaving, faults, anomalies and shortest counterexample
work on the user's own SQL.

Each claimer claims one job (`:batch` is 1): the claim statement that returns the ids is the
step that captures `:job`, and the tool's own record (jqd_claims, jqd_effects, jqd_done) is
written by steps of its own in the transaction the file's `work:` names. The invariants read
only those tables, never the file's.
"""

from __future__ import annotations

from .model import Invariant, Scenario, SessionSpec, Statement
from .queue_file import QueueFile, QueueSql

CLAIMERS = ("A", "B")
JOBS = 2  # one for each claimer
RECORD_TABLES = (
    "CREATE TABLE jqd_claims (job_id INT NULL, worker INT NOT NULL)",
    "CREATE TABLE jqd_effects (job_id INT NULL, worker INT NOT NULL)",
    "CREATE TABLE jqd_done (job_id INT NULL, worker INT NOT NULL)",
)
INVARIANTS = (
    (
        "no job done twice",
        "SELECT job_id, COUNT(*) FROM jqd_done WHERE job_id IS NOT NULL GROUP BY job_id HAVING COUNT(*) > 1 ORDER BY job_id",
        (),
        "always",
    ),
    (
        "no job left claimed",
        "SELECT DISTINCT job_id FROM jqd_claims WHERE job_id IS NOT NULL"
        " AND job_id NOT IN (SELECT job_id FROM jqd_done WHERE job_id IS NOT NULL) ORDER BY job_id",
        (),
        "without-faults",
    ),
)


def queue_scenario(queue: QueueFile, enqueue_during: bool = False) -> Scenario:
    """The file as one Scenario per engine it is written for (Scenario.for_engine hands each out)."""
    variants = {engine: _scenario(queue, engine, queue.for_engine(engine), enqueue_during) for engine in queue.engines}
    for scenario in variants.values():
        scenario.variants = variants
    return variants[queue.engines[0]]


def _scenario(queue: QueueFile, engine: str, sql: QueueSql, enqueue_during: bool) -> Scenario:
    enqueued_first = 1 if enqueue_during else JOBS
    setup = [s.sql for s in sql.setup] + list(RECORD_TABLES)
    setup += [s.bind({"job": str(job)}) for job in range(1, enqueued_first + 1) for s in sql.enqueue]
    steps = []
    for worker, name in enumerate(CLAIMERS):
        steps += _claimer(name, worker, sql)
    names = list(CLAIMERS)
    if enqueue_during:
        names.append("E")
        steps += _enqueuer(sql, range(enqueued_first + 1, JOBS + 1))
    if sql.rescue:
        names.append("R")
        steps += _rescuer(sql)
    return Scenario(
        path=queue.path,
        title=queue.title or queue.name,
        sessions=tuple(SessionSpec(n) for n in names),
        steps=tuple(steps),
        setup=";\n".join(setup) + ";",
        summary=queue.models,
        invariants=tuple(Invariant(n, q, e, 0, holds) for n, q, e, holds in INVARIANTS),
        engine=engine,
        engines=queue.engines,
    )


def _bound(statement, worker: int) -> str:
    """The statement for one claimer: `:job` and `:jobs` left for the capture, the rest bound."""
    return statement.bind({"job": ":job", "jobs": ":job", "batch": "1", "worker": str(worker)})


def _claimer(name: str, worker: int, sql: QueueSql) -> list[Statement]:
    def step(text: str, line: int = 0, capture: str | None = None) -> Statement:
        return Statement(name, text, line, capture=capture)

    def record(table: str) -> Statement:
        return Statement(name, f"INSERT INTO {table} (job_id, worker) VALUES (:job, {worker})", 0, glued=True)

    gives = _capturing(sql.claim)
    steps = [step("BEGIN")]
    steps += [step(_bound(s, worker), s.line, "job" if i == gives else None) for i, s in enumerate(sql.claim)]
    steps.append(record("jqd_claims"))
    complete = [step(_bound(s, worker), s.line) for s in sql.complete]
    if sql.work == "after-commit":
        steps += [step("COMMIT"), record("jqd_effects"), step("BEGIN"), *complete, record("jqd_done"), step("COMMIT")]
    else:
        steps += [record("jqd_effects"), *complete, record("jqd_done"), step("COMMIT")]
    return steps


def _capturing(claim) -> int:
    """Which claim statement gives the ids: of those before the first that needs them (:job,
    :jobs), the first that reads (SELECT, WITH, RETURNING), else the last of them."""
    needing = next((i for i, s in enumerate(claim) if s.uses("job") or s.uses("jobs")), len(claim))
    reading = [i for i in range(needing) if _reads(claim[i].sql)]
    return reading[0] if reading else max(needing - 1, 0)


def _reads(sql: str) -> bool:
    return sql.lstrip().upper().startswith(("SELECT", "WITH")) or "RETURNING" in sql.upper()


def _enqueuer(sql: QueueSql, jobs) -> list[Statement]:
    steps = []
    for job in jobs:
        steps.append(Statement("E", "BEGIN", 0))
        steps += [Statement("E", s.bind({"job": str(job)}), s.line) for s in sql.enqueue]
        steps.append(Statement("E", "COMMIT", 0))
    return steps


def _rescuer(sql: QueueSql) -> list[Statement]:
    gives = _capturing(sql.rescue)
    steps = [Statement("R", "BEGIN", 0)]
    steps += [
        Statement("R", s.bind({"job": ":rescued", "jobs": ":rescued", "worker": "-1"}), s.line,
                  capture="rescued" if i == gives else None)
        for i, s in enumerate(sql.rescue)
    ]
    steps.append(Statement("R", "COMMIT", 0))
    return steps
